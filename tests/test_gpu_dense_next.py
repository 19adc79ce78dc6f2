"""smollm3, phi3 and mistral3 on the GPU backend (engine/gpu/dense_next.py's hooks) against
llama.cpp, on their tiny random-weight GGUFs (tests/data/tiny-next), at every position, as one
batch and one token at a time: the GPU mirror of test_models_dense_next.py. Runs on lavapipe in CI.

What each exercises: smollm3 its 4th layer without RoPE (the identity table); phi3 the fused
attn_qkv and gate|up ffn_up read as row views, partial NeoX rotation, rope_factors_short (and
_long past the original context, n_ctx 512) and rope.scaling.attn_factor; mistral3 YaRN with its
log multiplier and the q temperature from position 16 on (the english prompt's 44 positions cross
it, as do the one-token steps).

Tolerance: test_models_dense_next's (tests/tiny_next.py: at llama.cpp's 64 largest ids per position
mean <= 0.15, max <= 1.5, the same top-1 where its top-2 gap >= 0.5); these tests pin the float
path (f32 x and products: lavapipe's default, not a real GPU's), so the last position is held to
llama.cpp's all-F32 path at 0.01 mean / 0.05 max. Measured on lavapipe (worst position's mean, max against the top 64):
smollm3 0.13, 0.50; phi3 0.03, 0.09; mistral3 0.08, 0.30, batch and one token at a time alike; the
float path within 2e-5 of llama.cpp's (max 1.7e-5). Mistakes land far outside (float path, max):
smollm3 RoPE on every layer 1.8, phi3 long factors where short belong 11.5, mistral3 no temperature
0.84 (test_models_dense_next's docstring).

The real-GPU paths (f16 prefill products, int8-X prefill products, int8-x decode matvecs) forced on
lavapipe, the int8-x matvec for every row length (it takes 2,048-4,096 by default: these 64-wide
models have none): against the same top 64 at the same tolerance. Measured (worst position's mean,
max; batch / one token at a time): smollm3 chat 0.06, 0.19 / 0.07, 0.26; phi3 english 0.04, 0.10 /
0.03, 0.09; mistral3 english 0.05, 0.17 / 0.09, 0.35. smollm3 is checked on its chat prompt (12
positions) only: its tiny model amplifies 8-bit x (numpy's own 8-bit-x path is 0.21 mean / 1.05 max
off its float path over the english prompt), so there the f16 products' error and the 8-bit X's
(quantized at other points than llama.cpp's) add up to 0.24 mean; each alone is 0.14 there.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import CPU_ONLY_ARCHS, ModelConfig  # noqa: E402
from hearth.engine.errors import UnsupportedModelError  # noqa: E402
from hearth.engine.gguf import GGUFFile  # noqa: E402
from hearth.engine.gpu import GpuBackend, ops  # noqa: E402
from hearth.engine.gpu.dense_next import TensorView, tensor_view  # noqa: E402
from tests.gpu_fixtures import FLOAT_PATHS, check_greedy_steps, pick_adapter  # noqa: E402
from tests.tiny_next import assert_agrees, batch_logits, one_token_at_a_time, prompt_of  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
DATA = Path(__file__).parent / "data" / "tiny-next"
ARCHS = ["smollm3", "phi3", "mistral3"]
PROMPTS = ["chat", "english"]
# the prompt each architecture is checked on with the real-GPU paths forced (see the docstring)
FORCED_PROMPT = {"smollm3": "chat", "phi3": "english", "mistral3": "english"}


def _open(arch: str):
    d = DATA / arch
    m = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / m["file"])
    return d, m, g, ModelConfig.from_gguf(g)


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    d, m, g, cfg = _open(request.param)
    be = GpuBackend(cfg, g, 128, adapter=pick_adapter(), **FLOAT_PATHS)
    yield d, m, g, be
    be.close()


def test_they_run_on_the_gpu(tiny):
    _, _, _, be = tiny
    assert be.cfg.arch not in CPU_ONLY_ARCHS and not be.cfg.cpu_only
    assert not (be.int8 or be.f16 or be.mm8)          # pinned: the float path, on any adapter


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_as_one_batch(tiny, name):
    d, m, _, be = tiny
    ids = prompt_of(m, name)["ids"]
    got = batch_logits(be, ids)
    assert got.shape == (len(ids), be.cfg.n_vocab)
    assert_agrees(got, np.load(d / f"top64_{name}.npz"))


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_one_token_at_a_time(tiny, name):
    d, m, _, be = tiny
    assert_agrees(one_token_at_a_time(be, prompt_of(m, name)["ids"]), np.load(d / f"top64_{name}.npz"))


@pytest.mark.parametrize("name", PROMPTS)
def test_last_position_matches_float_path(tiny, name):
    d, m, _, be = tiny
    f32 = np.load(d / f"logits_f32path_last_{name}.npy")
    be.kv.clear()
    got = be.forward(np.asarray(prompt_of(m, name)["ids"], np.int32), 0)
    assert np.abs(got - f32).mean() <= 0.01
    assert np.abs(got - f32).max() <= 0.05


@pytest.mark.parametrize("name", PROMPTS)
def test_greedy_run(tiny, name):
    """llama.cpp's 16 greedy steps fed back one token at a time, the argmax taken on the GPU
    (forward_argmax): the same id at every step whose top-2 gap is >= 0.5."""
    _, m, _, be = tiny
    p = prompt_of(m, name)
    be.kv.clear()
    ids = list(p["ids"])
    got = be.forward_argmax(np.asarray(ids, np.int32), 0)
    checked = 0
    for i, (want, step) in enumerate(zip(p["greedy"]["ids"], p["greedy"]["steps"])):
        if step["margin_to_top2"] >= 0.5:
            assert got == want, f"greedy step {i}"
            checked += 1
        got = be.forward_argmax(np.array([want], np.int32), len(ids))
        ids.append(want)
    assert checked >= 4


def test_phi3_takes_the_long_factors_beyond_the_original_context():
    """n_ctx 512 > rope.scaling.original_context_length 256: rope_factors_long, as llama.cpp."""
    d, m, g, cfg = _open("phi3")
    be = GpuBackend(cfg, g, 512, adapter=pick_adapter(), **FLOAT_PATHS)
    try:
        ids = prompt_of(m, "english")["ids"]
        ref = np.load(d / "top64_english_long.npz")
        assert_agrees(batch_logits(be, ids), ref)
        assert_agrees(one_token_at_a_time(be, ids), ref)
    finally:
        be.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_the_real_gpu_paths_forced(arch, monkeypatch):
    """f16 and int8-X prefill products and the int8-x decode matvec, as a real GPU takes them; the
    int8-x matvec for every row length here (it takes 2,048-4,096 by default, ops.int8_ok) and the
    down product reading x quantized once a layer (ops.int8_pre_ok, 12,288 and more by default)."""
    monkeypatch.setattr(ops, "INT8_K_MIN", 32)
    monkeypatch.setattr(ops, "INT8_PRE_K_MIN", 128)
    d, m, g, cfg = _open(arch)
    be = GpuBackend(cfg, g, 128, adapter=pick_adapter(), int8=True, f16=True, mm8=True)
    try:
        if not (be.f16 and be.mm8):
            pytest.skip("the adapter lacks shader-f16 or the integer dot products")
        name = FORCED_PROMPT[arch]
        ids = prompt_of(m, name)["ids"]
        ref = np.load(d / f"top64_{name}.npz")
        assert_agrees(batch_logits(be, ids), ref)
        assert_agrees(one_token_at_a_time(be, ids), ref)
    finally:
        be.close()


def test_phi3_with_separate_qkv_gives_the_fused_files_logits(tmp_path):
    """Older phi3 files store q, k and v apart: read as they are, the same logits as the fused
    file's row views (bit for bit: the same bytes in the same kernels)."""
    from test_models_dense_next import _with_qkv_apart
    d, m, g, cfg = _open("phi3")
    apart = GGUFFile.open(_with_qkv_apart(d / m["file"], tmp_path / "apart.gguf"))
    assert "blk.0.attn_q.weight" in apart.tensors and "blk.0.attn_qkv.weight" not in apart.tensors
    ids = np.asarray(prompt_of(m, "english")["ids"], np.int32)
    outs = []
    for gg in (g, apart):
        be = GpuBackend(ModelConfig.from_gguf(gg), gg, 128, adapter=pick_adapter())
        try:
            outs.append(be.forward(ids, 0, all_logits=True))
        finally:
            be.close()
    np.testing.assert_array_equal(outs[0], outs[1])


