"""Every WGSL kernel against the numpy backend's own functions (engine/models/layers.py) or a float64
reference, on fresh random data each run, with outputs poisoned (NaN) first so an unwritten element
fails. Runs on lavapipe in CI (selected explicitly when present); skipped only when wgpu finds no
adapter at all. Tolerance: tests/gpu_fixtures.RTOL (relative to the output's norm, float32)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import RopeScaling  # noqa: E402
from hearth.engine.gpu import ops  # noqa: E402
from hearth.engine.gpu.kernels import dispatch_once  # noqa: E402
from hearth.engine.models.layers import Rope, attention, gelu_tanh_mul, rms_norm, silu_mul  # noqa: E402
from gpu_fixtures import (RTOL, dequant_reference, poisoned, random_rows, read_f32, rel_err,  # noqa: E402
                          device_and_kernels_fixtures)

pytestmark = pytest.mark.gpu


dev, ks = device_and_kernels_fixtures()


@pytest.fixture
def rng():
    return np.random.default_rng()   # fresh data every run


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("qtype", ops.GPU_TYPES)
def test_matvec_reads_every_block_type(dev, ks, rng, qtype):
    k, m = 512, 44                                    # m not a multiple of the rows per workgroup
    raw = random_rows(rng, qtype, m, k)
    w = dequant_reference(raw, qtype, k)
    x = f32(rng, k)
    y = poisoned(dev, m)
    dispatch_once(dev, ops.matvec(ks, [qtype]), [dev.upload(x), y, dev.upload(raw)], ops.matvec_groups(m),
                  **ops.matvec_params([qtype], k, [m]))
    assert rel_err(read_f32(dev, y, m), w @ x) < RTOL


def test_matvec_fused_norm_three_matrices_and_bias(dev, ks, rng):
    """Q|K|V in one dispatch from three differently quantized matrices, RMSNorm fused, bias added."""
    k, rows, types = 256, [64, 24, 24], ["Q4_1", "Q8_0", "Q5_0"]
    raws = [random_rows(rng, t, r, k) for t, r in zip(types, rows)]
    w = np.concatenate([dequant_reference(r, t, k) for r, t in zip(raws, types)])
    x, g, b = f32(rng, k), f32(rng, k), f32(rng, sum(rows))
    ref = rms_norm(x[None], g, 1e-5)[0].astype(np.float64) @ w.T + b
    y = poisoned(dev, sum(rows))
    kern = ops.matvec(ks, types, norm=True, bias=True)
    dispatch_once(dev, kern, [dev.upload(x), y] + [dev.upload(r) for r in raws] + [dev.upload(g), dev.upload(b)],
                  ops.matvec_groups(sum(rows)), **ops.matvec_params(types, k, rows, eps=1e-5))
    assert rel_err(read_f32(dev, y, sum(rows)), ref) < RTOL


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_matvec_glu_with_norm(dev, ks, rng, act):
    k, m = 320, 96
    rg, ru = random_rows(rng, "Q4_K" if k % 256 == 0 else "Q4_0", m, k), random_rows(rng, "Q6_K" if k % 256 == 0 else "Q8_0", m, k)
    tg = "Q4_K" if k % 256 == 0 else "Q4_0"
    tu = "Q6_K" if k % 256 == 0 else "Q8_0"
    x, g = f32(rng, k), f32(rng, k)
    h = rms_norm(x[None], g, 1e-6)
    gate = (h @ dequant_reference(rg, tg, k).T.astype(np.float32))
    up = (h @ dequant_reference(ru, tu, k).T.astype(np.float32))
    ref = (silu_mul(gate, up) if act == "silu" else gelu_tanh_mul(gate, up))[0]
    y = poisoned(dev, m)
    kern = ops.matvec(ks, [tg, tu], mode="glu", act=act, norm=True)
    dispatch_once(dev, kern, [dev.upload(x), y, dev.upload(rg), dev.upload(ru), dev.upload(g)], ops.matvec_groups(m),
                  **ops.matvec_params([tg, tu], k, [m, m], eps=1e-6, mode="glu"))
    assert rel_err(read_f32(dev, y, m), ref) < RTOL


def test_matvec_residual_add_with_offsets(dev, ks, rng):
    k, m = 256, 64
    raw = random_rows(rng, "Q4_K", m, k)
    xs = f32(rng, 3 * k)                        # x taken from the middle third
    y0 = f32(rng, 2 * m)                        # residual in the second half
    ybuf = dev.upload(y0)
    dispatch_once(dev, ops.matvec(ks, ["Q4_K"], residual=True), [dev.upload(xs), ybuf, dev.upload(raw)],
                  ops.matvec_groups(m), **ops.matvec_params(["Q4_K"], k, [m], x_off=k, y_off=m))
    got = read_f32(dev, ybuf, 2 * m)
    assert np.array_equal(got[:m], y0[:m])
    assert rel_err(got[m:], y0[m:] + dequant_reference(raw, "Q4_K", k) @ xs[k:2 * k]) < RTOL


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K"])
def test_matmul_prefill_tiles(dev, ks, rng, qtype):
    k, m, n = 256, 70, 37                       # partial tiles in both directions
    raw = random_rows(rng, qtype, m, k)
    x = f32(rng, n, k)
    y = poisoned(dev, n * m)
    dispatch_once(dev, ops.matmul(ks, [qtype]), [dev.upload(x), y, dev.upload(raw)], ops.matmul_groups(m, n),
                  **ops.matmul_params([qtype], k, m, n, ldy=m))
    ref = x.astype(np.float64) @ dequant_reference(raw, qtype, k).T
    assert rel_err(read_f32(dev, y, n * m).reshape(n, m), ref) < RTOL


def test_matmul_bias_and_residual_into_a_column_range(dev, ks, rng):
    k, m, n = 128, 80, 130
    raw = random_rows(rng, "Q4_1", m, k)
    x = f32(rng, n, k)
    prod = x.astype(np.float64) @ dequant_reference(raw, "Q4_1", k).T
    b = f32(rng, m)
    y0 = f32(rng, n, 2 * m)
    ybuf = dev.upload(y0)
    dispatch_once(dev, ops.matmul(ks, ["Q4_1"], bias=True, residual=True), [dev.upload(x), ybuf, dev.upload(raw), dev.upload(b)],
                  ops.matmul_groups(m, n), **ops.matmul_params(["Q4_1"], k, m, n, ldy=2 * m, y_off=m))
    got = read_f32(dev, ybuf, n * 2 * m).reshape(n, 2 * m)
    assert np.array_equal(got[:, :m], y0[:, :m])
    assert rel_err(got[:, m:], y0[:, m:] + prod + b) < RTOL


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_matmul_up_applies_the_gate_in_place(dev, ks, rng, act):
    """Prefill's gated FFN: gate = X Wg^T is in Y; the up product leaves act(gate) * up there."""
    k, m, n = 96, 72, 50
    rg, ru = random_rows(rng, "Q5_0", m, k), random_rows(rng, "Q4_K" if k % 256 == 0 else "Q8_0", m, k)
    tu = "Q4_K" if k % 256 == 0 else "Q8_0"
    x = f32(rng, n, k)
    y = poisoned(dev, n * m)
    xb = dev.upload(x)
    dispatch_once(dev, ops.matmul(ks, ["Q5_0"]), [xb, y, dev.upload(rg)], ops.matmul_groups(m, n),
                  **ops.matmul_params(["Q5_0"], k, m, n, ldy=m))
    dispatch_once(dev, ops.matmul(ks, [tu], act=act, epi_glu=True), [xb, y, dev.upload(ru)], ops.matmul_groups(m, n),
                  **ops.matmul_params([tu], k, m, n, ldy=m))
    gate = x @ dequant_reference(rg, "Q5_0", k).T.astype(np.float32)
    up = x @ dequant_reference(ru, tu, k).T.astype(np.float32)
    ref = silu_mul(gate, up) if act == "silu" else gelu_tanh_mul(gate, up)
    assert rel_err(read_f32(dev, y, n * m).reshape(n, m), ref) < RTOL


