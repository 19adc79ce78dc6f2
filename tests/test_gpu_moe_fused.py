"""Decode's fused MoE passes against numpy: the route (engine/gpu/moe_decode.py MOE_FUSE: moe_router.wgsl's
FFN norm, router logits and xn's int8 blocks over many workgroups, and the gate/up product taking
the top k itself, moe_matvec.wgsl TOPK) and the down product by rows summing a token's slots itself
(DOWN_ROWS, moe_matvec.wgsl SPAR), gpt-oss's windowed attention with its sinks in one
pass (SINK_WINDOW, attn_sinks.wgsl "window"); and gpt-oss / qwen3moe decode with all on and
all off (HEARTH_GPU_MOE_FUSE, HEARTH_GPU_MOE_DOWN_ROWS, HEARTH_GPU_SINK_WINDOW) against llama.cpp's
logits and each other."""

from __future__ import annotations

import numpy as np
import pytest

from types import SimpleNamespace

from hearth.engine.gpu import moe as gmoe
from hearth.engine.gpu import moe_decode
from hearth.engine.gpu import ops
from hearth.engine.gpu.kernels import dispatch_once
from tests.gpu_fixtures import RTOL, gpu_adapter, kernels_fixture, poisoned, q8_blocks, read_f32, rel_err
from tests.gpu_fixtures import rng  # noqa: F401  (the fixture)
from tests.gpu_moe_refs import down_ref, experts, glu_ref, routes
from tests.test_gpu_matmul8 import q8_rows_ref
from tests.test_gpu_moe_kernels import route_ref
from tests.test_gpu_moe_models import at_f32path, gpu, model
from tests.test_gpu_moe_models import f32path, oss  # noqa: F401  (fixtures)
from tests.tiny_next import assert_agrees, one_token_at_a_time, prompt_of

ks = kernels_fixture()


def norm_ref(x, g, eps):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean() + eps) * g


