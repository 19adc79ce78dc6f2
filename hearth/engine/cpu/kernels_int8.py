"""Row kernels with 8-bit activations: the decode matrix-vector products as llama.cpp computes them.

    quantize_q8_0(x, q, d, s)   x float32 [k] -> llama.cpp's Q8_0/Q8_1 blocks of 32: codes
                                q int8 [k], scales d float32 [k / 32], block sums s [k / 32]
    quantize_q8_k(x, q, d, bs)  x float32 [k] -> Q8_K blocks of 256: q int8 [k], d float32
                                [k / 256], code sums per 16 bs int32 [k / 16]
    q8_0_rows(x), q8_k_rows(x)  the same for every row of x float32 [n, k], in fresh arrays
                                [n, ...] (one compiled call: ~1 us, against ~7 us for three
                                numpy allocations and a call per row)
    matvec_T(ws, xq, xd, xs, out, scales)
                                out = the products of the stacked matrices ws (matrix p's rows
                                times scales[p]) with the quantized x, rows over all threads
The rounding of both quantizers is engine/cpu/quant_activations.py's (the numpy reference), bit for
bit. Every top-level function is written out (numba caches only top-level functions); each row is
summed in one order whatever the thread count.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import blocks_int8 as B
from .kernels import _part, _total
from .simd import f16_round, fadd, fsum, fzero

jit = njit(nogil=True, cache=True)
pjit = njit(nogil=True, cache=True, parallel=True)


@jit
def quantize_q8_0(x, q, d, s):
    for b in range(x.shape[0] // 32):
        amax = np.float32(0.0)
        for j in range(32):
            amax = max(amax, abs(x[32 * b + j]))
        inv = np.float32(127.0) / amax if amax > 0 else np.float32(0.0)
        total = 0
        for j in range(32):
            v = np.int64(np.rint(x[32 * b + j] * inv))
            q[32 * b + j] = v
            total += v
        d32 = amax / np.float32(127.0)
        d[b] = f16_round(d32)
        s[b] = f16_round(d32 * np.float32(total))


@jit
def quantize_q8_k(x, q, d, bs):
    for b in range(x.shape[0] // 256):
        amax, m = np.float32(0.0), np.float32(0.0)
        for j in range(256):
            ax = abs(x[256 * b + j])
            if ax > amax:
                amax, m = ax, x[256 * b + j]
        if amax == 0:
            d[b] = 0.0
            for j in range(256):
                q[256 * b + j] = 0
            for j in range(16):
                bs[16 * b + j] = 0
            continue
        iscale = np.float32(-127.0) / m
        for i in range(16):
            total = 0
            for j in range(16):
                v = min(np.int64(np.rint(iscale * x[256 * b + 16 * i + j])), 127)
                q[256 * b + 16 * i + j] = v
                total += v
            bs[16 * b + i] = total
        d[b] = np.float32(1.0) / iscale


@jit
def q8_0_rows(x):
    n, k = x.shape
    q, d, s = np.empty((n, k), np.int8), np.empty((n, k // 32), np.float32), np.empty((n, k // 32), np.float32)
    for i in range(n):
        quantize_q8_0(x[i], q[i], d[i], s[i])
    return q, d, s


@jit
def q8_k_rows(x):
    n, k = x.shape
    q, d, bs = np.empty((n, k), np.int8), np.empty((n, k // 256), np.float32), np.empty((n, k // 16), np.int32)
    for i in range(n):
        quantize_q8_k(x[i], q[i], d[i], bs[i])
    return q, d, bs


# One row's product a type, from one of two generators: the blocks of most types add into two
# vector accumulators; Q4_1 and Q5_1 carry their min terms in a scalar. Each is inlined into its
# type's top-level function below, which numba caches by name (a closure is not cached by itself:
# its cells, the compiled block functions, do not pickle the same in every process).

def _row2(dot, size: int):
    @njit(inline="always", nogil=True)
    def row_product(row, xq, xd, xs):
        a0, a1 = fzero(), fzero()
        for b in range(row.shape[0] // size):
            a0, a1 = dot(row, b * size, xq, xd, xs, b, a0, a1)
            a0, a1 = a1, a0
        return fsum(fadd(a0, a1))
    return row_product


def _row_min(dot, size: int):
    @njit(inline="always", nogil=True)
    def row_product(row, xq, xd, xs):
        a0, a1, t = fzero(), fzero(), np.float32(0.0)
        for b in range(row.shape[0] // size):
            a0, t = dot(row, b * size, xq, xd, xs, b, a0, t)
            a0, a1 = a1, a0
        return fsum(fadd(a0, a1)) + t
    return row_product


_q4_0 = _row2(B.dot_q4_0, 18)
_q4_1 = _row_min(B.dot_q4_1, 20)
_q5_0 = _row2(B.dot_q5_0, 22)
_q5_1 = _row_min(B.dot_q5_1, 24)
_q8_0 = _row2(B.dot_q8_0, 34)
_q2_k = _row2(B.dot_q2_k, 84)
_q3_k = _row2(B.dot_q3_k, 110)
_q4_k = _row2(B.dot_q4_k, 144)
_q5_k = _row2(B.dot_q5_k, 176)
_q6_k = _row2(B.dot_q6_k, 210)


@pjit
def matvec_q4_0(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q4_0(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q4_1(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q4_1(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q5_0(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q5_0(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q5_1(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q5_1(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q8_0(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q8_0(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q2_k(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q2_k(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q3_k(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q3_k(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q4_k(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q4_k(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q5_k(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q5_k(ws[p][r], xq, xd, xs) * scales[p]


@pjit
def matvec_q6_k(ws, xq, xd, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q6_k(ws[p][r], xq, xd, xs) * scales[p]
