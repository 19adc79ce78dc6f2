"""The half-precision prefill product (ops.matmul16, engine/wgsl/matmul16.wgsl) for every weight type
it reads, in every tile it is built for, against float64 references; and the whole default model
with it forced on. Runs on lavapipe in CI (which has shader-f16); skipped where the adapter lacks it.

Tolerance. The kernel rounds W (dequantized in f32) and X to f16 and sums each output's products in
f16 over FLUSH steps of 32 weights (16 products a lane of a vec2 a step), then in f32. f16 keeps 11 bits
(unit roundoff u = 2^-11 = 4.9e-4); an n-term f16 sum of random-signed terms has an error of about
u * sqrt(n) / 2.4 of its size (n = 16 a step: 1.6u = 8e-4), and the f32 sum of those partials keeps
that ratio for any K (measured on lavapipe and the H200: 6.5-7.5e-4 of the output's norm with one
step, 8.6-9.3e-4 with two, the default). F16_TOL = 3e-3 (~6u) leaves
margin and is still 300x below what an indexing mistake gives (errors of order 1); every result
must also be more than 1e-5 off the exact product, so a test cannot pass on an f32 kernel by mistake.
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.gpu import ops  # noqa: E402
from hearth.engine.gpu.kernels import dispatch_once  # noqa: E402
from hearth.engine.models.layers import gelu_tanh_mul, silu_mul  # noqa: E402
from gpu_fixtures import dequant_reference, kernels_fixture, poisoned, random_rows, read_f32, rel_err  # noqa: E402

pytestmark = pytest.mark.gpu

F16_TOL = 3e-3
F16_USED = 1e-5
TILES = [(8, 8), (8, 4), (4, 8), (4, 4), (4, 2)]
# whole-model bounds with f16 prefill (SmolLM2 on lavapipe, 6 prompt tokens): measured centered
# |dlogit| mean 0.007-0.009 / max 0.050-0.054 over the positions (two runs), K/V max |diff| 0.026;
# bounds ~5x that
F16_MODEL_MEAN, F16_MODEL_MAX, F16_MODEL_KV = 0.05, 0.3, 0.15


ks = kernels_fixture("f16")


@pytest.fixture
def rng():
    return np.random.default_rng()


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def f16_ref(x, w):
    """float64 X W^T from X and W rounded to f16 as the kernel rounds them (W via f32)."""
    return (x.astype(np.float16).astype(np.float64)
            @ w.astype(np.float32).astype(np.float16).astype(np.float64).T)


def run(ks, qtype, raw, x, m, tile=None, flush=None, **kw):
    dev = ks.dev
    n, k = x.shape
    y = poisoned(dev, n * m)
    dispatch_once(dev, ops.matmul16(ks, [qtype], tile=tile, flush=flush, **kw), [dev.upload(x), y, dev.upload(raw)],
                  ops.matmul16_groups(m, n, tile), **ops.matmul_params([qtype], k, m, n, ldy=m))
    return read_f32(dev, y, n * m).reshape(n, m)


def check(got, x, w):
    exact = x.astype(np.float64) @ w.T
    assert rel_err(got, f16_ref(x, w)) < F16_TOL
    assert F16_USED < rel_err(got, exact) < F16_TOL


@pytest.mark.parametrize("qtype", ops.F16_TYPES)
def test_matmul16_reads_every_block_type(ks, rng, qtype):
    k, m, n = 512, 150, 77                      # partial tiles in both directions
    raw = random_rows(rng, qtype, m, k)
    x = f32(rng, n, k)
    check(run(ks, qtype, raw, x, m), x, dequant_reference(raw, qtype, k))


@pytest.mark.parametrize("tile", TILES)
def test_matmul16_every_tile(ks, rng, tile):
    k, m, n = 160, 16 * tile[0] + 9, 16 * tile[1] * 2 + 5
    raw = random_rows(rng, "Q5_1", m, k)
    x = f32(rng, n, k)
    check(run(ks, "Q5_1", raw, x, m, tile=tile), x, dequant_reference(raw, "Q5_1", k))


@pytest.mark.parametrize("flush", [1, 2, 3])
def test_matmul16_error_does_not_grow_with_k(ks, rng, flush):
    """K = 4,096: the f16 partial sums span FLUSH steps of 32 weights, the rest is summed in f32, so
    the error stays that of one span (a K-long f16 sum would be ~16x worse here)."""
    k, m, n = 4096, 40, 20
    raw = random_rows(rng, "F16", m, k)
    x = f32(rng, n, k)
    w = dequant_reference(raw, "F16", k)
    got = run(ks, "F16", raw, x, m, flush=flush)
    assert rel_err(got, f16_ref(x, w)) < F16_TOL * (1 + flush) / 2
    assert rel_err(got, x.astype(np.float64) @ w.T) < F16_TOL * (1 + flush) / 2


def test_matmul16_xshift_keeps_large_x_in_range(ks, rng):
    """X past f16's 65,504 (the down product's act(gate) * up can be): with xshift 8 (X stored times
    2^-8, W times 2^8) the product is right; without, those values do not exist in f16."""
    k, m, n = 256, 40, 20
    w = (rng.standard_normal((m, k)) * 0.01).astype(np.float16)
    x = f32(rng, n, k) * 100
    big = rng.random(x.shape) < 0.05
    x[big] = np.float32(1e5) * np.sign(x[big])
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    raw = w.view(np.uint8)
    assert rel_err(run(ks, "F16", raw, x, m, xshift=ops.MATMUL16_FF_SHIFT), exact) < F16_TOL
    bad = run(ks, "F16", raw, x, m)
    assert not np.isfinite(bad).all() or rel_err(bad, exact) > 0.1


def test_matmul16_bias_and_residual_into_a_column_range(ks, rng):
    dev = ks.dev
    k, m, n = 128, 80, 130
    raw = random_rows(rng, "Q4_1", m, k)
    x = f32(rng, n, k)
    w = dequant_reference(raw, "Q4_1", k)
    b = f32(rng, m)
    y0 = f32(rng, n, 2 * m)
    ybuf = dev.upload(y0)
    dispatch_once(dev, ops.matmul16(ks, ["Q4_1"], bias=True, residual=True),
                  [dev.upload(x), ybuf, dev.upload(raw), dev.upload(b)], ops.matmul16_groups(m, n),
                  **ops.matmul_params(["Q4_1"], k, m, n, ldy=2 * m, y_off=m))
    got = read_f32(dev, ybuf, n * 2 * m).reshape(n, 2 * m)
    assert np.array_equal(got[:, :m], y0[:, :m])
    assert rel_err(got[:, m:] - y0[:, m:] - b, f16_ref(x, w)) < F16_TOL


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_matmul16_up_applies_the_gate_in_place(ks, rng, act):
    dev = ks.dev
    k, m, n = 256, 72, 50
    rg, ru = random_rows(rng, "Q4_K", m, k), random_rows(rng, "Q8_0", m, k)
    x = f32(rng, n, k)
    y = poisoned(dev, n * m)
    xb = dev.upload(x)
    for raw, t, glu in ((rg, "Q4_K", False), (ru, "Q8_0", True)):
        dispatch_once(dev, ops.matmul16(ks, [t], act=act, epi_glu=glu), [xb, y, dev.upload(raw)],
                      ops.matmul16_groups(m, n), **ops.matmul_params([t], k, m, n, ldy=m))
    gate = f16_ref(x, dequant_reference(rg, "Q4_K", k)).astype(np.float32)
    up = f16_ref(x, dequant_reference(ru, "Q8_0", k)).astype(np.float32)
    ref = silu_mul(gate, up) if act == "silu" else gelu_tanh_mul(gate, up)
    assert rel_err(read_f32(dev, y, n * m).reshape(n, m), ref) < F16_TOL


@pytest.mark.parametrize("m,n,tile", [(14336, 2048, ops.MATMUL16_TILE), (1024, 2048, ops.MATMUL16_TILE),
                                      (512, 2048, (4, 8)), (192, 256, (4, 4))])
def test_matmul16_tile_keeps_the_gpu_busy(m, n, tile):
    assert ops.matmul16_tile(m, n) == tile


def test_matmul16_refuses_f32_weights_and_unbuilt_tiles(ks):
    with pytest.raises(ValueError):
        ops.matmul16(ks, ["F32"])
    with pytest.raises(ValueError):
        ops.matmul16(ks, ["Q4_0"], tile=(2, 8))


@pytest.mark.slow
def test_whole_model_with_f16_prefill_stays_close_to_numpy(default_model_path, smollm2_reference, ks):
    """SmolLM2 with every prefill product in f16 (forced: lavapipe keeps f32 by default, since the
    unchanged bounds of test_gpu_backend.py (max |dlogit| <= 2e-2) are tighter than f16 inputs give:
    0.054 measured). Bounds (module docstring's F16_MODEL_*): all-position logits and the K/V cache
    of every layer near numpy's, the same argmax where numpy's top two are 0.3 apart, and the first
    decode step (f32 matvecs over the f16-made cache) picks numpy's token."""
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.cpu_backend import CpuBackend  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.gpu import GpuBackend  # noqa: PLC0415
    ids = np.asarray(next(p for p in smollm2_reference["prompts"] if p["name"] == "english")["ids"][:6], np.int32)
    g = GGUFFile.open(default_model_path)
    cfg = ModelConfig.from_gguf(g)
    cpu = CpuBackend(cfg, g, 64, int8=False)
    default = GpuBackend(cfg, g, 64, adapter=ks.dev.adapter)
    assert default.f16 is False                  # a CPU rasterizer keeps f32 prefill unless asked
    default.close()
    gpu = GpuBackend(cfg, g, 64, adapter=ks.dev.adapter, f16=True)
    try:
        assert gpu.f16 and any(op["kernel"].name == "matmul16.wgsl" for op in gpu.prefill_plan.ops)
        lc = cpu.forward(ids, 0, all_logits=True)
        lg = gpu.forward(ids, 0, all_logits=True)
        d = lg.astype(np.float64) - lc
        d = np.abs(d - d.mean(axis=-1, keepdims=True))
        print("f16 prefill: centered |dlogit| mean per position", d.mean(axis=-1), "max", d.max())
        assert d.mean(axis=-1).max() <= F16_MODEL_MEAN and d.max() <= F16_MODEL_MAX
        assert d.max() > 1e-3                    # the f16 products did run
        s = np.sort(lc, axis=-1)
        sure = s[:, -1] - s[:, -2] >= 0.3
        assert (lg.argmax(-1)[sure] == lc.argmax(-1)[sure]).all()
        n = len(ids)
        for layer in range(cfg.n_layer):
            for a, b in zip(gpu.kv.read_prefix(layer, n), cpu.kv.read_prefix(layer, n)):
                assert np.abs(a - b).max() <= F16_MODEL_KV
        tok = int(lc[-1].argmax())
        nc = cpu.forward(np.array([tok], np.int32), n)
        s = np.sort(nc)
        assert gpu.forward_argmax(np.array([tok], np.int32), n) == int(nc.argmax()) or s[-1] - s[-2] < 0.3
    finally:
        gpu.close()


@pytest.mark.parametrize("m,chunk", [(512, 2048), (2880, 2048), (14336, 2048), (576, 256), (100, 64)])
def test_tiles_by_n_cover_every_call_once_with_the_tile_for_its_range(m, chunk):
    ranges = ops.tiles_by_n(m, chunk, ops.matmul16_tile)
    for n in range(1, chunk + 1):
        hits = [(t, lo, hi) for t, lo, hi in ranges if lo < n <= hi]
        assert len(hits) == 1, (n, ranges)
        t, lo, hi = hits[0]
        assert t == ops.matmul16_tile(m, hi)
    assert ranges[0][2] == chunk and ranges[-1][1] == 0


@pytest.mark.parametrize("mm8", [False, True], ids=["f16", "int8"])
def test_a_short_prefill_takes_its_own_tile_and_gives_the_same_logits(default_model_path, ks, monkeypatch, mm8):
    """With MATMUL16_MIN_GROUPS raised to 10, SmolLM2's 576-row products take the 8x8 tile for calls of
    129..256 tokens and a smaller one for up to 128 (the o and down products add into the residual
    stream, so a call that dispatched both would differ): the plan holds both, a call dispatches one, and the
    logits equal those of the chunk's tile alone (HEARTH_GPU_TILE_BY_N=0): a tile changes which thread
    sums an output, not the order of its sum."""
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.gpu import GpuBackend  # noqa: PLC0415
    monkeypatch.setattr(ops, "MATMUL16_MIN_GROUPS", 10)
    g = GGUFFile.open(default_model_path)
    cfg = ModelConfig.from_gguf(g)
    ids = (np.arange(140, dtype=np.int32) * 37) % cfg.n_vocab

    def run(by_n):
        monkeypatch.setenv("HEARTH_GPU_TILE_BY_N", "1" if by_n else "0")
        be = GpuBackend(cfg, g, 512, adapter=ks.dev.adapter, chunk=256, f16=not mm8, mm8=mm8)
        try:
            assert (be.mm8 if mm8 else be.f16)
            ops_n = len(be.prefill_plan.ops)
            out = [be.forward(ids[:n], 0, all_logits=True) for n in (60, 140)]
            return ops_n, out
        finally:
            be.close()
    n_by, by = run(True)
    n_one, one = run(False)
    assert n_by > n_one                          # the plan holds a second tile's ops
    for a, b in zip(by, one):
        np.testing.assert_array_equal(a, b)
