"""gpt-oss's MoE FFN for one decoded token in one compiled call: the FFN norm, the router, the top k,
the chosen experts' MXFP4 rows, biases, the clamped SwiGLU, the weighted sum and the residual.

Why: on the per-operation path (models/moe.py) a decoded token's MoE block is ~25 Python-level
calls a layer (route: a BLAS product, argsort, take_along_axis, softmax; per expert: x's Q8_0
codes, two products, two bias adds, the SwiGLU's numpy temporaries) and 8 launches of numba's
threads. Here the products are two launches a layer (every chosen expert's gate and up rows, then
their down rows) and the rest runs between them on the calling thread, the SwiGLU in 8 lanes (a
scalar exp cost 2.6 ms a token on the gpt-oss-20b shape, 24 layers x 4 x 2,880). Measured there
(2 threads, load 1.6, one process alternating): 69.7 -> 65.8 ms a token.

    moe_mxfp4_decode(x, norm_w, eps, router, router_b, k, gate, up, down, b_gu, b_down, x8)
        x float32 [d] (the residual stream, updated in place: x += the FFN of rmsnorm(x) * norm_w);
        router uint8 [E, d * 4] (the F32 router's bytes), router_b float32 [E]; gate, up uint8
        [E, ff, bytes per row] and down uint8 [E, d, bytes per row]: the mapped MXFP4 tensors, or
        with x8 the same repacked in groups of 8 rows (engine/cpu/mxfp4_x8.py: uint8 [E, ff / 8,
        nb * 136], [E, d / 8, nb * 136]), multiplied 8 rows a step (kernels_mxfp4_x8);
        b_gu float32 [E, 2 ff] (gate biases, then up biases), b_down float32 [E, d].

The arithmetic is models/moe.py's for one row: x's Q8_0 blocks as kernels_int8 quantizes them, each
MXFP4 row kernels_mxfp4's (the same bits as the per-operation product; repacked: kernels_mxfp4_x8's,
the same as the per-operation LinearX8's), the SwiGLU and the routing
softmax with softmax.expf, the slots summed in top-k order. The router's dot products are
kernels.row_f32's (numpy's BLAS sums in another order: logits agree to rounding).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

from .kernels import row_f32
from .kernels_int8 import quantize_q8_0
from .kernels_mxfp4 import _neg12, _row
from .kernels_mxfp4_x8 import group8, neg12_blocks
from .rows import rms_row
from .simd import V8F32, _const, _ptr, store_scaled
from .softmax import exp8_any, expf

jit = njit(nogil=True, cache=True)
pjit = njit(nogil=True, cache=True, parallel=True)

# ggml_swiglu_oai's constants for gpt-oss (models/moe.py's OAI_ALPHA, OAI_LIMIT).
ALPHA = np.float32(1.702)
LIMIT = np.float32(7.0)


@pjit
def _gate_up(gate, up, top, xq, xd, neg, gu):
    """gu float32 [k, 2 ff]: slot s's gate rows, then its up rows, of expert top[s] times x."""
    ff = gate.shape[1]
    for g in prange(top.shape[0] * 2 * ff):
        s = g // (2 * ff)
        r = g - s * 2 * ff
        if r < ff:
            gu[s, r] = _row(gate[top[s], r], xq, xd, neg)
        else:
            gu[s, r] = _row(up[top[s], r - ff], xq, xd, neg)


@pjit
def _down(down, top, aq, ad, aneg, y):
    """y float32 [k, d]: slot s's down rows of expert top[s] times its activation (row s of aq)."""
    d = down.shape[1]
    for g in prange(top.shape[0] * d):
        s = g // d
        r = g - s * d
        y[s, r] = _row(down[top[s], r], aq[s], ad[s], aneg[s])


@pjit
def _gate_up_x8(gate, up, top, xq, xd, neg, gu):
    """_gate_up for experts repacked in groups of 8 rows (gate, up uint8 [E, ff / 8, nb * 136]):
    one (slot, group) a step; neg: neg12_blocks of xq."""
    g8 = gate.shape[1]
    for g in prange(top.shape[0] * 2 * g8):
        s = g // (2 * g8)
        r = g - s * 2 * g8
        w = gate[top[s], r] if r < g8 else up[top[s], r - g8]
        store_scaled(gu[s], 8 * r, group8(w, xq, xd, neg), np.float32(1.0))


@pjit
def _down_x8(down, top, aq, ad, aneg, y):
    """_down for experts repacked in groups of 8 rows (down uint8 [E, d / 8, nb * 136])."""
    g8 = down.shape[1]
    for g in prange(top.shape[0] * g8):
        s = g // g8
        r = g - s * g8
        store_scaled(y[s], 8 * r, group8(down[top[s], r], aq[s], ad[s], aneg[s]), np.float32(1.0))


