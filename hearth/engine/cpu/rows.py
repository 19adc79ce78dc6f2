"""Element-wise work of a one-token pass, compiled: RMSNorm, RoPE and SiLU x up of one row.

A decode token on the per-operation path runs each of these ~60 times (twice per layer, plus the
q/k norms); as numpy they cost ~10-20 us a call in interpreter and dispatch overhead (measured:
RMSNorm 9.7 us, RoPE 20.9 us on SmolLM2's rows), as one compiled call ~1-2 us. The compiled layers
(engine/cpu/decode_layer.py) inline the same row functions, so both paths give the same bits. The
arithmetic is the numpy code's (engine/models/layers.py), row by row; the sum of squares is
accumulated in float64; SiLU's exp is engine/cpu/softmax.py's `expf` (numpy's own exp rounds
differently from one build to another).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from .simd import V8F32, _const, _ptr
from .softmax import exp8_any, expf

jit = njit(nogil=True, cache=True)
inline = njit(inline="always", nogil=True, cache=True)


@inline
def rms_row(x, w, eps, out):
    """out = x / sqrt(mean(x^2) + eps) * w for one row (out may be x)."""
    d = x.shape[0]
    ss = 0.0
    for j in range(d):
        ss += np.float64(x[j]) * np.float64(x[j])
    s = np.float32(1.0 / math.sqrt(ss / d + eps))
    for j in range(d):
        out[j] = x[j] * (w[j] * s)


@jit
def rms_norm_rows(x, w, eps):
    """x float32 [r, d], w float32 [rw, d] (rw 1: one weight for every row; rw r: one per row)
    -> float32 [r, d]: x / sqrt(mean(x^2) + eps) * w."""
    r, d = x.shape
    out = np.empty((r, d), np.float32)
    for i in range(r):
        rms_row(x[i], w[i % w.shape[0]], eps, out[i])
    return out


@inline
def rope_head(x, o, c, s, n_rot, neox):
    """Rotate the head x[o:o + hd] (float32) in place by cos c, sin s [n_rot / 2]: NeoX pairs
    (i, i + n_rot / 2), normal pairs (2i, 2i + 1)."""
    half = n_rot // 2
    for i in range(half):
        ia, ib = (o + i, o + i + half) if neox else (o + 2 * i, o + 2 * i + 1)
        a, b = x[ia], x[ib]
        x[ia] = a * c[i] - b * s[i]
        x[ib] = b * c[i] + a * s[i]


@jit
def rope_rows(x, c, s, n_rot, neox):
    """Rotate x float32 [heads, hd] in place by cos c, sin s float32 [n_rot / 2]."""
    for h in range(x.shape[0]):
        rope_head(x[h], 0, c, s, n_rot, neox)


@intrinsic
def silu_mul8(typingctx, g, u, out, off):
    """out[off:off+8] = g / (1 + exp(-g)) * u over g[off:off+8], u[off:off+8] (float32, each step
    rounded as numpy's silu_mul rounds it; the exp is softmax.py's 8-lane one)."""
    def codegen(context, builder, sig, args):
        gv = builder.load(_ptr(context, builder, sig.args[0], args[0], args[3], V8F32), align=4)
        uv = builder.load(_ptr(context, builder, sig.args[1], args[1], args[3], V8F32), align=4)
        e = exp8_any(builder, builder.fsub(_const(V8F32, -0.0), gv))
        r = builder.fmul(builder.fdiv(gv, builder.fadd(e, _const(V8F32, 1.0))), uv)
        builder.store(r, _ptr(context, builder, sig.args[2], args[2], args[3], V8F32), align=4)
        return context.get_dummy_value()
    return types.void(g, u, out, types.intp), codegen


@inline
def silu_mul_row(g, u, out):
    """out = silu(g) * u = g / (1 + exp(-g)) * u, rounded step by step as numpy's silu_mul."""
    n = g.shape[0]
    j = 0
    while j + 8 <= n:
        silu_mul8(g, u, out, j)
        j += 8
    for k in range(j, n):
        out[k] = g[k] / (np.float32(1.0) + expf(-g[k])) * u[k]


@jit
def silu_mul_rows(g, u):
    """g, u float32 [r, n] -> float32 [r, n]."""
    out = np.empty(g.shape, np.float32)
    for i in range(g.shape[0]):
        silu_mul_row(g[i], u[i], out[i])
    return out
