"""qwen35 (Gated DeltaNet + gated attention) on the GPU backend (engine/gpu/hybrid.py), on the tiny
random-weight GGUF against llama.cpp at every position, as one batch and one token at a time (a
recurrent-state bug shows there first), against the CPU backend's float path, across prefill chunk
edges, and through the Engine: truncate(n) (a snapshot read back and restored, the rest
recomputed) gives a fresh computation's next logits, and a prefix image round-trips the state.

Tolerances: llama.cpp's, from ../shared/reference/README.md (tiny-next; tests/tiny_next.py); the
CPU float path (float32 x, exact dequantized weights) is the GPU's own arithmetic in another order:
1e-3 (measured ~6e-5 on lavapipe). The real-GPU paths (int8 x in decode matvecs, f16 or int8 X in
prefill products) are held to llama.cpp's tolerance, batch and one token at a time; they are not
compared with each other: 8-bit X in the prefill products moves the tiny model's logits by up to
1.2 from the float path (the CPU's int8 path by 1.2 too), while lavapipe's one-token matvecs on rows
of 64 keep f32 x (ops.int8_ok).
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from tests.gpu_fixtures import float_backend
from tests.tiny_next import PROMPTS, check_both_ways, check_greedy, one_token_at_a_time, prompt_of

N_CTX = 160


@pytest.fixture(scope="module")
def files(reference_dir):
    import json
    d = reference_dir / "tiny-next" / "qwen35"
    m = json.loads((d / "manifest.json").read_text())
    return d, m, GGUFFile.open(d / m["file"])


def gpu_backend(g, **kw):
    from hearth.engine.gpu.hybrid import GpuHybridBackend
    # the float path unless kw says otherwise (test_real_gpu_paths)
    return float_backend(GpuHybridBackend, g, N_CTX, **kw)


@pytest.fixture(scope="module")
def gpu(files):
    be = gpu_backend(files[2])
    yield be
    be.close()


@pytest.fixture(scope="module")
def cpu_float(files):
    g = files[2]
    return CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=N_CTX, int8=False)


def float_logits(cpu, ids, all_logits=True):
    cpu.kv.clear()
    with cpu.float_activations():
        return cpu.forward(ids, 0, all_logits=all_logits)


def test_state_is_kv_for_attention_layers_and_a_fixed_recurrent_state(gpu):
    hc = gpu.cfg.hybrid
    assert gpu.kv.recurrent and gpu.kv.kv.n_layers == 1 and gpu.kv.image_layers == 1
    assert gpu.kv.recurrent_nbytes == 3 * 4 * ((hc.d_conv - 1) * hc.conv_channels + hc.n_v_heads * hc.d_state ** 2)


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_batch_and_one_token_at_a_time(files, gpu, cpu_float, name):
    d, m, _ = files
    ids = prompt_of(m, name)["ids"]
    ref = np.load(d / f"top64_{name}.npz")
    batch, one = check_both_ways(gpu, ids, ref)
    want = float_logits(cpu_float, ids)
    assert np.abs(batch - want).max() < 1e-3
    assert np.abs(one - want).max() < 1e-3


def test_prefill_over_chunk_edges_continues_the_state(files, gpu, cpu_float):
    """Prompts longer than a delta-rule chunk (64) and than the backend's prefill chunk, fed in
    pieces that cut both: the state one batch of the CPU's float path reaches."""
    _, m, _ = files
    ids = (prompt_of(m, "english")["ids"] + prompt_of(m, "chat")["ids"]) * 3
    ids = ids[:150]
    want = float_logits(cpu_float, ids, all_logits=False)
    gpu.kv.clear()
    gpu.forward(ids[:70], 0)
    gpu.forward(ids[70:71], 70)
    got = gpu.forward(ids[71:], 71)
    assert np.abs(got - want).max() < 1e-3


def test_small_prefill_chunks_give_the_same_numbers(files, cpu_float):
    _, m, g = files
    ids = prompt_of(m, "english")["ids"]
    be = gpu_backend(g, chunk=16)
    try:
        got = be.forward(ids, 0)
    finally:
        be.close()
    assert np.abs(got - float_logits(cpu_float, ids, all_logits=False)).max() < 1e-3