@jit
def top_k_softmax(logits, k):
    """The k largest logits' indices (best first, ties: the lower index) and softmax over them."""
    n = logits.shape[0]
    top = np.empty(k, np.int64)
    taken = np.zeros(n, np.bool_)
    for s in range(k):
        best = -1
        for e in range(n):
            if not taken[e] and (best < 0 or logits[e] > logits[best]):
                best = e
        top[s] = best
        taken[best] = True
    w = np.empty(k, np.float32)
    m = logits[top[0]]
    total = np.float32(0.0)
    for s in range(k):
        w[s] = expf(np.float32(logits[top[s]] - m))
        total += w[s]
    for s in range(k):
        w[s] /= total
    return top, w


@intrinsic
def swiglu_oai8(typingctx, g, u, out, off):
    """out[off:off+8] from g, u[off:off+8]: swiglu_oai_row's 8 lanes, each step rounded as there."""
    def codegen(context, builder, sig, args):
        gv = builder.load(_ptr(context, builder, sig.args[0], args[0], args[3], V8F32), align=4)
        uv = builder.load(_ptr(context, builder, sig.args[1], args[1], args[3], V8F32), align=4)
        lim, one = _const(V8F32, float(LIMIT)), _const(V8F32, 1.0)
        x = builder.select(builder.fcmp_ordered("<", gv, lim), gv, lim)
        y = builder.select(builder.fcmp_ordered(">", uv, lim), lim, uv)
        y = builder.select(builder.fcmp_ordered("<", y, _const(V8F32, -float(LIMIT))), _const(V8F32, -float(LIMIT)), y)
        t = builder.fadd(exp8_any(builder, builder.fmul(_const(V8F32, -float(ALPHA)), x)), one)
        r = builder.fmul(builder.fdiv(x, t), builder.fadd(y, one))
        builder.store(r, _ptr(context, builder, sig.args[2], args[2], args[3], V8F32), align=4)
        return context.get_dummy_value()
    return types.void(g, u, out, types.intp), codegen


@jit
def swiglu_oai_row(g, u, out):
    """out = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1), as models/moe.swiglu_oai."""
    n = g.shape[0]
    j = 0
    while j + 8 <= n:
        swiglu_oai8(g, u, out, j)
        j += 8
    for j in range(j, n):
        x = min(g[j], LIMIT)
        y = min(max(u[j], -LIMIT), LIMIT)
        t = expf(np.float32(-ALPHA * x)) + np.float32(1.0)
        out[j] = np.float32(x / t) * np.float32(y + np.float32(1.0))


@jit
def _neg(xq, out, x8):
    if x8:
        neg12_blocks(xq, out)
    else:
        _neg12(xq, out)


@jit
def moe_mxfp4_decode(x, norm_w, eps, router, router_b, k, gate, up, down, b_gu, b_down, x8):
    d, n_exp = x.shape[0], router.shape[0]
    ff = b_gu.shape[1] // 2
    h = np.empty(d, np.float32)
    rms_row(x, norm_w, eps, h)
    logits = np.empty(n_exp, np.float32)
    for e in range(n_exp):
        logits[e] = row_f32(router[e], h) + router_b[e]
    top, w = top_k_softmax(logits, k)
    xq, xd, xs = np.empty(d, np.int8), np.empty(d // 32, np.float32), np.empty(d // 32, np.float32)
    quantize_q8_0(h, xq, xd, xs)
    per = 32 if x8 else 4     # codes per entry of the -12 sum x starts: a block (x8) or a lane
    neg = np.empty(d // per, np.int32)
    _neg(xq, neg, x8)
    gu = np.empty((k, 2 * ff), np.float32)
    if x8:
        _gate_up_x8(gate, up, top, xq, xd, neg, gu)
    else:
        _gate_up(gate, up, top, xq, xd, neg, gu)
    a = np.empty(ff, np.float32)
    aq, ad, as_ = np.empty((k, ff), np.int8), np.empty((k, ff // 32), np.float32), np.empty((k, ff // 32), np.float32)
    aneg = np.empty((k, ff // per), np.int32)
    for s in range(k):
        row = gu[s]
        for j in range(2 * ff):
            row[j] += b_gu[top[s], j]
        swiglu_oai_row(row[:ff], row[ff:], a)
        quantize_q8_0(a, aq[s], ad[s], as_[s])
        _neg(aq[s], aneg[s], x8)
    y = np.empty((k, d), np.float32)
    if x8:
        _down_x8(down, top, aq, ad, aneg, y)
    else:
        _down(down, top, aq, ad, aneg, y)
    for s in range(k):
        for j in range(d):
            y[s, j] = (y[s, j] + b_down[top[s], j]) * w[s]
    for s in range(1, k):
        for j in range(d):
            y[0, j] += y[s, j]
    for j in range(d):
        x[j] += y[0, j]
