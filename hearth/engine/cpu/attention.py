"""Decode attention over the KV cache read in place (float16 or float32), compiled.

numpy cannot multiply float16 by float32 without first converting the operand to a float32 copy:
for one decoded token that is every attended position of every layer, converted again at every
token. Here each K row and V row is read from the cache's bytes, float16 widened in registers (8
lanes at a time, `<8 x half>` -> `<8 x float>`, F16C on x86), and all arithmetic is float32:
scores, the softmax (engine/cpu/softmax.py's exp), the values. One query head a task, the heads
over numba's threads (`attend_heads`) or on this thread (`attend_serial`); `attend_one` calls them
from Python. The reference the tests compare against: engine/models/layers.py `attend_one_numpy`.
`widen_f16` copies a float16 cache's positions to float32 for prefill's numpy products.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from .simd import V8F32, _fmuladd, _ptr, _splat, copy_f16, f32x8, fadd, fma_f16, fma_f32, fsum, fzero
from .softmax import softmax_at

inline = njit(inline="always", nogil=True, cache=True)


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
def fma_f32s(typingctx, acc, w, woff, s):
    """acc + s * (the 8 float32 values at byte offset woff of the uint8 array w)."""
    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], V8F32), align=1)
        return _fmuladd(builder, v, _splat(builder, args[3], V8F32), args[0])
    return f32x8(acc, w, woff, types.float32), codegen


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


# --- attention of one query head over the cached positions -------------------------------------

@inline
def _score(row, q, qo, hd, f16):
    """q[qo:qo + hd] . the cached row (float16 or float32 bytes)."""
    a0, a1, a2, a3 = fzero(), fzero(), fzero(), fzero()
    if f16:
        if hd % 32 == 0:
            for b in range(hd // 32):
                a0 = fma_f16(a0, row, b * 64, q, qo + b * 32)
                a1 = fma_f16(a1, row, b * 64 + 16, q, qo + b * 32 + 8)
                a2 = fma_f16(a2, row, b * 64 + 32, q, qo + b * 32 + 16)
                a3 = fma_f16(a3, row, b * 64 + 48, q, qo + b * 32 + 24)
        else:
            for b in range(hd // 8):
                a0 = fma_f16(a0, row, b * 16, q, qo + b * 8)
    else:
        if hd % 32 == 0:
            for b in range(hd // 32):
                a0 = fma_f32(a0, row, b * 128, q, qo + b * 32)
                a1 = fma_f32(a1, row, b * 128 + 32, q, qo + b * 32 + 8)
                a2 = fma_f32(a2, row, b * 128 + 64, q, qo + b * 32 + 16)
                a3 = fma_f32(a3, row, b * 128 + 96, q, qo + b * 32 + 24)
        else:
            for b in range(hd // 8):
                a0 = fma_f32(a0, row, b * 32, q, qo + b * 8)
    return fsum(fadd(fadd(a0, a1), fadd(a2, a3)))


@inline
def _fma_row(acc, row, off, w, f16):
    if f16:
        return fma_f16s(acc, row, off, w)
    return fma_f32s(acc, row, off, w)


@inline
def _head(h, q, kl, vl, f16, start, T, rep, hd, scores, out, sinks, has_sink):
    """Query head h (q at h * hd) over keys [start, start + T) of KV head h // rep -> out[h*hd:].
    has_sink: sinks[h] is one more logit in the softmax (its max and its sum) that adds no value
    (gpt-oss; ggml_soft_max_ext's sinks): the head's scores hold T + 1 entries, the last the sink."""
    kvh = h // rep
    so = h * (T + 1) if has_sink else h * T
    for j in range(T):
        scores[so + j] = _score(kl[kvh, start + j], q, h * hd, hd, f16)
    if has_sink:
        scores[so + T] = sinks[h]
        total = softmax_at(scores, so, T + 1)
    else:
        total = softmax_at(scores, so, T)
    es = 2 if f16 else 4              # bytes per cached value
    oo = h * hd
    if hd % 64 == 0:
        # 64 columns at a time in 8 register accumulators: 8 independent FMA chains per key
        for c in range(hd // 64):
            a0, a1, a2, a3, a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero()
            b = c * 64 * es
            for j in range(T):
                row = vl[kvh, start + j]
                w = scores[so + j]
                a0 = _fma_row(a0, row, b, w, f16)
                a1 = _fma_row(a1, row, b + 8 * es, w, f16)
                a2 = _fma_row(a2, row, b + 16 * es, w, f16)
                a3 = _fma_row(a3, row, b + 24 * es, w, f16)
                a4 = _fma_row(a4, row, b + 32 * es, w, f16)
                a5 = _fma_row(a5, row, b + 40 * es, w, f16)
                a6 = _fma_row(a6, row, b + 48 * es, w, f16)
                a7 = _fma_row(a7, row, b + 56 * es, w, f16)
            e = oo + c * 64
            store8(out, e, a0)
            store8(out, e + 8, a1)
            store8(out, e + 16, a2)
            store8(out, e + 24, a3)
            store8(out, e + 32, a4)
            store8(out, e + 40, a5)
            store8(out, e + 48, a6)
            store8(out, e + 56, a7)
    else:
        for c in range(hd // 8):
            a0 = fzero()
            for j in range(T):
                a0 = _fma_row(a0, vl[kvh, start + j], c * 8 * es, scores[so + j], f16)
            store8(out, oo + c * 8, a0)
    for e in range(oo, oo + hd):
        out[e] = out[e] / total


@njit(nogil=True, cache=True, parallel=True)
def attend_heads(q, kl, vl, f16, start, T, nh, rep, hd, scores, out):
    for h in prange(nh):
        _head(h, q, kl, vl, f16, start, T, rep, hd, scores, out, scores, False)


@njit(nogil=True, cache=True)
def attend_serial(q, kl, vl, f16, start, T, nh, rep, hd, scores, out):
    for h in range(nh):
        _head(h, q, kl, vl, f16, start, T, rep, hd, scores, out, scores, False)


@njit(nogil=True, cache=True, parallel=True)
def attend_heads_sinks(q, kl, vl, f16, start, T, nh, rep, hd, scores, out, sinks):
    for h in prange(nh):
        _head(h, q, kl, vl, f16, start, T, rep, hd, scores, out, sinks, True)


@njit(nogil=True, cache=True)
def attend_serial_sinks(q, kl, vl, f16, start, T, nh, rep, hd, scores, out, sinks):
    for h in range(nh):
        _head(h, q, kl, vl, f16, start, T, rep, hd, scores, out, sinks, True)


# Below this many multiply-adds of attention (heads x keys x head dim, scores and values) the heads
# run on the calling thread: a parallel launch costs more than it saves.
PARALLEL_ATTENTION_FROM = 1 << 16


def attend_one(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, start: int, n_keys: int,
               parallel: bool = True, sinks: np.ndarray | None = None) -> np.ndarray:
    """Softmax attention of one token's queries q float32 [nh * hd] (head h uses KV head h // (nh /
    nkv)) over keys [start, start + n_keys) of a cache layer (k_cache, v_cache float16 or float32
    [nkv, max_ctx, hd], hd a multiple of 8): float32 [nh * hd]. The compiled layers' attention, for
    the per-operation path (engine/models/layers.py), so that both give the same bits. `sinks`
    float32 [nh]: one sink logit per query head (engine/models/attention_sinks.py's arithmetic)."""
    nkv, _, hd = k_cache.shape
    qf = np.ascontiguousarray(q, dtype=np.float32).reshape(-1)
    nh = qf.size // hd
    out = np.empty(nh * hd, np.float32)
    f16 = k_cache.dtype == np.float16
    par = parallel and nh * n_keys * hd * 2 >= PARALLEL_ATTENTION_FROM
    args = (qf, k_cache.view(np.uint8), v_cache.view(np.uint8), f16, start, n_keys, nh, nh // nkv, hd)
    if sinks is None:
        scores = np.empty(nh * n_keys, np.float32)
        (attend_heads if par else attend_serial)(*args, scores, out)
    else:
        scores = np.empty(nh * (n_keys + 1), np.float32)
        sk = np.ascontiguousarray(sinks, dtype=np.float32)
        (attend_heads_sinks if par else attend_serial_sinks)(*args, scores, out, sk)
    return out
