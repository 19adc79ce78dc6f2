"""The GPU mixture-of-experts kernels (engine/gpu/moe.py: moe_route.wgsl, moe_matvec.wgsl, attn_sinks.wgsl)
against numpy: the router's top k for both gatings (ties to the lower expert id), the experts' gate/up
and down products (SiLU, gpt-oss's SwiGLU, Gemma 4's GELU) reading expert ids from the route buffer,
for the weight types of the tiny MoE models and the full-size files (F32, F16, Q8_0, Q4_0, Q4_K, Q6_K,
MXFP4), with f32 x and with x as int8 blocks, and the attention merge with sinks. Weights are
dequantized by gguf-py (llama.cpp's reference), not by engine code."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import moe as gmoe
from hearth.engine.gpu import ops
from hearth.engine.gpu.kernels import dispatch_once
from hearth.engine.models.moe import MIN_WEIGHT_SUM
from tests.gpu_fixtures import RTOL, kernels_fixture, poisoned, read_f32, rel_err
from tests.gpu_fixtures import rng  # noqa: F401  (the fixture)
from tests.gpu_moe_refs import checked_tiles, down_ref, experts, glu_ref, routes
from tests.test_gpu_matmul8 import q8_rows_ref, quantize


ks = kernels_fixture()


def route_ref(xn, wr, br, k, gating, norm_w):
    lg = xn.astype(np.float64) @ wr.T.astype(np.float64) + (0 if br is None else br)
    if gating == "softmax":
        p = np.exp(lg - lg.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        top = np.argsort(-p, axis=1, kind="stable")[:, :k]
        w = np.take_along_axis(p, top, 1)
        if norm_w:
            w /= np.maximum(w.sum(1, keepdims=True), MIN_WEIGHT_SUM)
    else:
        top = np.argsort(-lg, axis=1, kind="stable")[:, :k]
        v = np.take_along_axis(lg, top, 1)
        w = np.exp(v - v[:, :1])
        w /= w.sum(1, keepdims=True)
    return top, w


def run_route(ks, xn, wr, br, k, gating, norm_w):
    dev = ks.dev
    n, d = xn.shape
    route = dev.upload(np.full(n * 2 * k, 0xFFFFFFFF, np.uint32))
    bufs = [dev.upload(xn), dev.upload(wr)] + ([dev.upload(br)] if br is not None else []) + [route]
    dispatch_once(dev, gmoe.route_kernel(ks, wr.shape[0], k, gating, norm_w, br is not None), bufs, (n, 1, 1), d=d, n=n)
    r = dev.read([(route, 0, n * 2 * k * 4)]).view(np.uint32).reshape(n, 2, k)
    return r[:, 0].astype(np.int64), r[:, 1].view(np.float32)


@pytest.mark.parametrize("gating, norm_w, bias, E, k", [("softmax", True, False, 8, 2), ("softmax", True, False, 128, 8),
                                                        ("softmax", False, False, 16, 4),
                                                        ("softmax_weight", False, True, 8, 2),
                                                        ("softmax_weight", False, True, 32, 4)])
def test_router_top_k(ks, rng, gating, norm_w, bias, E, k):
    n, d = 5, 96
    xn = rng.standard_normal((n, d)).astype(np.float32)
    wr = (rng.standard_normal((E, d)) / np.sqrt(d)).astype(np.float32)
    br = rng.standard_normal(E).astype(np.float32) * 0.1 if bias else None
    ids, w = run_route(ks, xn, wr, br, k, gating, norm_w)
    top, wref = route_ref(xn, wr, br, k, gating, norm_w)
    assert np.array_equal(ids, top)
    np.testing.assert_allclose(w, wref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("gating", ["softmax", "softmax_weight"])
def test_router_ties_go_to_the_lower_expert(ks, rng, gating):
    """Experts with identical router rows (and biases) tie exactly; the lower id comes first, as
    the CPU's stable argsort and llama.cpp's top-k keep them."""
    n, d, E, k = 4, 64, 8, 3
    xn = rng.standard_normal((n, d)).astype(np.float32)
    wr = np.zeros((E, d), np.float32)
    best = rng.standard_normal(d).astype(np.float32)
    wr[5] = wr[2] = wr[6] = best                     # three equal logits, the largest for most rows
    wr[[0, 1, 3, 4, 7]] = rng.standard_normal((5, d)).astype(np.float32) * 0.01
    xn[:, :] = np.abs(xn) * np.sign(best)            # their logit is the largest (positive, big)
    br = np.zeros(E, np.float32) if gating == "softmax_weight" else None
    ids, w = run_route(ks, xn, wr, br, k, gating, gating == "softmax")
    assert (ids == [2, 5, 6]).all()
    np.testing.assert_allclose(w, 1 / 3, rtol=1e-5)


TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "MXFP4", "IQ2_XS"]
# (type, int8 x): float weights keep f32 x (moe.MoeFfn), quantized ones take both paths
CASES = [(t, q8) for t in TYPES for q8 in (False, True) if not (q8 and t in ("F32", "F16"))]


def need_int8(ks, q8):
    if q8 and not ks.dev.int8:
        pytest.skip("the adapter has no int8 dot products")


def sorted_pairs(ks, route, n, E, k):
    """moe_sort.wgsl's order buffer for route [n, 2k]: checked to group the pairs by expert."""
    dev = ks.dev
    order = dev.upload(np.full(n * k, 0xFFFFFFFF, np.uint32))
    dispatch_once(dev, gmoe.sort_kernel(ks, E, k), [dev.upload(route), order], (1, 1, 1), n=n)
    o = dev.read([(order, 0, n * k * 4)]).view(np.uint32).astype(np.int64)
    assert sorted(o.tolist()) == list(range(n * k))
    experts_in_order = route[:, :k].reshape(-1)[o]
    assert (np.diff(experts_in_order.astype(np.int64)) >= 0).all()
    return order