def test_a_fused_tensor_of_the_wrong_shape_is_named():
    d, m, g, cfg = _open("phi3")
    t = g.tensors["blk.1.attn_qkv.weight"]
    bad = dict(g.tensors)
    bad[t.name] = dataclasses.replace(t, shape=(t.shape[0], t.shape[1] - 16))
    with pytest.raises(UnsupportedModelError, match=r"tiny-phi3.gguf: tensor blk.1.attn_qkv.weight has shape "
                                                    r"\[64, 112\], expected \[64, 128\]"):
        tensor_view(TensorView(g, bad), cfg, 128)


def test_q_temperature_kernel_against_numpy():
    """q_temperature.wgsl: rows [n, width] of the tokens at pos, pos + 1, ... times tq[pos + r],
    as mistral3.py multiplies them (float32 products: exact); rows past n untouched."""
    from gpu_fixtures import make_test_device, read_f32
    from hearth.engine.gpu.dense_next import q_temperature
    from hearth.engine.gpu.kernels import Kernels, dispatch_once
    dev = make_test_device()
    try:
        rng = np.random.default_rng(7)
        n, width, pos, max_ctx = 5, 3 * 64 + 16, 37, 48
        q = rng.standard_normal((n + 1, width)).astype(np.float32)          # [n + 1, width]: one row spare
        tq = (1 + 0.1 * np.log(np.floor(np.arange(max_ctx) / 16) + 1)).astype(np.float32)   # [max_ctx]
        qb, tb = dev.upload(q, "q"), dev.upload(tq, "tq")
        step = dev.upload(np.array([pos, n, 0, 0], np.uint32), "step")
        dispatch_once(dev, q_temperature(Kernels(dev)), [qb, tb, step], (n, 1, 1), width=width)
        want = q.copy()
        want[:n] *= tq[pos:pos + n, None]
        np.testing.assert_array_equal(read_f32(dev, qb, q.size).reshape(q.shape), want)
    finally:
        dev.destroy()


