"""GpuBackend: the whole model on the GPU against the numpy backend (and llama.cpp's reference).

Runs on lavapipe in CI (selected explicitly when present); skipped only when wgpu finds no adapter.
lavapipe runs the 135M model at seconds per token, so sizes are small: each model is prefilled
once (module fixtures) and the tests read from that.

Bounds. Both backends compute in float32 from the same dequantized weights; only the order of the
sums differs (GPU: 8-wide chunks, lane sums, tiles), so logits agree to a few 1e-5 (measured: max
5e-5 on SmolLM2, logits spanning ~30). We assert mean |diff| (mean difference removed) <= 1e-3 and
max <= 2e-2 — 20x margin over what the rounding gives, and 100x below what any real bug does
(a wrong RoPE pair, a missing bias or norm, an off-by-one position moves logits by 0.3 to 20).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import ModelConfig  # noqa: E402
from hearth.engine.cpu_backend import CpuBackend  # noqa: E402
from hearth.engine.errors import ContextFullError  # noqa: E402
from hearth.engine.gguf import GGUFFile  # noqa: E402
from hearth.engine.gpu import GpuBackend  # noqa: E402
from tests.gpu_fixtures import FLOAT_PATHS, pick_adapter  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
MEAN_TOL, MAX_TOL = 1e-3, 2e-2
N_PROMPT, N_GREEDY = 6, 2


def centered(a, b):
    d = np.asarray(a, np.float64) - b
    d -= d.mean(axis=-1, keepdims=True)
    return np.abs(d)


def top2_gap(x):
    s = np.sort(x, axis=-1)
    return s[..., -1] - s[..., -2]


def run_both(path, ids, n_greedy, n_ctx=64):
    """Prefill `ids` on both backends with all logits, then greedy steps: GPU with forward_argmax and
    forward, numpy with forward. Returns a dict of everything the tests look at."""
    g = GGUFFile.open(path)
    cfg = ModelConfig.from_gguf(g)
    cpu = CpuBackend(cfg, g, n_ctx, int8=False)
    gpu = GpuBackend(cfg, g, n_ctx, adapter=pick_adapter(), **FLOAT_PATHS)   # the bounds above: f32 products
    r = {"cfg": cfg, "cpu": cpu, "gpu": gpu, "ids": list(ids)}
    r["cpu_all"] = cpu.forward(np.asarray(ids, np.int32), 0, all_logits=True)
    r["gpu_all"] = gpu.forward(np.asarray(ids, np.int32), 0, all_logits=True)
    steps = []
    pos = len(ids)
    tok = int(r["cpu_all"][-1].argmax())
    for _ in range(n_greedy):
        lc = cpu.forward(np.array([tok], np.int32), pos)
        gid = gpu.forward_argmax(np.array([tok], np.int32), pos)
        steps.append((tok, lc, gid))
        tok = int(lc.argmax())
        pos += 1
    r["steps"] = steps
    return r


@pytest.fixture(scope="module")
def smollm2(default_model_path, smollm2_reference):
    prompt = next(p for p in smollm2_reference["prompts"] if p["name"] == "english")
    r = run_both(default_model_path, prompt["ids"][:N_PROMPT], N_GREEDY)
    yield r
    r["gpu"].close()


def test_describe_names_the_adapter(smollm2):
    d = smollm2["gpu"].describe()
    assert d["backend"] == "gpu" and d["device"] and "vendor" in d and "driver" in d
    assert smollm2["gpu"].name == "gpu" and d["fallbacks"] == []


def test_prefill_logits_match_numpy_at_every_position(smollm2):
    got, ref = smollm2["gpu_all"], smollm2["cpu_all"]
    assert got.shape == ref.shape == (N_PROMPT, smollm2["cfg"].n_vocab) and got.dtype == np.float32
    err = centered(got, ref)
    assert err.mean(axis=-1).max() <= MEAN_TOL and err.max() <= MAX_TOL
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_prefill_logits_match_llamacpp(smollm2, reference_dir):
    ref = np.load(reference_dir / "smollm2" / "all_logits_english.npy")[:N_PROMPT]
    got = smollm2["gpu_all"]
    assert centered(got, ref).mean(axis=-1).max() <= 0.3     # the reference README's bound
    sure = top2_gap(ref) >= 1.0
    assert (got.argmax(-1)[sure] == ref.argmax(-1)[sure]).all()


def test_greedy_steps_match_numpy_until_a_close_call(smollm2):
    for tok, lc, gid in smollm2["steps"]:
        if top2_gap(lc) < 1e-3:
            break                               # a near tie: either token is right
        assert gid == int(lc.argmax())


def test_decode_logits_and_kv_match_numpy(smollm2):
    gpu, cpu = smollm2["gpu"], smollm2["cpu"]
    n = N_PROMPT + N_GREEDY
    assert gpu.kv.n_tokens == cpu.kv.n_tokens == n
    for layer in (0, smollm2["cfg"].n_layer - 1):
        kg, vg = gpu.kv.read_prefix(layer, n)
        kc, vc = cpu.kv.read_prefix(layer, n)
        assert kg.shape == kc.shape == (gpu.kv.n_kv_heads, n, gpu.kv.head_dim) and kg.dtype == np.float32
        assert np.abs(kg - kc).max() <= MAX_TOL and np.abs(vg - vc).max() <= MAX_TOL
    # the next token's full logits (forward, not forward_argmax) against numpy
    tok = int(smollm2["steps"][-1][1].argmax())
    lg = gpu.forward(np.array([tok], np.int32), n)
    lc = cpu.forward(np.array([tok], np.int32), n)
    assert centered(lg, lc).mean() <= MEAN_TOL and lg.argmax() == lc.argmax()


def test_prefix_roundtrip_is_bit_exact_and_resumes(smollm2, default_model_path):
    """write_prefix into a fresh GPU backend; its cache reads back bit-identical, and the next token
    gives the same logits as the backend that computed the prefix."""
    gpu = smollm2["gpu"]
    n = gpu.kv.n_tokens
    g = GGUFFile.open(default_model_path)
    fresh = GpuBackend(smollm2["cfg"], g, 64, adapter=pick_adapter())
    try:
        saved = [gpu.kv.read_prefix(i, n) for i in range(gpu.kv.n_layers)]
        for i, (k, v) in enumerate(saved):
            fresh.kv.write_prefix(i, n, k, v)
        for i in (0, 7, gpu.kv.n_layers - 1):
            k, v = fresh.kv.read_prefix(i, n)
            assert np.array_equal(k, saved[i][0]) and np.array_equal(v, saved[i][1])
        a = gpu.forward(np.array([42], np.int32), n)
        b = fresh.forward(np.array([42], np.int32), n)
        assert np.array_equal(a, b)
    finally:
        fresh.close()


def test_write_at_uploads_a_span_and_leaves_the_rest(smollm2, default_model_path):
    """A restore writes each part at its positions (write_at); what was resident before stays."""
    g = GGUFFile.open(default_model_path)
    gpu = GpuBackend(smollm2["cfg"], g, 64, adapter=pick_adapter())
    try:
        kv = gpu.kv
        rng = np.random.default_rng(3)
        shape = (kv.n_kv_heads, 20, kv.head_dim)
        k0, v0 = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        kv.write_prefix(2, 20, k0, v0)
        wide = rng.standard_normal((kv.n_kv_heads, 30, kv.head_dim)).astype(np.float32)
        k, v = wide[:, 5:12], -wide[:, 5:12]          # non-contiguous: 7 positions of each head
        kv.write_at(2, 9, k, v)
        rk, rv = kv.read_prefix(2, 20)
        ek, ev = k0.copy(), v0.copy()
        ek[:, 9:16], ev[:, 9:16] = k, v
        assert np.array_equal(rk, ek) and np.array_equal(rv, ev)
        with pytest.raises(ContextFullError):
            kv.write_at(2, 60, k, v)
        assert np.array_equal(kv.read_prefix(2, 20)[0], ek)
    finally:
        gpu.close()


def test_a_warm_up_leaves_nothing_resident_and_changes_no_result(smollm2, default_model_path):
    """The Engine runs `warm_up` on its background thread after a load; what is computed after it
    is bit-identical to what a backend that never warmed up computes."""
    g = GGUFFile.open(default_model_path)
    warmed, cold = (GpuBackend(smollm2["cfg"], g, 64, adapter=pick_adapter()) for _ in range(2))
    try:
        warmed.forward(np.array([7, 8, 9], np.int32), 0)   # something resident: the warm-up forgets it
        warmed.warm_up()
        assert warmed.kv.n_tokens == 0
        ids = np.asarray(smollm2["ids"], np.int32)
        a = warmed.forward(ids, 0, all_logits=True)
        b = cold.forward(ids, 0, all_logits=True)
        assert np.array_equal(a, b)
        for layer in (0, warmed.kv.n_layers - 1):
            for x, y in zip(warmed.kv.read_prefix(layer, len(ids)), cold.kv.read_prefix(layer, len(ids))):
                assert np.array_equal(x, y)
    finally:
        warmed.close()
        cold.close()


def test_context_full_is_refused_before_anything_runs(smollm2):
    gpu = smollm2["gpu"]
    before = gpu.kv.read_prefix(0, 4)
    with pytest.raises(ContextFullError):
        gpu.forward(np.arange(gpu.kv.max_ctx + 1, dtype=np.int32), 0)
    with pytest.raises(ValueError):
        gpu.forward(np.array([smollm2["cfg"].n_vocab], np.int32), 0)
    after = gpu.kv.read_prefix(0, 4)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])


def test_probe_reports_the_adapter_kind():
    p = probe()
    assert set(p) >= {"vendor", "device", "driver", "real_gpu"}
    if "llvmpipe" in p["device"].lower():
        assert p["real_gpu"] is False


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
def test_tiny_model_matches_numpy(reference_dir, arch):
    """Every architecture's flags on the GPU: rope_freqs (llama 3), q/k/v biases (qwen2), q/k norms
    and NeoX RoPE (qwen3), GeGLU, post-norms, embedding scale and sliding window (gemma3)."""
    d = reference_dir / "tiny" / arch
    m = json.loads((d / "manifest.json").read_text())
    ids = next(p for p in m["prompts"] if p["name"] == "english")["ids"]
    g = GGUFFile.open(d / m["file"])
    cfg = ModelConfig.from_gguf(g)
    cpu = CpuBackend(cfg, g, 64, int8=False)
    gpu = GpuBackend(cfg, g, 64, adapter=pick_adapter(), **FLOAT_PATHS)
    try:
        # prefill in two calls (matmul path, then the decode path at the end) so both plans run
        lc = cpu.forward(np.asarray(ids[:-1], np.int32), 0)
        lg = gpu.forward(np.asarray(ids[:-1], np.int32), 0)
        assert centered(lg, lc).mean() <= MEAN_TOL and centered(lg, lc).max() <= MAX_TOL
        lc = cpu.forward(np.asarray(ids[-1:], np.int32), len(ids) - 1)
        lg = gpu.forward(np.asarray(ids[-1:], np.int32), len(ids) - 1)
        assert centered(lg, lc).mean() <= MEAN_TOL and centered(lg, lc).max() <= MAX_TOL
        assert lg.argmax() == lc.argmax() or top2_gap(lc) < 1e-3
    finally:
        gpu.close()


def test_engine_on_the_gpu_restores_a_prefix_image(default_model_path):
    """The app-facing API on backend="gpu": a prefix image written by one GPU engine restores into a
    fresh one (KV bit-identical, the reply equal, only the rest computed); the CPU engine refuses it."""
    import io

    from hearth.engine import Engine, PrefixImageError, Sampling

    text = "The capital of France is"
    a = Engine.load(default_model_path, backend="gpu", n_ctx=48)
    b = Engine.load(default_model_path, backend="gpu", n_ctx=48)
    try:
        assert a.backend.name == "gpu" and a.backend_info
        img = io.BytesIO()
        a.save_prefix(text, img)
        n = len(a.tokens)
        img.seek(0)
        assert b.restore_prefix(text, img) == n and b.tokens == a.tokens
        for layer in (0, a.kv.n_layers - 1):
            ka, va = a.kv.read_prefix(layer, n)
            kb, vb = b.kv.read_prefix(layer, n)
            assert np.array_equal(ka, kb) and np.array_equal(va, vb)

        def reply(eng):
            events = list(eng.generate(text + " Paris", max_tokens=2, sampling=Sampling.greedy()))
            return "".join(e.text for e in events), events[-1].stats

        ra, _ = reply(a)
        rb, stats = reply(b)
        assert ra == rb
        assert stats.reused_tokens == n and stats.computed_tokens == len(b.tokenize(text + " Paris")) - n
        cpu = Engine.load(default_model_path, backend="cpu", n_ctx=48)
        img.seek(0)
        with pytest.raises(PrefixImageError):
            cpu.restore_prefix(text, img)
    finally:
        a.close()
        b.close()


def test_engine_on_the_gpu_restores_a_chat_of_two_segments(default_model_path, tmp_path):
    """A chat's segments (preset root, then two exchanges) written by one GPU engine restore into a
    fresh one, each part at its positions over what is resident: KV bit-identical, the same reply."""
    from hearth.engine import Engine, Sampling
    from hearth.engine.prefix import PrefixStore
    from hearth.engine.prefix.chat_images import ChatImages, Root

    preset = "<|im_start|>system\nAnswer briefly.<|im_end|>\n"
    turns = [f"<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n{r}<|im_end|>\n"
             for u, r in (("One?", "Uno."), ("Two?", "Dos."))]
    a = Engine.load(default_model_path, backend="gpu", n_ctx=128)
    b = Engine.load(default_model_path, backend="gpu", n_ctx=128)
    try:
        store = PrefixStore(tmp_path)
        chats = ChatImages(store)
        store.ensure(a, preset)
        root = Root.of_prefix(a, a.prefix_ids(preset))
        for i in (1, 2):
            a.prefill(a.tokenize(preset + "".join(turns[:i])))
            assert chats.save(a, root, owner="1", title="chat").bytes_written > 0
        ids = a.tokenize(preset + "".join(turns))
        store.ensure(b, preset)
        got = chats.restore(b, ids, Root.of_prefix(b, b.prefix_ids(preset)))
        assert got.n_tokens == len(ids) and got.restored == len(ids) - root.n and b.tokens == ids
        for layer in (0, a.kv.n_layers - 1):
            for x, y in zip(a.kv.read_prefix(layer, len(ids)), b.kv.read_prefix(layer, len(ids))):
                assert np.array_equal(x, y)

        def reply(eng):
            return "".join(e.text for e in eng.generate(ids, max_tokens=3, sampling=Sampling.greedy()))
        assert reply(a) == reply(b)
    finally:
        a.close()
        b.close()


def test_gemma3_270m_matches_numpy():
    """A real Q4_K_M model (Q4_K, Q5_0, Q6_K, Q8_0 kernels; head dim 256; sliding window; GeGLU; a
    262,144-token embedding larger than lavapipe binds in one buffer, so uploaded in two row parts)."""
    from model_paths import gemma3_model_path

    path = gemma3_model_path()
    if path is None:
        pytest.skip("the Gemma 3 270M test model is not installed (./dev test installs it)")
    g = GGUFFile.open(path)
    cfg = ModelConfig.from_gguf(g)
    cpu = CpuBackend(cfg, g, 32, int8=False)
    gpu = GpuBackend(cfg, g, 32, adapter=pick_adapter(), **FLOAT_PATHS)
    try:
        ids = np.array([2, 651, 6037, 529, 7001], np.int32)       # <bos> and four ordinary tokens
        lc, lg = cpu.forward(ids, 0), gpu.forward(ids, 0)
        assert centered(lg, lc).mean() <= MEAN_TOL and centered(lg, lc).max() <= MAX_TOL
        tok = int(lc.argmax())
        assert gpu.forward_argmax(np.array([tok], np.int32), 5) == int(cpu.forward(np.array([tok], np.int32), 5).argmax())
    finally:
        gpu.close()


def test_prefill_in_several_chunks_with_all_logits(reference_dir):
    """A prompt longer than the prefill chunk: each chunk attends to the ones before (positions,
    parameters rewritten per call), and all_logits comes back for every position."""
    d = reference_dir / "tiny" / "qwen2"
    m = json.loads((d / "manifest.json").read_text())
    ids = np.asarray(next(p for p in m["prompts"] if p["name"] == "english")["ids"], np.int32)
    g = GGUFFile.open(d / m["file"])
    cfg = ModelConfig.from_gguf(g)
    cpu = CpuBackend(cfg, g, 64, int8=False)
    gpu = GpuBackend(cfg, g, 64, adapter=pick_adapter(), chunk=16, **FLOAT_PATHS)
    try:
        assert len(ids) > 2 * gpu.chunk
        lc = cpu.forward(ids, 0, all_logits=True)
        lg = gpu.forward(ids, 0, all_logits=True)
        assert lg.shape == lc.shape == (len(ids), cfg.n_vocab)
        err = centered(lg, lc)
        assert err.mean(axis=-1).max() <= MEAN_TOL and err.max() <= MAX_TOL
        assert gpu.kv.n_tokens == len(ids)
    finally:
        gpu.close()