def _rope_table(rope: Rope, max_ctx: int) -> np.ndarray:
    c, s = rope.cos_sin(0, max_ctx)
    return np.stack([c[:, 0, :], s[:, 0, :]], axis=-1).astype(np.float32)   # [max_ctx, n_rot/2, 2]


@pytest.mark.parametrize("neox,qk_norm,hd", [(False, False, 64), (True, False, 64), (True, True, 32), (True, True, 128)])
def test_rope_store_writes_q_and_cache(dev, ks, rng, neox, qk_norm, hd):
    nh, nkv, n, pos, max_ctx = 4, 2, 5, 9, 32
    rope = Rope(hd, 10000.0, neox, RopeScaling())
    qkv = f32(rng, n, (nh + 2 * nkv) * hd)
    qn, kn = f32(rng, hd), f32(rng, hd)
    q = qkv[:, :nh * hd].reshape(n, nh, hd).copy()
    k = qkv[:, nh * hd:(nh + nkv) * hd].reshape(n, nkv, hd).copy()
    v = qkv[:, (nh + nkv) * hd:].reshape(n, nkv, hd)
    if qk_norm:
        q, k = rms_norm(q, qn, 1e-6), rms_norm(k, kn, 1e-6)
    cs = rope.cos_sin(pos, n)
    rope.apply(q, cs)
    rope.apply(k, cs)
    qo = poisoned(dev, n * nh * hd)
    kc0, vc0 = f32(rng, nkv, max_ctx, hd), f32(rng, nkv, max_ctx, hd)
    kc, vc = dev.upload(kc0), dev.upload(vc0)
    bufs = [dev.upload(qkv), qo, kc, vc, dev.upload(_rope_table(rope, max_ctx)), dev.upload(np.array([pos, n], np.uint32))]
    if qk_norm:
        bufs += [dev.upload(qn), dev.upload(kn)]
    dispatch_once(dev, ops.rope_store(ks, hd, qk_norm), bufs, ops.rope_groups(n, nh, nkv),
                  n_head=nh, n_kv=nkv, n_rot=hd, max_ctx=max_ctx, neox=int(neox), eps=1e-6)
    assert rel_err(read_f32(dev, qo, n * nh * hd), q.reshape(-1)) < RTOL
    kg = read_f32(dev, kc, kc0.size).reshape(kc0.shape)
    vg = read_f32(dev, vc, vc0.size).reshape(vc0.shape)
    assert rel_err(kg[:, pos:pos + n], k.transpose(1, 0, 2)) < RTOL
    assert np.array_equal(vg[:, pos:pos + n], v.transpose(1, 0, 2))
    untouched = np.ones(max_ctx, bool)
    untouched[pos:pos + n] = False
    assert np.array_equal(kg[:, untouched], kc0[:, untouched]) and np.array_equal(vg[:, untouched], vc0[:, untouched])


