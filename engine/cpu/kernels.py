"""Row kernels: matrix-vector products (decode) and row dequantization (prefill tiles).

Each quantized type has two top-level functions (numba caches only top-level functions, so they
cannot be made by a factory; each body is two calls into engine.cpu.blocks):
    matvec_T(w, xq, xd, xs, out, scale)    out[r] = scale * (row r of w) . x, rows over all threads
    dequant_T(w, r0, r1, out)              out[:r1 - r0] = float32 rows r0..r1 of w, this thread
w is the tensor's raw bytes as uint8 [rows, bytes per row], straight from the memory-mapped file.
The float types (F32, F16, BF16) take float32 activations `x` instead of the quantized triple, and
rows of a multiple of 16 elements (engine.cpu.linear uses numpy for others).
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

XMAX = 32767.0  # activations are quantized to int16 in [-32767, 32767]


@jit
def quantize(x, xq, xd, xs, xf):
    """x float32 [n, k] -> xq int16 [n, k], xd float32 [n, k / 32] (x ~ xq * xd per 32), xs float32
    [n, k / 16] (sums of xq * xd per 16), xf float32 [n, k] (xq * xd: the activations every kernel
    and the prefill's float products use, so decode and prefill compute the same function)."""
    n, k = x.shape
    for r in range(n):
        for b in range(k // 32):
            amax = np.float32(0.0)
            for j in range(32):
                v = abs(x[r, b * 32 + j])
                if v > amax or v != v:
                    amax = v
            d = np.float32(amax / np.float32(XMAX))
            ok = d > 0 and d < np.inf
            xd[r, b] = d if ok else np.float32(0.0)
            for h in range(2):
                s = 0
                for j in range(16):
                    e = b * 32 + h * 16 + j
                    q = int(np.rint(x[r, e] / d)) if ok else 0
                    q = min(max(q, -32767), 32767)
                    xq[r, e] = q
                    s += q
                    xf[r, e] = np.float32(q) * xd[r, b]
                xs[r, 2 * b + h] = np.float32(s) * xd[r, b]


@pjit
def matvec_q4_0(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 18):
            a0, a1 = B.dot_q4_0(row, b * 18, xq, xd, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q4_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 18):
            B.deq_q4_0(row, b * 18, out[r - r0], b * 32)


@pjit
def matvec_q4_1(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 20):
            a0, a1 = B.dot_q4_1(row, b * 20, xq, xd, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q4_1(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 20):
            B.deq_q4_1(row, b * 20, out[r - r0], b * 32)


@pjit
def matvec_q5_0(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 22):
            a0, a1 = B.dot_q5_0(row, b * 22, xq, xd, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q5_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 22):
            B.deq_q5_0(row, b * 22, out[r - r0], b * 32)


@pjit
def matvec_q5_1(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 24):
            a0, a1 = B.dot_q5_1(row, b * 24, xq, xd, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q5_1(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 24):
            B.deq_q5_1(row, b * 24, out[r - r0], b * 32)


@pjit
def matvec_q8_0(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 34):
            a0, a1 = B.dot_q8_0(row, b * 34, xq, xd, xs, b, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q8_0(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 34):
            B.deq_q8_0(row, b * 34, out[r - r0], b * 32)


@pjit
def matvec_q2_k(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 84):
            a0, a1 = B.dot_q2_k(row, b * 84, xq, xd, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q2_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 84):
            B.deq_q2_k(row, b * 84, out[r - r0], b * 256)


@pjit
def matvec_q3_k(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 110):
            a0, a1 = B.dot_q3_k(row, b * 110, xq, xd, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q3_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 110):
            B.deq_q3_k(row, b * 110, out[r - r0], b * 256)


@pjit
def matvec_q4_k(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 144):
            a0, a1 = B.dot_q4_k(row, b * 144, xq, xd, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q4_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 144):
            B.deq_q4_k(row, b * 144, out[r - r0], b * 256)


@pjit
def matvec_q5_k(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 176):
            a0, a1 = B.dot_q5_k(row, b * 176, xq, xd, xs, b * 8, a0, a1)
            a0, a1 = a1, a0
        out[r] = (fsum(a0) + fsum(a1)) * scale


@jit
def dequant_q5_k(w, r0, r1, out):
    for r in range(r0, r1):
        row = w[r]
        for b in range(w.shape[1] // 176):
            B.deq_q5_k(row, b * 176, out[r - r0], b * 256)


@pjit
def matvec_q6_k(w, xq, xd, xs, out, scale):
    for r in prange(w.shape[0]):
        row, a0, a1 = w[r], fzero(), fzero()
        for b in range(w.shape[1] // 210):
            a0, a1 = B.dot_q6_k(row, b * 210, xq, xd, xs, b * 8, a0, a1)
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