@pytest.mark.parametrize("name", PROMPTS)
def test_greedy_run(files, gpu, name):
    check_greedy(gpu, prompt_of(files[1], name))


@pytest.mark.parametrize("pipelined", ["ahead", "pre", False])
def test_greedy_steps_keep_the_state_of_what_was_taken(files, gpu, monkeypatch, pipelined):
    """Stopping after k ids leaves the state after them: the step computed ahead (pipelined, either
    way: HEARTH_GPU_PIPELINE) is undone on the GPU, or (HEARTH_GPU_HYBRID_PIPELINE=0) none runs ahead."""
    monkeypatch.setattr(gpu, "pipelined", bool(pipelined))
    if pipelined:
        monkeypatch.setenv("HEARTH_GPU_PIPELINE", pipelined)
    ids = prompt_of(files[1], "chat")["ids"]
    gpu.kv.clear()
    first = gpu.forward(ids, 0)
    steps = gpu.greedy_steps(int(first.argmax()), len(ids), 10)
    taken = [next(steps) for _ in range(3)]
    steps.close()
    fed = ids + [int(first.argmax())] + taken[:2]
    assert gpu.kv.n_tokens == len(fed)
    nxt = gpu.forward([taken[2]], len(fed))
    gpu.kv.clear()
    want = gpu.forward(fed + [taken[2]], 0)
    assert np.abs(nxt - want).max() < 1e-3


def test_real_gpu_paths(files):
    """int8 x in the decode matvecs, f16 and int8 X in the prefill products: what the H200 runs."""
    d, m, g = files
    be = gpu_backend(g, int8=True, f16=True, mm8=True)
    try:
        if not (be.int8 or be.f16 or be.mm8):
            pytest.skip("the adapter has neither the integer dot products nor shader-f16")
        for name in PROMPTS:
            ids = prompt_of(m, name)["ids"]
            ref = np.load(d / f"top64_{name}.npz")
            check_both_ways(be, ids, ref)
    finally:
        be.close()


def test_float16_kv_cache(files):
    """The attention layer's K/V in float16 (rope_store and attention's f16 words): the CPU float
    path with the same float16 cache (numpy's rounding, which the GPU's stores reproduce)."""
    _, m, g = files
    ids = prompt_of(m, "english")["ids"]
    cpu = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=N_CTX, int8=False, kv_dtype="f16")
    want = float_logits(cpu, ids)
    be = gpu_backend(g, kv_dtype="f16")
    try:
        assert be.kv.dtype == np.float16
        batch = be.forward(ids, 0, all_logits=True)
        one = one_token_at_a_time(be, ids)
    finally:
        be.close()
    assert np.abs(batch - want).max() < 1e-3
    assert np.abs(one - want).max() < 1e-3


def test_beta_and_alpha_of_one_type_are_one_decode_dispatch(files, cpu_float, tmp_path, monkeypatch):
    """ssm_beta and ssm_alpha of one GPU type are uploaded as one matrix, so a decoded token's
    in-projections are one matvec (the tiny file mixes their types: rewritten here with both as their
    exact F32 values, the same model): one token at a time, the CPU float path's logits."""
    from hearth.engine.quants import dequantize
    from tests import gguf_rewrite as R
    d, m, g = files
    monkeypatch.delenv("HEARTH_GPU_DELTA_DECODE", raising=False)     # =old keeps them apart

    def alpha_f32(name, t):
        if not name.endswith(("ssm_alpha.weight", "ssm_beta.weight")):
            return None
        return [R.array_tensor(name, dequantize(t.data, t.type, t.shape, name).astype(np.float32))]

    path = R.rewrite(d / m["file"], tmp_path / "alpha-f32.gguf", tensors=alpha_f32)
    be = gpu_backend(GGUFFile.open(path))
    try:
        linear = [L for L in be.layers if "w_in" in L]
        assert linear and all(len(L["w_in"]) == 3 and L["w_in"][2].rows == 2 * be.cfg.hybrid.n_v_heads
                              for L in linear)
        assert sum(op["label"].endswith(".in") for op in be.decode_plan.ops) == len(linear)
        ids = prompt_of(m, "chat")["ids"][:8]
        assert np.abs(one_token_at_a_time(be, ids) - float_logits(cpu_float, ids)).max() < 1e-3
    finally:
        be.close()