@pytest.mark.parametrize("neox,hd", [(False, 64), (True, 32)])
def test_matvec_qkv_with_rope_and_cache_store(dev, ks, rng, neox, hd):
    """Decode's first dispatch: RMSNorm, Q|K|V (with biases), RoPE at the position, K and V into the cache."""
    nh, nkv, d, max_ctx, pos = 4, 2, 128, 16, 11
    rows, types = [nh * hd, nkv * hd, nkv * hd], ["Q4_1", "Q8_0", "Q4_0"]
    raws = [random_rows(rng, t, r, d) for t, r in zip(types, rows)]
    w = np.concatenate([dequant_reference(r, t, d) for r, t in zip(raws, types)]).astype(np.float32)
    x, g, b = f32(rng, d), f32(rng, d), f32(rng, sum(rows))
    qkv = rms_norm(x[None], g, 1e-5) @ w.T + b
    rope = Rope(hd, 10000.0, neox, RopeScaling())
    q = qkv[:, :nh * hd].reshape(1, nh, hd).copy()
    k = qkv[:, nh * hd:(nh + nkv) * hd].reshape(1, nkv, hd).copy()
    v = qkv[:, (nh + nkv) * hd:].reshape(1, nkv, hd)
    cs = rope.cos_sin(pos, 1)
    rope.apply(q, cs)
    rope.apply(k, cs)
    qo = poisoned(dev, nh * hd)
    kc0, vc0 = f32(rng, nkv, max_ctx, hd), f32(rng, nkv, max_ctx, hd)
    kc, vc = dev.upload(kc0), dev.upload(vc0)
    bufs = ([dev.upload(x), qo] + [dev.upload(r) for r in raws] + [dev.upload(g), dev.upload(b), kc, vc,
            dev.upload(_rope_table(rope, max_ctx)), dev.upload(np.array([pos, 1], np.uint32))])
    kern = ops.matvec(ks, types, norm=True, bias=True, rope="neox" if neox else "normal")
    dispatch_once(dev, kern, bufs, ops.matvec_groups(sum(rows)),
                  **dict(ops.matvec_params(types, d, rows, eps=1e-5), a0=hd, a1=max_ctx))
    assert rel_err(read_f32(dev, qo, nh * hd), q.reshape(-1)) < RTOL
    kg = read_f32(dev, kc, kc0.size).reshape(kc0.shape)
    vg = read_f32(dev, vc, vc0.size).reshape(vc0.shape)
    assert rel_err(kg[:, pos], k[0]) < RTOL and rel_err(vg[:, pos], v[0]) < RTOL
    others = np.arange(max_ctx) != pos
    assert np.array_equal(kg[:, others], kc0[:, others]) and np.array_equal(vg[:, others], vc0[:, others])


