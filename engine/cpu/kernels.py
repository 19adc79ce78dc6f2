"""Row kernels: matrix-vector products (decode) and row dequantization (prefill tiles).

Each quantized type has two top-level functions (numba caches only top-level functions, so they
cannot be made by a factory; each body is two calls into engine.cpu.blocks):
    matvec_T(w, x, xs, out, scale)         out[r] = scale * (row r of w) . x, rows over all threads
    dequant_T(w, r0, r1, out)              out[:r1 - r0] = float32 rows r0..r1 of w, this thread
w is the tensor's raw bytes as uint8 [rows, bytes per row], straight from the memory-mapped file.
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
def matvec_q4_0(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 18):
            a0, a1 = B.dot_q4_0(row, b * 18, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q4_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 18):
            B.deq_q4_0(row, b * 18, out[r - r0], b * 32)


@pjit
def matvec_q4_1(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 20):
            a0, a1 = B.dot_q4_1(row, b * 20, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q4_1(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 20):
            B.deq_q4_1(row, b * 20, out[r - r0], b * 32)


@pjit
def matvec_q5_0(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 22):
            a0, a1 = B.dot_q5_0(row, b * 22, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q5_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 22):
            B.deq_q5_0(row, b * 22, out[r - r0], b * 32)


@pjit
def matvec_q5_1(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 24):
            a0, a1 = B.dot_q5_1(row, b * 24, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q5_1(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 24):
            B.deq_q5_1(row, b * 24, out[r - r0], b * 32)


@pjit
def matvec_q8_0(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 34):
            a0, a1 = B.dot_q8_0(row, b * 34, x, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q8_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 34):
            B.deq_q8_0(row, b * 34, out[r - r0], b * 32)


@pjit
def matvec_q2_k(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 84):
            a0, a1 = B.dot_q2_k(row, b * 84, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q2_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 84):
            B.deq_q2_k(row, b * 84, out[r - r0], b * 256)


@pjit
def matvec_q3_k(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 110):
            a0, a1 = B.dot_q3_k(row, b * 110, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q3_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 110):
            B.deq_q3_k(row, b * 110, out[r - r0], b * 256)


@pjit
def matvec_q4_k(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 144):
            a0, a1 = B.dot_q4_k(row, b * 144, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q4_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 144):
            B.deq_q4_k(row, b * 144, out[r - r0], b * 256)


@pjit
def matvec_q5_k(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 176):
            a0, a1 = B.dot_q5_k(row, b * 176, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q5_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 176):
            B.deq_q5_k(row, b * 176, out[r - r0], b * 256)


@pjit
def matvec_q6_k(w, x, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 210):
            a0, a1 = B.dot_q6_k(row, b * 210, x, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q6_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 210):
            B.deq_q6_k(row, b * 210, out[r - r0], b * 256)


@pjit
def matvec_f32(w, x, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 64):
            a0 = fma_f32(a0, row, b * 64, x, b * 16)
            a1 = fma_f32(a1, row, b * 64 + 32, x, b * 16 + 8)
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_f32(w, r0, r1, out):
    for r in range(r0, r1):
        for b in range(w.shape[1] // 32):
            copy_f32(w[r], b * 32, out[r - r0], b * 8)


@pjit
def matvec_f16(w, x, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 32):
            a0 = fma_f16(a0, row, b * 32, x, b * 16)
            a1 = fma_f16(a1, row, b * 32 + 16, x, b * 16 + 8)
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_f16(w, r0, r1, out):
    for r in range(r0, r1):
        for b in range(w.shape[1] // 16):
            copy_f16(w[r], b * 16, out[r - r0], b * 8)


@pjit
def matvec_bf16(w, x, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 32):
            a0 = fma_bf16(a0, row, b * 32, x, b * 16)
            a1 = fma_bf16(a1, row, b * 32 + 16, x, b * 16 + 8)
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_bf16(w, r0, r1, out):
    for r in range(r0, r1):
        for b in range(w.shape[1] // 16):
            copy_bf16(w[r], b * 16, out[r - r0], b * 8)
