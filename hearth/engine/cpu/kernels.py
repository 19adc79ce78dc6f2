"""Row kernels: matrix-vector products (decode) and row dequantization (prefill tiles).

Each weight type has two top-level functions (numba caches only top-level functions), each a call
of a generated loop around engine.cpu.blocks:
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
from .simd import copy_bf16, copy_f16, copy_f32, fadd, fma_bf16, fma_f16, fma_f32, fsum, fzero

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


# One row's product and a run of rows' dequantization a type, from three generators (quantized
# blocks into two accumulators; float rows by halves; any type's rows block by block). Each is
# inlined into its type's top-level function below, which numba caches by name (a closure is not
# cached by itself: its cells, the compiled block functions, do not pickle the same in every process).

def _row(dot, size: int, xs_per_block: int):
    """A quantized row of `size`-byte blocks; x's sums advance xs_per_block entries a block."""
    @njit(inline="always", nogil=True)
    def row_product(row, x, xs):
        a0, a1 = fzero(), fzero()
        for b in range(row.shape[0] // size):
            a0, a1 = dot(row, b * size, x, xs, b * xs_per_block, a0, a1)
            a0, a1 = a1, a0
        return fsum(a0) + fsum(a1)
    return row_product


def _row_float(fma, size: int):
    """A float row, `size` bytes (16 values) a step: eight accumulators of 8 values, 64 values a
    step (each accumulator one chain of dependent FMAs: with two, the FMA latency held BF16 / F16 rows
    to ~17 G weights/s a thread, with eight ~32 on Zen 5), then the row's last 16-value steps into
    the first two; the accumulators are added in a fixed order, so a row's bits do not depend on
    which path (this or the compiled layers) runs it."""
    @njit(inline="always", nogil=True)
    def row_product(row, x):
        a0, a1, a2, a3 = fzero(), fzero(), fzero(), fzero()
        a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero()
        n = row.shape[0] // size
        h = size // 2
        for b in range(0, n - 3, 4):
            o = b * size
            a0 = fma(a0, row, o, x, b * 16)
            a1 = fma(a1, row, o + h, x, b * 16 + 8)
            a2 = fma(a2, row, o + 2 * h, x, b * 16 + 16)
            a3 = fma(a3, row, o + 3 * h, x, b * 16 + 24)
            a4 = fma(a4, row, o + 4 * h, x, b * 16 + 32)
            a5 = fma(a5, row, o + 5 * h, x, b * 16 + 40)
            a6 = fma(a6, row, o + 6 * h, x, b * 16 + 48)
            a7 = fma(a7, row, o + 7 * h, x, b * 16 + 56)
        for b in range(n - n % 4, n):
            a0 = fma(a0, row, b * size, x, b * 16)
            a1 = fma(a1, row, b * size + h, x, b * 16 + 8)
        return fsum(fadd(fadd(a0, a4), fadd(a2, a6))) + fsum(fadd(fadd(a1, a5), fadd(a3, a7)))
    return row_product


def _rows(deq, size: int, values: int):
    """Rows [r0, r1) of w into out, a `size`-byte block to `values` floats (in 8-float steps for the
    float types' copies) at a time."""
    @njit(inline="always", nogil=True)
    def rows(w, r0, r1, out):
        for r in range(r0, r1):
            row = w[r]
            for b in range(row.shape[0] // size):
                deq(row, b * size, out[r - r0], b * values)
    return rows


_q4_0, _deq_q4_0 = _row(B.dot_q4_0, 18, 1), _rows(B.deq_q4_0, 18, 32)
_q4_1, _deq_q4_1 = _row(B.dot_q4_1, 20, 1), _rows(B.deq_q4_1, 20, 32)
_q5_0, _deq_q5_0 = _row(B.dot_q5_0, 22, 1), _rows(B.deq_q5_0, 22, 32)
_q5_1, _deq_q5_1 = _row(B.dot_q5_1, 24, 1), _rows(B.deq_q5_1, 24, 32)
_q8_0, _deq_q8_0 = _row(B.dot_q8_0, 34, 1), _rows(B.deq_q8_0, 34, 32)
_q2_k, _deq_q2_k = _row(B.dot_q2_k, 84, 8), _rows(B.deq_q2_k, 84, 256)
_q3_k, _deq_q3_k = _row(B.dot_q3_k, 110, 8), _rows(B.deq_q3_k, 110, 256)
_q4_k, _deq_q4_k = _row(B.dot_q4_k, 144, 8), _rows(B.deq_q4_k, 144, 256)
_q5_k, _deq_q5_k = _row(B.dot_q5_k, 176, 8), _rows(B.deq_q5_k, 176, 256)
_q6_k, _deq_q6_k = _row(B.dot_q6_k, 210, 8), _rows(B.deq_q6_k, 210, 256)
_f32, _deq_f32 = _row_float(fma_f32, 64), _rows(copy_f32, 32, 8)
_f16, _deq_f16 = _row_float(fma_f16, 32), _rows(copy_f16, 16, 8)
_bf16, _deq_bf16 = _row_float(fma_bf16, 32), _rows(copy_bf16, 16, 8)
row_f32, row_f16, row_bf16 = _f32, _f16, _bf16   # also the compiled layers' (engine/cpu/decode_layer.py)


@pjit
def matvec_q4_0(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q4_0(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q4_0(w, r0, r1, out):
    _deq_q4_0(w, r0, r1, out)


@pjit
def matvec_q4_1(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q4_1(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q4_1(w, r0, r1, out):
    _deq_q4_1(w, r0, r1, out)


@pjit
def matvec_q5_0(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q5_0(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q5_0(w, r0, r1, out):
    _deq_q5_0(w, r0, r1, out)


@pjit
def matvec_q5_1(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q5_1(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q5_1(w, r0, r1, out):
    _deq_q5_1(w, r0, r1, out)


@pjit
def matvec_q8_0(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q8_0(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q8_0(w, r0, r1, out):
    _deq_q8_0(w, r0, r1, out)


@pjit
def matvec_q2_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q2_k(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q2_k(w, r0, r1, out):
    _deq_q2_k(w, r0, r1, out)


@pjit
def matvec_q3_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q3_k(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q3_k(w, r0, r1, out):
    _deq_q3_k(w, r0, r1, out)


@pjit
def matvec_q4_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q4_k(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q4_k(w, r0, r1, out):
    _deq_q4_k(w, r0, r1, out)


@pjit
def matvec_q5_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q5_k(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q5_k(w, r0, r1, out):
    _deq_q5_k(w, r0, r1, out)


@pjit
def matvec_q6_k(ws, x, xs, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _q6_k(ws[p][r], x, xs) * scales[p]


@jit
def dequant_q6_k(w, r0, r1, out):
    _deq_q6_k(w, r0, r1, out)


@pjit
def matvec_f32(ws, x, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _f32(ws[p][r], x) * scales[p]


@jit
def dequant_f32(w, r0, r1, out):
    _deq_f32(w, r0, r1, out)


@pjit
def matvec_f16(ws, x, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _f16(ws[p][r], x) * scales[p]


@jit
def dequant_f16(w, r0, r1, out):
    _deq_f16(w, r0, r1, out)


@pjit
def matvec_bf16(ws, x, out, scales):
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _bf16(ws[p][r], x) * scales[p]


@jit
def dequant_bf16(w, r0, r1, out):
    _deq_bf16(w, r0, r1, out)