def _kv(rng, nkv, max_ctx, hd):
    return f32(rng, nkv, max_ctx, hd), f32(rng, nkv, max_ctx, hd)


@pytest.mark.parametrize("kv_len,window,hd", [(1, 0, 64), (150, 0, 64), (200, 70, 64), (130, 0, 256)])
def test_attention_decode_split_k(dev, ks, rng, kv_len, window, hd):
    nh, nkv, max_ctx = 6, 2, 256
    scale = 1.0 / np.sqrt(hd)
    k_c, v_c = _kv(rng, nkv, max_ctx, hd)
    q = f32(rng, 1, nh, hd)
    ref = attention(q * np.float32(scale), k_c, v_c, kv_len - 1, window)[0]
    splits = ops.attn_splits(max_ctx)
    part = poisoned(dev, nh * splits * (hd + 2))
    out = poisoned(dev, nh * hd)
    step = dev.upload(np.array([kv_len - 1, 1], np.uint32))
    kc, vc = dev.upload(k_c), dev.upload(v_c)
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, max_splits=splits, scale=scale, window=window)
    dispatch_once(dev, ops.attn_split(ks, hd), [dev.upload(q), kc, vc, part, step], (ops.attn_splits(kv_len), nh, 1), **p)
    dispatch_once(dev, ops.attn_combine(ks, hd), [part, out, step], (nh, 1, 1), **p)
    assert rel_err(read_f32(dev, out, nh * hd), ref) < RTOL
    # the same partials merged inside the output projection (o-proj + residual, one dispatch)
    d = 96
    raw = random_rows(rng, "Q8_0", d, nh * hd)
    y0 = f32(rng, d)
    ybuf = dev.upload(y0)
    kern = ops.matvec(ks, ["Q8_0"], residual=True, attn_x=nh * hd, attn_ws=nh * splits)
    dispatch_once(dev, kern, [part, ybuf, dev.upload(raw), step], ops.matvec_groups(d),
                  **dict(ops.matvec_params(["Q8_0"], nh * hd, [d]), a0=hd, a1=splits))
    assert rel_err(read_f32(dev, ybuf, d), y0 + dequant_reference(raw, "Q8_0", nh * hd) @ ref) < RTOL


@pytest.mark.parametrize("kv_len,window,hd", [(1, 0, 64), (64, 0, 64), (50, 20, 128), (17, 0, 256)])
def test_attention_decode_in_one_split_writes_the_merged_output(dev, ks, rng, kv_len, window, hd):
    """Contexts of one split: the direct pass gives the combine pass's output to the bit."""
    nh, nkv, max_ctx = 4, 2, 128
    scale = 1.0 / np.sqrt(hd)
    k_c, v_c = _kv(rng, nkv, max_ctx, hd)
    q = f32(rng, 1, nh, hd)
    ref = attention(q * np.float32(scale), k_c, v_c, kv_len - 1, window)[0]
    splits = ops.attn_splits(max_ctx)
    assert ops.attn_splits(kv_len) == 1
    part, out, direct = poisoned(dev, nh * splits * (hd + 2)), poisoned(dev, nh * hd), poisoned(dev, nh * hd)
    step = dev.upload(np.array([kv_len - 1, 1], np.uint32))
    qb, kc, vc = dev.upload(q), dev.upload(k_c), dev.upload(v_c)
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, max_splits=splits, scale=scale, window=window)
    dispatch_once(dev, ops.attn_split(ks, hd), [qb, kc, vc, part, step], (1, nh, 1), **p)
    dispatch_once(dev, ops.attn_combine(ks, hd), [part, out, step], (nh, 1, 1), **p)
    dispatch_once(dev, ops.attn_split(ks, hd, direct=True), [qb, kc, vc, direct, step], (1, nh, 1), **p)
    got = read_f32(dev, direct, nh * hd)
    assert rel_err(got, ref) < RTOL
    assert np.array_equal(got, read_f32(dev, out, nh * hd))


@pytest.mark.parametrize("pos,n,window,hd,splits", [(0, 70, 0, 64, 1), (33, 100, 0, 64, 3), (10, 90, 24, 64, 2),
                                                   (5, 20, 0, 256, 1), (200, 64, 0, 64, 8), (12, 40, 0, 32, 2),
                                                   (3, 30, 10, 16, 1)])