@pytest.mark.parametrize("arch", ARCHS)
def test_the_engine_loads_them_on_the_gpu_with_a_float16_cache(arch):
    """Engine.load(backend="gpu") takes them (the refusal by architecture is gone); with a float16
    KV cache the decode RoPE runs in its own pass (rope_store.wgsl), not fused into the Q|K|V
    product: every position against llama.cpp's top 64, one token at a time."""
    from hearth.engine import Engine
    d, m, _, _ = _open(arch)
    eng = Engine.load(d / m["file"], backend="gpu", n_ctx=64, kv_dtype="f16")
    try:
        assert eng.backend_info["backend"] == "gpu"
        ids = prompt_of(m, "english")["ids"]
        steps = np.stack([eng.feed([t]).copy() for t in ids])
        assert_agrees(steps, np.load(d / "top64_english.npz"))
    finally:
        eng.close()


def test_auto_takes_the_gpu_for_them_where_a_real_gpu_is_found(monkeypatch):
    """backend="auto" with a real GPU found (the probe's answer faked; lavapipe then runs it)."""
    from hearth.engine import Engine, gpu
    monkeypatch.setattr(gpu, "probe", lambda: {"vendor": "v", "device": "a real GPU", "real_gpu": True, "is_cpu": False})
    d, m, _, _ = _open("smollm3")
    eng = Engine.load(d / m["file"], backend="auto", n_ctx=32)
    try:
        assert eng.backend_info["backend"] == "gpu", eng.backend_info
    finally:
        eng.close()


def test_mistral3_greedy_steps_across_the_temperature_floor():
    """greedy_steps (the next step submitted before this one's id is read, as Engine.generate runs
    greedy decode) from position 12 to 22, across the floor of 16 where q's factor starts: the same
    ids as forward_argmax one step at a time."""
    _, m, g, cfg = _open("mistral3")
    ids = np.asarray(prompt_of(m, "chat")["ids"], np.int32)
    assert len(ids) < cfg.attn_temp_floor < len(ids) + 10
    be = GpuBackend(cfg, g, 64, adapter=pick_adapter())
    try:
        check_greedy_steps(be, ids, 10)
    finally:
        be.close()
