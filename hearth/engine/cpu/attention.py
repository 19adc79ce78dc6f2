"""Decode attention over a float16 KV cache, reading the cache's float16 values in place.

numpy cannot multiply float16 by float32 without first converting the operand to a float32 copy:
for one decoded token that is every attended position of every layer, converted again at every
token. Here each K row and V row is widened in registers (8 lanes at a time, `<8 x half>` ->
`<8 x float>`, F16C on x86) and all arithmetic is float32, as in the float32 path
(engine/models/layers.py `_attend_one`, the reference the tests compare against).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .simd import V8F32, _fmuladd, _ptr, _splat, copy_f16, f32x8, fadd, fma_f16, fsum, fzero


def _half8(context, builder, arrty, arr, off):
    h = builder.load(_ptr(context, builder, arrty, arr, off, ir.VectorType(ir.HalfType(), 8)), align=1)
    return builder.fpext(h, V8F32)


@intrinsic
def fma_f16s(typingctx, acc, w, woff, s):
    """acc + s * (the 8 float16 values at byte offset woff of the uint8 array w), as float32."""
    def codegen(context, builder, sig, args):
        return _fmuladd(builder, _half8(context, builder, sig.args[1], args[1], args[2]),
                        _splat(builder, args[3], V8F32), args[0])
    return f32x8(acc, w, woff, types.float32), codegen


@intrinsic
def store8(typingctx, out, off, v):
    """out[off:off+8] = v (float32)."""
    def codegen(context, builder, sig, args):
        builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], V8F32), align=4)
        return context.get_dummy_value()
    return types.void(out, off, v), codegen


@intrinsic
def axpy_f16(typingctx, out, ooff, w, woff, s):
    """out[ooff:ooff+8] += s * (the 8 float16 values at byte offset woff of the uint8 array w)."""
    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], args[1], V8F32)
        acc = builder.load(p, align=4)
        builder.store(_fmuladd(builder, _half8(context, builder, sig.args[2], args[2], args[3]),
                               _splat(builder, args[4], V8F32), acc), p, align=4)
        return context.get_dummy_value()
    return types.void(out, ooff, w, woff, types.float32), codegen


@njit(nogil=True, cache=True)
def scores_f16(q, kb, start, n_keys, s):
    """s[h, r, j] = q[h, r] . K[h, start + j] for the n_keys keys from `start` of a float16 cache.

    q float32 [nkv, rep, hd] (query head kv * rep + r uses KV head kv); kb: the layer's K bytes, uint8
    [nkv, max_ctx, 2 hd]; s float32 [nkv, rep, >= n_keys]. hd is a multiple of 32. Each key row is
    read once for the rep queries of its head; four accumulators cut the chain of dependent FMAs."""
    nkv, rep, hd = q.shape
    for h in range(nkv):
        for j in range(n_keys):
            row = kb[h, start + j]
            for r in range(rep):
                qv = q[h, r]
                a0, a1, a2, a3 = fzero(), fzero(), fzero(), fzero()
                for b in range(hd // 32):
                    a0 = fma_f16(a0, row, b * 64, qv, b * 32)
                    a1 = fma_f16(a1, row, b * 64 + 16, qv, b * 32 + 8)
                    a2 = fma_f16(a2, row, b * 64 + 32, qv, b * 32 + 16)
                    a3 = fma_f16(a3, row, b * 64 + 48, qv, b * 32 + 24)
                s[h, r, j] = fsum(fadd(fadd(a0, a1), fadd(a2, a3)))


@njit(nogil=True, cache=True)
def values_f16(p, vb, start, n_keys, out):
    """out[h, r] = sum_j p[h, r, j] V[h, start + j] (float32 sums) over a float16 cache's V bytes
    vb uint8 [nkv, max_ctx, 2 hd]; p float32 [nkv, rep, >= n_keys]; out float32 [nkv, rep, hd]."""
    nkv, rep, hd = out.shape
    for h in range(nkv):
        for r in range(rep):
            o = out[h, r]
            if hd % 64 == 0:
                # 64 columns at a time in 8 register accumulators: 8 independent FMA chains per key
                for c in range(hd // 64):
                    a0, a1, a2, a3, a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero()
                    for j in range(n_keys):
                        row = vb[h, start + j]
                        w = p[h, r, j]
                        b = c * 128
                        a0 = fma_f16s(a0, row, b, w)
                        a1 = fma_f16s(a1, row, b + 16, w)
                        a2 = fma_f16s(a2, row, b + 32, w)
                        a3 = fma_f16s(a3, row, b + 48, w)
                        a4 = fma_f16s(a4, row, b + 64, w)
                        a5 = fma_f16s(a5, row, b + 80, w)
                        a6 = fma_f16s(a6, row, b + 96, w)
                        a7 = fma_f16s(a7, row, b + 112, w)
                    e = c * 64
                    store8(o, e, a0)
                    store8(o, e + 8, a1)
                    store8(o, e + 16, a2)
                    store8(o, e + 24, a3)
                    store8(o, e + 32, a4)
                    store8(o, e + 40, a5)
                    store8(o, e + 48, a6)
                    store8(o, e + 56, a7)
                continue
            o[:] = 0.0
            for j in range(n_keys):
                row = vb[h, start + j]
                w = p[h, r, j]
                for b in range(hd // 8):
                    axpy_f16(o, b * 8, row, b * 16, w)


@njit(nogil=True, cache=True)
def widen_f16(b, start, n_keys, out):
    """out[h, j] = the float16 row start + j of head h as float32 (exact); b: a cache layer's bytes,
    uint8 [nkv, max_ctx, 2 hd]; out float32 [nkv, n_keys, hd], hd a multiple of 8. F16C-speed
    (numpy's own float16 conversion is element by element)."""
    nkv, _, hd = out.shape
    for h in range(nkv):
        for j in range(n_keys):
            row, o = b[h, start + j], out[h, j]
            for c in range(hd // 8):
                copy_f16(row, c * 16, o, c * 8)


def attend_one_f16(q, k_cache, v_cache, start: int, n_keys: int) -> np.ndarray:
    """Softmax attention of q float32 [nkv, rep, hd] over keys [start, start + n_keys) of a float16
    cache layer (k_cache, v_cache [nkv, max_ctx, hd]): float32 [nkv, rep, hd]. The products read the
    cache in place (the kernels above); the softmax is numpy's vectorized exp."""
    nkv, rep, hd = q.shape
    s = np.empty((nkv, rep, n_keys), np.float32)
    scores_f16(np.ascontiguousarray(q), k_cache.view(np.uint8), start, n_keys, s)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    o = np.empty((nkv, rep, hd), np.float32)
    values_f16(s, v_cache.view(np.uint8), start, n_keys, o)
    o /= s.sum(axis=-1, keepdims=True)
    return o