@pytest.mark.parametrize("n, E, k", [(3, 4, 2), (300, 128, 8), (1, 8, 2)])
def test_sort_groups_pairs_by_expert(ks, rng, n, E, k):
    sorted_pairs(ks, routes(rng, n, E, k)[2], n, E, k)


@pytest.mark.parametrize("order", [False, True], ids=["pairs", "by-expert"])
@pytest.mark.parametrize("qtype, q8", CASES)
@pytest.mark.parametrize("act, bias", [("silu", False), ("swiglu_oai", True), ("gelu", False)])
def test_expert_gate_up(ks, rng, qtype, q8, act, bias, order):
    need_int8(ks, q8)
    dev = ks.dev
    n, E, k, d, ff = 3, 4, 2, 256, 64
    rg, wg = experts(rng, qtype, E, ff, d)
    ru, wu = experts(rng, qtype, E, ff, d)
    x = (rng.standard_normal((n, d)) * 0.2).astype(np.float32)
    ids, _, route = routes(rng, n, E, k)
    bg = rng.standard_normal((E, ff)).astype(np.float32) if bias else None
    bu = rng.standard_normal((E, ff)).astype(np.float32) if bias else None
    if q8:
        src, s_off = quantize(ks, x)
        xr = q8_rows_ref(x)
    else:
        src, s_off, xr = dev.upload(x), 0, x.astype(np.float64)
    y = poisoned(dev, n * k * ff)
    bufs = [src, dev.upload(route), y, dev.upload(rg), dev.upload(ru)] + ([dev.upload(bg), dev.upload(bu)] if bias else [])
    bufs += [sorted_pairs(ks, route, n, E, k)] if order else []
    rb = ops.row_bytes(qtype, d)
    dispatch_once(dev, gmoe.expert_kernel(ks, "glu", [qtype, qtype], k, act=act, bias=bias, q8=q8, order=order), bufs,
                  gmoe.expert_groups(ff, n * k, order=order), K=d, M=ff, rb0=rb, rb1=rb, eb0=rb * ff, eb1=rb * ff, n=n,
                  s_off=s_off)
    got = read_f32(dev, y, n * k * ff).reshape(n, k, ff)
    ref = glu_ref(ids, xr, wg, wu, act, bg, bu)
    assert rel_err(got, ref) < RTOL * 5      # the activation's exp of f32 products on top of RTOL


