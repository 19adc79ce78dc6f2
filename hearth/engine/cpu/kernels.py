"""Row kernels: matrix-vector products (decode) and row dequantization (prefill tiles).

Each weight type has two top-level functions (numba caches only top-level functions, so they
cannot be made by a factory; each body is a loop around engine.cpu.blocks):
    matvec_T(ws, x, xs, out, scales)   out = the products of the matrices in the tuple ws, stacked
                                       (matrix p's rows times scales[p]): one parallel launch for
                                       q, k and v (or gate and up), rows over all threads
    dequant_T(w, r0, r1, out)          out[:r1 - r0] = float32 rows r0..r1 of w, this thread
A matrix is the tensor's raw bytes as uint8 [rows, bytes per row], straight from the mapped file.
x float32 [n_in] is the input, xs float32 [n_in / 16] its sums per 16 (block_sums); the float types
(F32, F16, BF16) take no xs.
A row is always summed in the same order, whatever the thread count, so results are bit-identical
on one or many threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import blocks as B
from .simd import copy_bf16, copy_f16, copy_f32, fma_bf16, fma_f16, fma_f32, fsum, fzero

jit = njit(nogil=True, cache=True)
pjit = njit(nogil=True, cache=True, parallel=True)


@njit(inline="always", nogil=True, cache=True)
def _total(ws):
    n = 0
    for p in range(len(ws)):
        n += ws[p].shape[0]
    return n


@jit
def _part(ws, g):
    """Global row g of the matrices ws stacked -> (matrix, row)."""
    p, r = 0, np.int64(g)
    while r >= ws[p].shape[0]:
        r -= ws[p].shape[0]
        p += 1
    return p, r


@jit
def block_sums(x, xs):
    """xs[r, i] = sum of x[r, 16 i:16 i + 16] (the offset terms of Q4_1, Q5_1, Q2_K, Q4_K, Q5_K)."""
    for r in range(x.shape[0]):
        for i in range(x.shape[1] // 16):
            s = np.float32(0.0)
            for j in range(16):
                s += x[r, 16 * i + j]
            xs[r, i] = s


@pjit
def matvec_q4_0(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 18):
            a0, a1 = B.dot_q4_0(row, b * 18, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q4_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 18):
            B.deq_q4_0(row, b * 18, out[r - r0], b * 32)


@pjit
def matvec_q4_1(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 20):
            a0, a1 = B.dot_q4_1(row, b * 20, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q4_1(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 20):
            B.deq_q4_1(row, b * 20, out[r - r0], b * 32)


@pjit
def matvec_q5_0(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 22):
            a0, a1 = B.dot_q5_0(row, b * 22, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q5_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 22):
            B.deq_q5_0(row, b * 22, out[r - r0], b * 32)


@pjit
def matvec_q5_1(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 24):
            a0, a1 = B.dot_q5_1(row, b * 24, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q5_1(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 24):
            B.deq_q5_1(row, b * 24, out[r - r0], b * 32)


@pjit
def matvec_q8_0(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 34):
            a0, a1 = B.dot_q8_0(row, b * 34, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q8_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 34):
            B.deq_q8_0(row, b * 34, out[r - r0], b * 32)


@pjit
def matvec_q2_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 84):
            a0, a1 = B.dot_q2_k(row, b * 84, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q2_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 84):
            B.deq_q2_k(row, b * 84, out[r - r0], b * 256)


@pjit
def matvec_q3_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 110):
            a0, a1 = B.dot_q3_k(row, b * 110, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q3_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 110):
            B.deq_q3_k(row, b * 110, out[r - r0], b * 256)


@pjit
def matvec_q4_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 144):
            a0, a1 = B.dot_q4_k(row, b * 144, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q4_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 144):
            B.deq_q4_k(row, b * 144, out[r - r0], b * 256)


@pjit
def matvec_q5_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 176):
            a0, a1 = B.dot_q5_k(row, b * 176, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q5_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 176):
            B.deq_q5_k(row, b * 176, out[r - r0], b * 256)


@pjit
def matvec_q6_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 210):
            a0, a1 = B.dot_q6_k(row, b * 210, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_q6_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(row.shape[0] // 210):
            B.deq_q6_k(row, b * 210, out[r - r0], b * 256)


@pjit
def matvec_f32(ws, x, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 64):
            a0 = fma_f32(a0, row, b * 64, x, b * 16)
            a1 = fma_f32(a1, row, b * 64 + 32, x, b * 16 + 8)
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_f32(w, r0, r1, out):
    for r in range(r0, r1):
        for b in range(w.shape[1] // 32):
            copy_f32(w[r], b * 32, out[r - r0], b * 8)


@pjit
def matvec_f16(ws, x, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 32):
            a0 = fma_f16(a0, row, b * 32, x, b * 16)
            a1 = fma_f16(a1, row, b * 32 + 16, x, b * 16 + 8)
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_f16(w, r0, r1, out):
    for r in range(r0, r1):
        for b in range(w.shape[1] // 16):
            copy_f16(w[r], b * 16, out[r - r0], b * 8)


@pjit
def matvec_bf16(ws, x, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row, a0, a1 = ws[p][r], fzero(), fzero()
        for b in range(row.shape[0] // 32):
            a0 = fma_bf16(a0, row, b * 32, x, b * 16)
            a1 = fma_bf16(a1, row, b * 32 + 16, x, b * 16 + 8)
        out[g] = (fsum(a0) + fsum(a1)) * scales[p]


@jit
def dequant_bf16(w, r0, r1, out):
    for r in range(r0, r1):
        for b in range(w.shape[1] // 16):
            copy_bf16(w[r], b * 16, out[r - r0], b * 8)