@pytest.mark.parametrize("kernel", ["rows", "wide"])
def test_attention_prefill_causal_tiles(dev, ks, rng, pos, n, window, hd, splits, kernel, monkeypatch):
    """Both prefill kernels: a thread a query row (attn_prefill.wgsl), a row shared by threads
    (attn_prefill_wide.wgsl, forced down to hd 16: 16, 8 and 4 threads a row)."""
    monkeypatch.setenv("HEARTH_GPU_ATTN_WIDE_HD", "16" if kernel == "wide" else "off")
    nh, nkv, max_ctx = 4, 2, 288
    scale = 1.0 / np.sqrt(hd)
    k_c, v_c = _kv(rng, nkv, max_ctx, hd)
    q = f32(rng, n, nh, hd)
    ref = attention(q * np.float32(scale), k_c, v_c, pos, window)
    part = poisoned(dev, n * nh * splits * (hd + 2))
    out = poisoned(dev, n * nh * hd)
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, scale=scale, window=window, n_splits=splits)
    dispatch_once(dev, ops.attn_prefill(ks, hd), [dev.upload(q), dev.upload(k_c), dev.upload(v_c), part,
                                                  dev.upload(np.array([pos, n], np.uint32))],
                  ops.attn_prefill_groups(n, nh, splits, hd), **p)
    dispatch_once(dev, ops.attn_prefill_combine(ks, hd), [part, out], ops.rows_groups(n * nh), **p)
    assert rel_err(read_f32(dev, out, n * nh * hd).reshape(n, -1), ref) < RTOL


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K", "F16"])
def test_embedding_lookup(dev, ks, rng, qtype):
    vocab, d, n = 300, 256, 7
    raw = random_rows(rng, qtype, vocab, d)
    table = dequant_reference(raw, qtype, d)
    ids = rng.integers(0, vocab, n).astype(np.uint32)
    x = poisoned(dev, n * d)
    dispatch_once(dev, ops.embed(ks, qtype), [dev.upload(ids), x, dev.upload(raw)], ops.rows_groups(n),
                  d=d, row_bytes=ops.row_bytes(qtype, d), scale=16.0, n=n)
    assert rel_err(read_f32(dev, x, n * d).reshape(n, d), table[ids] * 16.0) < RTOL


def test_embedding_lookup_from_a_table_in_parts(dev, ks, rng):
    """A vocabulary larger than one binding is uploaded as row ranges; ids on both sides of each cut."""
    vocab, d, cuts = 300, 64, [0, 100, 220]
    raw = random_rows(rng, "Q8_0", vocab, d)
    table = dequant_reference(raw, "Q8_0", d)
    ids = np.array([0, 99, 100, 101, 219, 220, 299, int(rng.integers(0, vocab))], np.uint32)
    x = poisoned(dev, len(ids) * d)
    parts = [dev.upload(raw[a:b]) for a, b in zip(cuts, cuts[1:] + [vocab])]
    dispatch_once(dev, ops.embed(ks, "Q8_0", 3), [dev.upload(ids), x] + parts, ops.rows_groups(len(ids)),
                  d=d, row_bytes=ops.row_bytes("Q8_0", d), scale=1.0, n=len(ids), s1=100, s2=220)
    assert rel_err(read_f32(dev, x, len(ids) * d).reshape(-1, d), table[ids]) < RTOL


@pytest.mark.parametrize("add", [False, True])
def test_rmsnorm_rows(dev, ks, rng, add):
    n, d = 9, 576
    x, g, y0 = f32(rng, n, d), f32(rng, d), f32(rng, n, d)
    y = dev.upload(y0) if add else poisoned(dev, n * d)
    dispatch_once(dev, ops.rmsnorm(ks, add), [dev.upload(x), y, dev.upload(g)], ops.rows_groups(n), d=d, n=n, eps=1e-5)
    ref = rms_norm(x, g, 1e-5) + (y0 if add else 0)
    assert rel_err(read_f32(dev, y, n * d).reshape(n, d), ref) < RTOL


def test_argmax_first_of_ties(dev, ks, rng):
    n = 49152
    x = f32(rng, n + 10)
    best = int(rng.integers(0, n))
    x[10 + best] = 100.0
    x[10 + min(best + 300, n - 1)] = 100.0            # a tie later on: the first index wins
    out = dev.upload(np.array([0xDEADBEEF], np.uint32))
    dispatch_once(dev, ops.argmax(ks), [dev.upload(x), out], (1, 1, 1), n=n, x_off=10)
    assert int(dev.read([(out, 0, 4)]).view(np.uint32)[0]) == best