@pytest.mark.parametrize("order", [False, True], ids=["per-token", "by-expert+sum"])
@pytest.mark.parametrize("qtype, q8", CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_expert_down_weighted_sum_into_the_residual(ks, rng, qtype, q8, bias, order):
    need_int8(ks, q8)
    dev = ks.dev
    n, E, k, d, ff = 3, 4, 3, 64, 256
    rd, wd = experts(rng, qtype, E, d, ff)
    h = rng.standard_normal((n * k, ff)).astype(np.float32)
    x0 = rng.standard_normal((n, d)).astype(np.float32)
    ids, w, route = routes(rng, n, E, k)
    bd = rng.standard_normal((E, d)).astype(np.float32) if bias else None
    if q8:
        src, s_off = quantize(ks, h)
        hr = q8_rows_ref(h)
    else:
        src, s_off, hr = dev.upload(h), 0, h.astype(np.float64)
    y = dev.upload(x0)
    rb = ops.row_bytes(qtype, ff)
    prm = dict(K=ff, M=d, rb0=rb, eb0=rb * d, n=n, s_off=s_off)
    bufs = [src, dev.upload(route)]
    wb = [dev.upload(rd)] + ([dev.upload(bd)] if bias else [])
    if order:      # each pair's weighted output, then the slots' sum into the residual
        yd = poisoned(dev, n * k * d)
        dispatch_once(dev, gmoe.expert_kernel(ks, "down", [qtype], k, bias=bias, q8=q8, order=True),
                      bufs + [yd] + wb + [sorted_pairs(ks, route, n, E, k)], gmoe.expert_groups(d, n * k, order=True),
                      **prm)
        dispatch_once(dev, gmoe.sum_kernel(ks, k), [yd, y], gmoe.sum_groups(n, d), d=d, n=n)
    else:
        dispatch_once(dev, gmoe.expert_kernel(ks, "down", [qtype], k, bias=bias, q8=q8), bufs + [y] + wb,
                      gmoe.expert_groups(d, n), **prm)
    got = read_f32(dev, y, n * d).reshape(n, d)
    assert rel_err(got - x0, down_ref(ids, w, hr, wd, bd)) < RTOL


@pytest.mark.parametrize("lut", ["", "wg"], ids=["arithmetic", "workgroup-table"])
def test_mxfp4_codes_by_either_lookup(ks, rng, monkeypatch, lut):
    """fp4_pack4's arithmetic (HEARTH_GPU_FP4_LUT=0) and the codebook in workgroup memory (kv_wg4)."""
    monkeypatch.setattr(ops, "FP4_LUT", lut)
    assert ops.fp4_lookup(["MXFP4"], 1) == lut and ops.fp4_lookup(["Q4_K"], 1) == ""
    test_expert_gate_up(ks, rng, "MXFP4", True, "swiglu_oai", True, False)
    test_expert_down_weighted_sum_into_the_residual(ks, rng, "MXFP4", True, True, False)


def test_int8_x_is_refused_for_float_weights(ks):
    with pytest.raises(ValueError, match="int8-x expert product"):
        gmoe.expert_kernel(ks, "down", ["F16"], 2, q8=True)


def sink_merge_ref(part, sinks, hd):
    """part [rows, splits, hd + 2] (o, m, l), sinks per row -> [rows, hd]."""
    m, l = part[:, :, hd], part[:, :, hd + 1]
    M = np.maximum(m.max(1), sinks)
    e = np.exp(m - M[:, None])
    return (e[:, :, None] * part[:, :, :hd]).sum(1) / ((e * l).sum(1) + np.exp(sinks - M))[:, None]


@pytest.mark.parametrize("pas", ["decode", "prefill"])
def test_attention_merge_with_sinks(ks, rng, pas):
    dev = ks.dev
    nh, hd, max_splits = 4, 32, 5
    n = 1 if pas == "decode" else 3
    ns = 3 if pas == "decode" else 2
    kv_len = ops.ATTN_CHUNK * (ns - 1) + 7             # decode: ns splits from the step buffer
    rows = n * nh
    splits = max_splits if pas == "decode" else ns
    part = rng.standard_normal((rows, splits, hd + 2)).astype(np.float32)
    part[:, :, hd] *= 3                                 # m: per-split maxima
    part[:, :, hd + 1] = rng.random((rows, splits)) * 5 + 1   # l > 0
    sinks = rng.standard_normal(nh).astype(np.float32) * 3
    out = poisoned(dev, rows * hd)
    bufs = [dev.upload(part), out, dev.upload(sinks)]
    if pas == "decode":
        bufs.append(dev.upload(np.array([kv_len - 1, 1, 0, 0], np.uint32)))
        prm = gmoe.sink_params(type("C", (), dict(n_head=nh, n_head_kv=2, attn_scale=0.1))(), 64, max_splits)
        groups = (nh, 1, 1)
    else:
        prm = dict(gmoe.sink_params(type("C", (), dict(n_head=nh, n_head_kv=2, attn_scale=0.1))(), 64), c=ns)
        groups = ops.rows_groups(rows)
    dispatch_once(dev, gmoe.sink_combine(ks, hd, pas), bufs, groups, **prm)
    got = read_f32(dev, out, rows * hd).reshape(rows, hd)
    ref = sink_merge_ref(part[:, :ns].astype(np.float64), np.tile(sinks, n).astype(np.float64), hd)
    assert rel_err(got, ref) < RTOL


@pytest.mark.parametrize("q8", [False, True], ids=["f32", "int8-blocks"])
def test_route_with_the_norm_fused(ks, rng, q8):
    """The route kernel as MoeFfn runs it: RMSNorm of the residual (xn written out as rmsnorm.wgsl
    computes it), the top k of the normed row, and (q8) xn's int8 blocks with quantize_rows' bits."""
    need_int8(ks, q8)
    dev = ks.dev
    n, d, E, k, eps, cap = 3, 128, 16, 4, 1e-6, 5
    x = (rng.standard_normal((n, d)) * 3).astype(np.float32)
    g = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    wr = (rng.standard_normal((E, d)) / np.sqrt(d)).astype(np.float32)
    route = dev.upload(np.full(n * 2 * k, 0xFFFFFFFF, np.uint32))
    xo = poisoned(dev, cap * d)
    s_off = ops.q8_rows_scales(cap, d)
    xq = dev.upload(np.full(ops.q8_rows_words(cap, d), 0xFFFFFFFF, np.uint32))
    bufs = [dev.upload(x), dev.upload(wr), route, dev.upload(g), xo] + ([xq] if q8 else [])
    dispatch_once(dev, gmoe.route_kernel(ks, E, k, "softmax", True, False, norm=True, q8=q8), bufs, (n, 1, 1),
                  d=d, n=n, eps=eps, s_off=s_off)
    xn = read_f32(dev, xo, n * d).reshape(n, d)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + eps) * g
    assert rel_err(xn, want) < RTOL
    r = dev.read([(route, 0, n * 2 * k * 4)]).view(np.uint32).reshape(n, 2, k)
    top, w = route_ref(want, wr, None, k, "softmax", True)
    assert np.array_equal(r[:, 0], top)
    np.testing.assert_allclose(r[:, 1].view(np.float32), w, rtol=1e-5)
    if q8:     # the same bits as quantize_rows.wgsl writes for the xn rows (its own test checks those)
        ref, ref_off = quantize(ks, xn, cap)
        assert ref_off == s_off
        words = ops.q8_rows_words(cap, d)
        a = dev.read([(xq, 0, words * 4)]).view(np.uint32)
        b = dev.read([(ref, 0, words * 4)]).view(np.uint32)
        codes, scales = slice(0, n * d // 4), slice(s_off, s_off + n * d // 16)
        assert np.array_equal(a[codes], b[codes])
        np.testing.assert_allclose(a[scales].view(np.float32), b[scales].view(np.float32), rtol=1e-6)


def tiles_of(ks, route, n, E, k):
    """moe_sort.wgsl's order and tiles buffers for route [n, 2k], the tiles checked: each covers up to
    MOE_TILE consecutive pairs of one expert, together every pair once, the rest count 0."""
    return checked_tiles(ks, route, n, E, k, gmoe.MOE_TILE, gmoe.max_tiles(n, k, E))


@pytest.mark.parametrize("qtype, q8", [("F16", False), ("Q4_K", True), ("MXFP4", True), ("Q8_0", False),
                                      ("IQ2_XXS", True), ("IQ3_S", False)])   # IQ2 / IQ3: the grid table bound
@pytest.mark.parametrize("act, bias", [("silu", False), ("swiglu_oai", True), ("gelu", False)])
def test_tiled_gate_up(ks, rng, qtype, q8, act, bias):
    need_int8(ks, q8)
    dev = ks.dev
    n, E, k, d, ff = 9, 3, 2, 256, 64              # 6 pairs an expert on average: full and partial tiles
    rg, wg = experts(rng, qtype, E, ff, d)
    ru, wu = experts(rng, qtype, E, ff, d)
    x = (rng.standard_normal((n, d)) * 0.2).astype(np.float32)
    ids, _, route = routes(rng, n, E, k)
    bg, bu = (rng.standard_normal((E, ff)).astype(np.float32) for _ in range(2))
    src, s_off = quantize(ks, x) if q8 else (dev.upload(x), 0)
    xr = q8_rows_ref(x) if q8 else x.astype(np.float64)
    y = poisoned(dev, n * k * ff)
    order, tiles = tiles_of(ks, route, n, E, k)
    rb = ops.row_bytes(qtype, d)
    dispatch_once(dev, gmoe.tile_kernel(ks, "glu", [qtype, qtype], k, act=act, bias=bias, q8=q8),
                  [src, dev.upload(route), y, dev.upload(rg), dev.upload(ru)]
                  + ([dev.upload(bg), dev.upload(bu)] if bias else []) + [tiles, order],
                  gmoe.tile_groups(n, k, E, ff), K=d, M=ff, rb0=rb, rb1=rb, eb0=rb * ff, eb1=rb * ff, n=n, s_off=s_off)
    got = read_f32(dev, y, n * k * ff).reshape(n, k, ff)
    ref = glu_ref(ids, xr, wg, wu, act, *((bg, bu) if bias else ()))
    assert rel_err(got, ref) < RTOL * 5


@pytest.mark.parametrize("qtype, q8", [("F32", False), ("Q6_K", True), ("MXFP4", True), ("Q4_0", False),
                                      ("IQ2_S", True), ("IQ3_XXS", False)])
@pytest.mark.parametrize("bias", [False, True])
def test_tiled_down_and_the_slot_sum(ks, rng, qtype, q8, bias):
    need_int8(ks, q8)
    dev = ks.dev
    n, E, k, d, ff = 9, 3, 2, 64, 256
    rd, wd = experts(rng, qtype, E, d, ff)
    h = rng.standard_normal((n * k, ff)).astype(np.float32)
    x0 = rng.standard_normal((n, d)).astype(np.float32)
    ids, w, route = routes(rng, n, E, k)
    bd = rng.standard_normal((E, d)).astype(np.float32)
    src, s_off = quantize(ks, h) if q8 else (dev.upload(h), 0)
    hr = q8_rows_ref(h) if q8 else h.astype(np.float64)
    order, tiles = tiles_of(ks, route, n, E, k)
    yd, y = poisoned(dev, n * k * d), dev.upload(x0)
    rb = ops.row_bytes(qtype, ff)
    dispatch_once(dev, gmoe.tile_kernel(ks, "down", [qtype], k, bias=bias, q8=q8),
                  [src, dev.upload(route), yd, dev.upload(rd)] + ([dev.upload(bd)] if bias else []) + [tiles, order],
                  gmoe.tile_groups(n, k, E, d), K=ff, M=d, rb0=rb, eb0=rb * d, n=n, s_off=s_off)
    dispatch_once(dev, gmoe.sum_kernel(ks, k), [yd, y], gmoe.sum_groups(n, d), d=d, n=n)
    got = read_f32(dev, y, n * d).reshape(n, d)
    assert rel_err(got - x0, down_ref(ids, w, hr, wd, bd if bias else None)) < RTOL


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K", "Q4_0", "Q8_0", "Q5_K", "IQ4_XS", "IQ4_NL"])
@pytest.mark.parametrize("k_in", [256, 2048])
def test_expert_products_with_64_weight_chunks(ks, rng, qtype, k_in):
    """The decode layout MoeFfn takes for K-quant / Q4_0 / Q8_0 / IQ4 experts with int8 x (expert_layout:
    64-weight chunks, 8-32 lanes a row): gate/up, then down over the result, against numpy."""
    need_int8(ks, True)
    dev = ks.dev
    n, E, k, d, ff = 2, 4, 2, k_in, 256
    rows, c64 = gmoe.expert_layout([qtype, qtype], d, True)
    assert c64 and rows == 256 // (32 if d == 2048 else 8)
    rg, wg = experts(rng, qtype, E, ff, d)
    ru, wu = experts(rng, qtype, E, ff, d)
    x = (rng.standard_normal((n, d)) * 0.2).astype(np.float32)
    ids, w, route = routes(rng, n, E, k)
    src, s_off = quantize(ks, x)
    xr = q8_rows_ref(x)
    y = poisoned(dev, n * k * ff)
    rb = ops.row_bytes(qtype, d)
    dispatch_once(dev, gmoe.expert_kernel(ks, "glu", [qtype, qtype], k, q8=True, rows=rows, c64=True),
                  [src, dev.upload(route), y, dev.upload(rg), dev.upload(ru)], gmoe.expert_groups(ff, n * k, rows),
                  K=d, M=ff, rb0=rb, rb1=rb, eb0=rb * ff, eb1=rb * ff, n=n, s_off=s_off)
    got = read_f32(dev, y, n * k * ff).reshape(n * k, ff)
    assert rel_err(got, glu_ref(ids, xr, wg, wu, "silu").reshape(n * k, ff)) < RTOL * 5
    # down: rows of ff = 256 weights (four 64-weight chunks: 8 lanes), d outputs
    rows_d, c64_d = gmoe.expert_layout([qtype], ff, True)
    assert c64_d and rows_d == 32
    rd, wd = experts(rng, qtype, E, d, ff)
    h = rng.standard_normal((n * k, ff)).astype(np.float32)
    hq, h_off = quantize(ks, h)
    x0 = rng.standard_normal((n, d)).astype(np.float32)
    yb = dev.upload(x0)
    rbd = ops.row_bytes(qtype, ff)
    dispatch_once(dev, gmoe.expert_kernel(ks, "down", [qtype], k, q8=True, rows=rows_d, c64=True),
                  [hq, dev.upload(route), yb, dev.upload(rd)], gmoe.expert_groups(d, n, rows_d),
                  K=ff, M=d, rb0=rbd, eb0=rbd * d, n=n, s_off=h_off)
    hr = q8_rows_ref(h)
    ref = down_ref(ids, w, hr, wd)
    assert rel_err(read_f32(dev, yb, n * d).reshape(n, d) - x0, ref) < RTOL


@pytest.mark.parametrize("gating, norm_w", [("softmax", True), ("softmax_weight", False)])
def test_top_k_of_given_logits(ks, rng, gating, norm_w):
    """Decode's route kernel: the logits come from the dense matvec (bias included); top k, weights
    and xn (the norm still fused) as the whole route kernel gives them."""
    dev = ks.dev
    d, E, k, eps = 64, 32, 4, 1e-5
    x = rng.standard_normal((1, d)).astype(np.float32)
    g = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    lg = rng.standard_normal(E).astype(np.float32) * 2
    lg[7] = lg[3] = lg.max() + 1                        # a tie at the top: 3 first
    route = dev.upload(np.full(2 * k, 0xFFFFFFFF, np.uint32))
    xo = poisoned(dev, d)
    dispatch_once(dev, gmoe.route_kernel(ks, E, k, gating, norm_w, False, norm=True, logits=True),
                  [dev.upload(x), dev.upload(lg), route, dev.upload(g), xo], (1, 1, 1), d=d, n=1, eps=eps, s_off=0)
    r = dev.read([(route, 0, 2 * k * 4)]).view(np.uint32).reshape(2, k)
    top, w = route_ref(lg[None, :], np.eye(E, dtype=np.float32), None, k, gating, norm_w)   # logits = lg I
    assert r[0].tolist() == top[0].tolist() and top[0][:2].tolist() == [3, 7]
    np.testing.assert_allclose(r[1].view(np.float32), w[0], rtol=1e-5)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean() + eps) * g
    assert rel_err(read_f32(dev, xo, d), want[0]) < RTOL


