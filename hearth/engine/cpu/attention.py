"""Decode attention over the KV cache read in place (float16 or float32), compiled.

numpy cannot multiply float16 by float32 without first converting the operand to a float32 copy:
for one decoded token that is every attended position of every layer, converted again at every
token. Here each K row and V row is read from the cache's bytes, float16 widened in registers (8
lanes at a time, `<8 x half>` -> `<8 x float>`, F16C on x86), and all arithmetic is float32:
scores, the softmax (engine/cpu/softmax.py's exp), the values. One KV head's query heads a task
(each cached row read from memory once for all of them), long spans in pieces; the tasks over
numba's threads (`attend_heads`) or on this thread (`attend_serial`); `attend_one` calls them from
Python. The reference the tests compare against: engine/models/layers.py `attend_one_numpy`.
`widen_f16` copies a float16 cache's positions to float32 for prefill's numpy products.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from .simd import V8F32, _fmuladd, _ptr, _splat, copy_f16, f32x8, fadd, fma_f16, fma_f32, fsum, fzero
from .softmax import expf, softmax_max_at

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


# --- attention of one KV head's query heads over the cached positions ----------------------------
#
# A task is one KV head's group of `rep` query heads over one piece of the keys: each K row and V row
# is read from memory once for the whole group (key blocks of KEY_BLOCK rows, read from memory for
# the group's first head and from L1 for the others), and every query head's arithmetic is that of a
# head on its own: each score the same float32 dot product, each output column one chain of FMAs over
# the keys in order (kept in `part` between key blocks: stored and loaded float32, exact).
# Long spans are split into pieces (`pieces`, fixed by the span's length alone, so that the bits
# never depend on the threads): each piece's softmax has its own max and sum, merged in piece order
# after the parallel loop (flash-decoding: rescaled by exp(piece max - max of maxes)), so that 3 KV
# heads share out evenly over 2 threads.

KEY_BLOCK = 32          # 4 KB of float16 K (8 KB float32) at head dim 64: the group's L1 tile
SPLIT_FROM = 256        # spans shorter than this stay one piece (short spans: few keys to share out)
PIECE_KEYS = 512        # the longest piece; pieces come in even numbers


@njit(nogil=True, cache=True)
def pieces(T):
    """(number of pieces, keys per piece but the last) for a span of T keys."""
    if T < SPLIT_FROM:
        return 1, T
    n = 2 * ((T + 2 * PIECE_KEYS - 1) // (2 * PIECE_KEYS))
    return n, (T + n - 1) // n


@intrinsic
def load8(typingctx, arr, off):
    """arr[off:off+8] (float32)."""
    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], V8F32), align=4)
    return f32x8(arr, types.intp), codegen


@inline
def _fma_q(acc, row, off, q, qo, f16):
    """acc + the 8 cached values at byte offset off of row times q[qo:qo+8]."""
    if f16:
        return fma_f16(acc, row, off, q, qo)
    return fma_f32(acc, row, off, q, qo)


@inline
def _score(row, q, qo, hd, f16):
    """q[qo:qo + hd] . the cached row (float16 or float32 bytes)."""
    es = 2 if f16 else 4              # bytes per cached value
    a0, a1, a2, a3 = fzero(), fzero(), fzero(), fzero()
    if hd % 32 == 0:
        for b in range(hd // 32):
            o = b * 32 * es
            a0 = _fma_q(a0, row, o, q, qo + b * 32, f16)
            a1 = _fma_q(a1, row, o + 8 * es, q, qo + b * 32 + 8, f16)
            a2 = _fma_q(a2, row, o + 16 * es, q, qo + b * 32 + 16, f16)
            a3 = _fma_q(a3, row, o + 24 * es, q, qo + b * 32 + 24, f16)
    else:
        for b in range(hd // 8):
            a0 = _fma_q(a0, row, b * 8 * es, q, qo + b * 8, f16)
    return fsum(fadd(fadd(a0, a1), fadd(a2, a3)))


@inline
def _fma_row(acc, row, off, w, f16):
    if f16:
        return fma_f16s(acc, row, off, w)
    return fma_f32s(acc, row, off, w)


@inline
def _values(rows, r0, b0, b1, scores, so, f16, hd, dst, do):
    """dst[do:do + hd] (the sums so far: zeros before the first block, b0 = 0) += scores[so + j] x
    rows[r0 + j] (V rows: bytes), for j in [b0, b1), in order: one FMA chain per column."""
    es = 2 if f16 else 4
    if hd % 64 == 0:
        # 64 columns at a time in 8 register accumulators: 8 independent FMA chains per key
        for c in range(hd // 64):
            e = do + c * 64
            if b0 == 0:
                a0, a1, a2, a3, a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero()
            else:
                a0, a1, a2, a3 = load8(dst, e), load8(dst, e + 8), load8(dst, e + 16), load8(dst, e + 24)
                a4, a5, a6, a7 = load8(dst, e + 32), load8(dst, e + 40), load8(dst, e + 48), load8(dst, e + 56)
            b = c * 64 * es
            for j in range(b0, b1):
                row = rows[r0 + j]
                w = scores[so + j]
                a0 = _fma_row(a0, row, b, w, f16)
                a1 = _fma_row(a1, row, b + 8 * es, w, f16)
                a2 = _fma_row(a2, row, b + 16 * es, w, f16)
                a3 = _fma_row(a3, row, b + 24 * es, w, f16)
                a4 = _fma_row(a4, row, b + 32 * es, w, f16)
                a5 = _fma_row(a5, row, b + 40 * es, w, f16)
                a6 = _fma_row(a6, row, b + 48 * es, w, f16)
                a7 = _fma_row(a7, row, b + 56 * es, w, f16)
            store8(dst, e, a0)
            store8(dst, e + 8, a1)
            store8(dst, e + 16, a2)
            store8(dst, e + 24, a3)
            store8(dst, e + 32, a4)
            store8(dst, e + 40, a5)
            store8(dst, e + 48, a6)
            store8(dst, e + 56, a7)
    else:
        for c in range(hd // 8):
            e = do + c * 8
            a0 = fzero() if b0 == 0 else load8(dst, e)
            for j in range(b0, b1):
                a0 = _fma_row(a0, rows[r0 + j], c * 8 * es, scores[so + j], f16)
            store8(dst, e, a0)


@inline
def _widen(rows, r0, n, hd, wide):
    """wide[j] = rows[r0 + j] (float16 bytes) as float32 bytes, j < n: exact, so a group's heads
    read float32 from L1 and the arithmetic stays that of the float16 rows."""
    for j in range(n):
        src, dst = rows[r0 + j], wide[j]
        for c in range(hd // 8):
            copy_f16(src, c * 16, dst, c * 32)


@inline
def _group(t, q, kl, vl, f16, start, T, n_pieces, piece, rep, hd, scores, part, stats):
    """Task t: the query heads of KV head t // n_pieces over piece t % n_pieces of keys [start,
    start + T): part[t, r] = the piece's sums of exp(score - m) x V, stats[t, r] = (m, the sum of
    those exps), for each query head r of the group."""
    kvh, p = t // n_pieces, t % n_pieces
    j0 = p * piece
    n = min(T, j0 + piece) - j0
    k0 = start + j0                   # the piece's first cache row
    h0 = kvh * rep
    krows, vrows = kl[kvh], vl[kvh]
    # float16 rows read by several heads: each key block widened once (vcvtph2ps once, not rep times)
    widen = f16 and rep > 1
    wide = np.empty((KEY_BLOCK if widen else 0, hd * 4), np.uint8)          # [key, hd] float32 bytes
    for b0 in range(0, n, KEY_BLOCK):
        b1 = min(n, b0 + KEY_BLOCK)
        if widen:
            _widen(krows, k0 + b0, b1 - b0, hd, wide)
        for r in range(rep):
            h = h0 + r
            so = h * T + j0
            for j in range(b0, b1):
                if widen:
                    scores[so + j] = _score(wide[j - b0], q, h * hd, hd, False)
                else:
                    scores[so + j] = _score(krows[k0 + j], q, h * hd, hd, f16)
    for r in range(rep):
        total, m = softmax_max_at(scores, (h0 + r) * T + j0, n)
        stats[(t * rep + r) * 2] = m
        stats[(t * rep + r) * 2 + 1] = total
    for b0 in range(0, n, KEY_BLOCK):
        b1 = min(n, b0 + KEY_BLOCK)
        if widen:
            _widen(vrows, k0 + b0, b1 - b0, hd, wide)
        for r in range(rep):
            so, do = (h0 + r) * T + j0, (t * rep + r) * hd
            if widen:
                _values(wide, -b0, b0, b1, scores, so, False, hd, part, do)
            else:
                _values(vrows, k0, b0, b1, scores, so, f16, hd, part, do)


@inline
def _task(t, q, kl, vl, f16, start, T, n_pieces, piece, rep, hd, scores, out, part, stats):
    if f16:       # each dtype's loops compiled with its constants (bytes per value, loads)
        _group(t, q, kl, vl, True, start, T, n_pieces, piece, rep, hd, scores, part, stats)
    else:
        _group(t, q, kl, vl, False, start, T, n_pieces, piece, rep, hd, scores, part, stats)
    if n_pieces == 1:                 # the group's heads are done: t is the KV head
        for r in range(rep):
            po = (t * rep + r) * hd
            total = stats[(t * rep + r) * 2 + 1]
            for e in range(hd):
                out[po + e] = part[po + e] / total


@inline
def _merge(nh, n_pieces, rep, hd, part, stats, out):
    """out[h*hd:] = the pieces of head h merged in piece order: sum_p e_p part_p / sum_p e_p l_p,
    e_p = exp(m_p - max_p m_p)."""
    for h in range(nh):
        kvh, r = h // rep, h % rep
        m = np.float32(-np.inf)
        for p in range(n_pieces):
            m = max(m, stats[((kvh * n_pieces + p) * rep + r) * 2])
        oo = h * hd
        for e in range(oo, oo + hd):
            out[e] = 0.0
        total = np.float32(0.0)
        for p in range(n_pieces):
            i = (kvh * n_pieces + p) * rep + r
            w = expf(stats[i * 2] - m)
            total += w * stats[i * 2 + 1]
            po = i * hd
            for e in range(hd):
                out[oo + e] += w * part[po + e]
        for e in range(oo, oo + hd):
            out[e] = out[e] / total


@njit(nogil=True, cache=True, parallel=True)
def attend_heads(q, kl, vl, f16, start, T, nh, rep, hd, scores, out):
    """The query heads nh (head h uses KV head h // rep) over keys [start, start + T): out float32
    [nh * hd]; scores float32 [>= nh * T] scratch. Tasks over numba's threads."""
    nkv = nh // rep
    n_pieces, piece = pieces(T)
    n_tasks = nkv * n_pieces
    part = np.empty(n_tasks * rep * hd, np.float32)                           # [task, rep, hd]
    stats = np.empty(n_tasks * rep * 2, np.float32)                           # [task, rep, (m, sum)]
    for t in prange(n_tasks):
        _task(t, q, kl, vl, f16, start, T, n_pieces, piece, rep, hd, scores, out, part, stats)
    if n_pieces > 1:
        _merge(nh, n_pieces, rep, hd, part, stats, out)


@njit(nogil=True, cache=True)
def attend_serial(q, kl, vl, f16, start, T, nh, rep, hd, scores, out):
    """attend_heads on this thread (the same tasks, the same bits)."""
    nkv = nh // rep
    n_pieces, piece = pieces(T)
    n_tasks = nkv * n_pieces
    part = np.empty(n_tasks * rep * hd, np.float32)
    stats = np.empty(n_tasks * rep * 2, np.float32)                           # [task, rep, (m, sum)]
    for t in range(n_tasks):
        _task(t, q, kl, vl, f16, start, T, n_pieces, piece, rep, hd, scores, out, part, stats)
    if n_pieces > 1:
        _merge(nh, n_pieces, rep, hd, part, stats, out)


# Below this many multiply-adds of attention (heads x keys x head dim, scores and values) the heads
# run on the calling thread: a parallel launch costs more than it saves.
PARALLEL_ATTENTION_FROM = 1 << 16


def attend_one(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, start: int, n_keys: int,
               parallel: bool = True) -> np.ndarray:
    """Softmax attention of one token's queries q float32 [nh * hd] (head h uses KV head h // (nh /
    nkv)) over keys [start, start + n_keys) of a cache layer (k_cache, v_cache float16 or float32
    [nkv, max_ctx, hd], hd a multiple of 8): float32 [nh * hd]. The compiled layers' attention, for
    the per-operation path (engine/models/layers.py), so that both give the same bits."""
    nkv, _, hd = k_cache.shape
    qf = np.ascontiguousarray(q, dtype=np.float32).reshape(-1)
    nh = qf.size // hd
    out = np.empty(nh * hd, np.float32)
    scores = np.empty(nh * n_keys, np.float32)
    f16 = k_cache.dtype == np.float16
    fn = attend_heads if parallel and nh * n_keys * hd * 2 >= PARALLEL_ATTENTION_FROM else attend_serial
    fn(qf, k_cache.view(np.uint8), v_cache.view(np.uint8), f16, start, n_keys, nh, nh // nkv, hd, scores, out)
    return out