@pytest.mark.parametrize("E, bias, q8", [(32, True, True), (128, False, True), (8, False, False)])
def test_router_writes_logits_xn_and_its_blocks(ks, rng, E, bias, q8):
    if q8 and not ks.dev.int8:
        pytest.skip("the adapter has no int8 dot products")
    dev = ks.dev
    d, eps = 288, 1e-5
    x = (rng.standard_normal(d) * 3).astype(np.float32)
    g = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    wr = (rng.standard_normal((E, d)) / np.sqrt(d)).astype(np.float32)
    br = (rng.standard_normal(E) * 0.1).astype(np.float32)
    logits, xo = poisoned(dev, E), poisoned(dev, d)
    s_off = ops.q8_rows_scales(1, d)
    xq = dev.upload(np.full(ops.q8_rows_words(1, d), 0xFFFFFFFF, np.uint32))
    bufs = [dev.upload(x), dev.upload(wr), logits, dev.upload(g), xo] + ([xq] if q8 else [])
    bufs += [dev.upload(br)] if bias else []
    groups = moe_decode.router_groups(E)
    assert groups[0] == E // moe_decode.router_epw(E) > 1
    dispatch_once(dev, moe_decode.router_kernel(ks, E, bias, q8), bufs, groups, d=d, n=1, eps=eps, s_off=s_off)
    xn = norm_ref(x, g, eps)
    np.testing.assert_allclose(read_f32(dev, xo, d), xn, rtol=1e-5, atol=1e-6)
    want = wr.astype(np.float64) @ xn + (br if bias else 0)
    np.testing.assert_allclose(read_f32(dev, logits, E), want, rtol=1e-4, atol=1e-5)
    if q8:
        raw = dev.read([(xq, 0, ops.q8_rows_words(1, d) * 4)]).view(np.uint32)
        codes = raw[:d // 4].view(np.int8).astype(np.float64).reshape(-1, 32)
        scales = raw[s_off:s_off + 2 * (d // 32)].view(np.float32).reshape(-1, 2)
        q, dq = q8_blocks(read_f32(dev, xo, d))
        np.testing.assert_array_equal(codes, q.reshape(-1, 32))       # the codes of the xn it wrote
        np.testing.assert_array_equal(scales[:, 0], dq)
        np.testing.assert_allclose(scales[:, 1], dq * q.reshape(-1, 32).sum(1), rtol=1e-6)


@pytest.mark.parametrize("gating, norm_w, E, k", [("softmax_weight", False, 32, 4), ("softmax", True, 128, 8),
                                                  ("softmax", False, 16, 4)])
def test_gate_up_takes_the_top_k_from_the_logits(ks, rng, gating, norm_w, E, k):
    """Every workgroup's expert is its slot's of the top k; workgroup 0 writes the route as moe_route.wgsl."""
    dev = ks.dev
    d, ff = 64, 48
    rg, wg = experts(rng, "F32", E, ff, d)
    ru, wu = experts(rng, "F32", E, ff, d)
    x = (rng.standard_normal((1, d)) * 0.2).astype(np.float32)
    lg = rng.standard_normal(E).astype(np.float32)
    lg[E // 2] = lg[3] = lg.max() + 0.5                 # a tie at the top: the lower id first
    top, w = route_ref(lg[None], np.eye(E, dtype=np.float32), None, k, gating, norm_w)   # xn = lg, W = I
    assert top[0, 0] == 3 and top[0, 1] == E // 2
    y, route = poisoned(dev, k * ff), dev.upload(np.full(2 * k, 0xFFFFFFFF, np.uint32))
    rb = ops.row_bytes("F32", d)
    dispatch_once(dev, gmoe.expert_kernel(ks, "glu", ["F32", "F32"], k, topk=(E, gating, norm_w)),
                  [dev.upload(x), dev.upload(lg), y, dev.upload(rg), dev.upload(ru), route],
                  gmoe.expert_groups(ff, k), K=d, M=ff, rb0=rb, rb1=rb, eb0=rb * ff, eb1=rb * ff, n=1, s_off=0)
    r = dev.read([(route, 0, 2 * k * 4)]).view(np.uint32)
    assert (r[:k] == top[0]).all()
    np.testing.assert_allclose(r[k:].view(np.float32), w[0], rtol=1e-5, atol=1e-7)
    got = read_f32(dev, y, k * ff).reshape(1, k, ff)
    assert rel_err(got, glu_ref(top.astype(np.uint32), x.astype(np.float64), wg, wu, "silu")) < RTOL


class _Ffn:
    """What moe_decode.down_rows_layout reads of a MoeFfn."""

    def __init__(self, qtype, k, ff, q8):
        self.be = SimpleNamespace(cfg=SimpleNamespace(n_expert_used=k, n_ff_exp=ff))
        self.down, self.q8_down = SimpleNamespace(qtype=qtype), q8


def test_down_by_rows_layouts_of_the_full_size_models():
    """gpt-oss-20b (MXFP4, k 4, rows of 2,880): 8 groups of 32 lanes, 2 rows; Qwen3-30B-A3B (Q4_K / Q6_K,
    k 8, rows of 768: 64-weight chunks, 8 lanes): 32 groups, 4 rows; 8 lanes at least."""
    assert moe_decode.down_rows_layout(_Ffn("MXFP4", 4, 2880, True)) == (8, 2, False)
    for t in ("Q4_K", "Q6_K"):
        assert moe_decode.down_rows_layout(_Ffn(t, 8, 768, True)) == (32, 4, True)
    assert moe_decode.down_rows_layout(_Ffn("Q4_0", 32, 256, False)) == (32, 1, False)


@pytest.mark.parametrize("qtype, q8, k, ff", [("MXFP4", True, 4, 256), ("Q4_K", True, 8, 768), ("Q6_K", True, 3, 512),
                                              ("Q8_0", False, 4, 256), ("F16", False, 2, 96)])
@pytest.mark.parametrize("bias", [False, True])
def test_down_by_rows_sums_the_slots_into_the_residual(ks, rng, qtype, q8, k, ff, bias):
    if q8 and not ks.dev.int8:
        pytest.skip("the adapter has no int8 dot products")
    dev = ks.dev
    E, d = 10, 74                                       # d not a multiple of the rows a workgroup
    rd, wd = experts(rng, qtype, E, d, ff)
    h = rng.standard_normal((k, ff)).astype(np.float32)
    x0 = rng.standard_normal((1, d)).astype(np.float32)
    ids, w, route = routes(rng, 1, E, k)
    bd = rng.standard_normal((E, d)).astype(np.float32) if bias else None
    groups, rpw, c64 = moe_decode.down_rows_layout(_Ffn(qtype, k, ff, q8))
    qin = ops.q8_rows_words(k, ff) if q8 else 0
    y = dev.upload(x0)
    rb = ops.row_bytes(qtype, ff)
    dispatch_once(dev, gmoe.expert_kernel(ks, "down", [qtype], k, bias=bias, q8=q8, rows=groups, c64=c64, qin=qin,
                                          spar=rpw),
                  [dev.upload(h), dev.upload(route), y, dev.upload(rd)] + ([dev.upload(bd)] if bias else []),
                  (-(-d // rpw), 1, 1), K=ff, M=d, rb0=rb, eb0=rb * d, n=1, s_off=ops.q8_rows_scales(k, ff) if q8 else 0)
    hr = q8_rows_ref(h) if q8 else h.astype(np.float64)
    assert rel_err(read_f32(dev, y, d).reshape(1, d) - x0, down_ref(ids, w, hr, wd, bd)) < RTOL


@pytest.mark.parametrize("arch", ["gpt-oss", "qwen3moe"])
def test_decode_with_the_fusion_on_and_off(reference_dir, f32path, arch):
    """One token at a time with the fused route and with the matvec logits + top-k pass, against
    llama.cpp at every position (gpt-oss: its float path, the GPU's f32 x; qwen3moe: its 8-bit
    top-64, lavapipe's int8 experts) and within float rounding of each other."""
    d, m, g, cfg = model(reference_dir, arch)
    name = "chat"
    ids = prompt_of(m, name)["ids"]
    got = {}
    for fuse in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(moe_decode, "MOE_FUSE", fuse)
            mp.setattr(moe_decode, "DOWN_ROWS", fuse)
            mp.setattr(moe_decode, "SINK_WINDOW", fuse)
            be = gpu(gpu_adapter(), cfg, g, moe_int8=arch != "gpt-oss")
        try:
            labels = [op["label"] for op in be.decode_plan.ops]
            assert ("0.ffn_norm+router" in labels) == fuse and ("0.ffn_norm+top_k" in labels) != fuse
            assert "0.experts.sum" not in labels or not fuse
            assert ("0.combine" in labels) == (arch == "gpt-oss" and not fuse)     # the tiny gpt-oss: layer 0 windowed
            got[fuse] = one_token_at_a_time(be, ids)
        finally:
            be.close()
        if arch == "gpt-oss":
            np.testing.assert_allclose(*at_f32path(got[fuse], f32path, name), atol=1e-3)
        else:
            assert_agrees(got[fuse], np.load(d / f"top64_{name}.npz"))
    np.testing.assert_allclose(got[True], got[False], atol=1e-3)


def window_ref(q, kc, vc, sinks, kv_len, window, scale):
    """Decode attention with a sink logit a head over keys [max(0, kv_len - window), kv_len): q [nh, hd],
    caches [n_kv, max_ctx, hd] (float64)."""
    nh, hd = q.shape
    grp = nh // kc.shape[0]
    lo = max(0, kv_len - window)
    out = np.zeros((nh, hd))
    for h in range(nh):
        k, v = kc[h // grp, lo:kv_len], vc[h // grp, lo:kv_len]
        s = k @ q[h] * scale
        m = max(s.max(), sinks[h])
        e = np.exp(s - m)
        out[h] = e @ v / (e.sum() + np.exp(sinks[h] - m))
    return out


@pytest.mark.parametrize("kv_f16", [False, True], ids=["f32", "f16"])
@pytest.mark.parametrize("hd, window, kv_len", [(64, 128, 300), (64, 128, 77), (32, 8, 20), (64, 100, 101)])
def test_windowed_attention_with_sinks_in_one_pass(ks, rng, hd, window, kv_len, kv_f16):
    dev = ks.dev
    nh, nkv, max_ctx, scale = 8, 2, 320, 0.125
    ws = moe_decode.sink_window_threads(window, hd)
    assert ws >= window and ws % (hd // 4) == 0
    q = rng.standard_normal((nh, hd)).astype(np.float32)
    kc = rng.standard_normal((nkv, max_ctx, hd)).astype(np.float32)
    vc = rng.standard_normal((nkv, max_ctx, hd)).astype(np.float32)
    if kv_f16:
        kc, vc = kc.astype(np.float16), vc.astype(np.float16)
    sinks = (rng.standard_normal(nh) * 3).astype(np.float32)
    out = poisoned(dev, nh * hd)
    step = dev.upload(np.array([kv_len - 1, 1, 0, 0], np.uint32))
    cfg = SimpleNamespace(n_head=nh, n_head_kv=nkv, attn_scale=scale)
    dispatch_once(dev, moe_decode.sink_window(ks, hd, ws, kv_f16),
                  [dev.upload(q), dev.upload(kc), dev.upload(vc), out, dev.upload(sinks), step], (nh, 1, 1),
                  **gmoe.sink_params(cfg, max_ctx, window))
    ref = window_ref(q.astype(np.float64), kc.astype(np.float64), vc.astype(np.float64), sinks, kv_len, window, scale)
    assert rel_err(read_f32(dev, out, nh * hd).reshape(nh, hd), ref) < RTOL