@pytest.mark.parametrize("qtype", ["MXFP4", "Q4_K", "Q8_0"])
def test_down_quantizing_its_x_in_workgroup_memory(ks, rng, qtype):
    """Decode's down product (qin): f32 x in, each workgroup writes its token's rows as int8 blocks
    itself; the result is the product over quantize_rows' x."""
    need_int8(ks, True)
    dev = ks.dev
    n, E, k, d, ff = 2, 4, 3, 64, 256
    rd, wd = experts(rng, qtype, E, d, ff)
    h = rng.standard_normal((n * k, ff)).astype(np.float32)
    x0 = rng.standard_normal((n, d)).astype(np.float32)
    ids, w, route = routes(rng, n, E, k)
    rows, c64 = gmoe.expert_layout([qtype], ff, True)
    y = dev.upload(x0)
    rb = ops.row_bytes(qtype, ff)
    dispatch_once(dev, gmoe.expert_kernel(ks, "down", [qtype], k, q8=True, rows=rows, c64=c64,
                                          qin=ops.q8_rows_words(k, ff)),
                  [dev.upload(h), dev.upload(route), y, dev.upload(rd)], gmoe.expert_groups(d, n, rows),
                  K=ff, M=d, rb0=rb, eb0=rb * d, n=n, s_off=ops.q8_rows_scales(k, ff))
    hr = q8_rows_ref(h)
    ref = down_ref(ids, w, hr, wd)
    assert rel_err(read_f32(dev, y, n * d).reshape(n, d) - x0, ref) < RTOL
