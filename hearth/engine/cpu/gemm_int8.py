"""Products of an int8 weight tile (engine/cpu/tiles_int8.py) with many rows of 8-bit x: prefill
and short inputs, as llama.cpp computes them (x quantized per block, integer products).

    gemm_k(codes, scv, mins, dd, rows, xq, xd, xs, out, col, scale)
        K-quant tiles, x as Q8_K: xq int8 [n, k], xd float32 [n, k / 256], xs int16 [n, k / 16]
        (the code sums per 16, which fit int16)
    gemm_32s / gemm_32u(codes, dd, rows, xq, xd, xs, out, col, scale)
        32-weight tiles, x as Q8_0/Q8_1: xq int8 [n, k], xd float32 [n, k / 32], xs float32
        [n, k / 32]; centred codes (sign trick: Q4_0, Q5_0, Q8_0) / unsigned codes and the offset
        m * s (Q4_1, Q5_1)
out[i, col + r] = row r of the tile . x row i, times scale, for every x row i and tile row r.
One call runs on the calling thread (the CPU backend spreads tiles or x rows over its threads).
Two rows of x at a time: each chunk of codes and scales is loaded once for both. A row's products
are summed in one fixed order, whatever the tile or thread split, and each x row alone gives the
same bits as in a pair (the same operations, in the same order, on its own accumulators).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .simd import bytes32, fadd, fma_i, fsum, fzero, k_block_sum, mul_ss, mul_us, mins_dot, pair_sum

jit = njit(nogil=True, cache=True)
inline = njit(inline="always", nogil=True, cache=True)


@jit
def gemm_k(codes, scv, mins, dd, rows, xq, xd, xs, out, col, scale):
    n, nb = xq.shape[0], xq.shape[1] // 256
    for i in range(0, n - 1, 2):
        q0, q1, d0, d1, s0, s1 = xq[i], xq[i + 1], xd[i], xd[i + 1], xs[i], xs[i + 1]
        for r in range(rows):
            a0, a1, b0, b1 = fzero(), fzero(), fzero(), fzero()
            for b in range(nb):
                t = r * nb + b
                p0 = k_block_sum(codes, t * 256, q0, b * 256, scv, t * 128)
                p1 = k_block_sum(codes, t * 256, q1, b * 256, scv, t * 128)
                d, dm = dd[2 * t], dd[2 * t + 1]
                a0 = fma_i(a0, p0, d * d0[b])
                b0 = fma_i(b0, p1, d * d1[b])
                a1 = fma_i(a1, mins_dot(s0, b * 16, mins, t * 16), dm * d0[b])
                b1 = fma_i(b1, mins_dot(s1, b * 16, mins, t * 16), dm * d1[b])
            out[i, col + r] = fsum(fadd(a0, a1)) * scale
            out[i + 1, col + r] = fsum(fadd(b0, b1)) * scale
    if n % 2:
        i = n - 1
        q0, d0, s0 = xq[i], xd[i], xs[i]
        for r in range(rows):
            a0, a1 = fzero(), fzero()
            for b in range(nb):
                t = r * nb + b
                d, dm = dd[2 * t], dd[2 * t + 1]
                a0 = fma_i(a0, k_block_sum(codes, t * 256, q0, b * 256, scv, t * 128), d * d0[b])
                a1 = fma_i(a1, mins_dot(s0, b * 16, mins, t * 16), dm * d0[b])
            out[i, col + r] = fsum(fadd(a0, a1)) * scale


@jit
def gemm_32s(codes, dd, rows, xq, xd, xs, out, col, scale):
    n, nb = xq.shape[0], xq.shape[1] // 32
    for i in range(0, n - 1, 2):
        q0, q1, d0, d1 = xq[i], xq[i + 1], xd[i], xd[i + 1]
        for r in range(rows):
            a0, a1, b0, b1 = fzero(), fzero(), fzero(), fzero()
            for b in range(nb):
                t = r * nb + b
                w, d = bytes32(codes, t * 32), dd[2 * t]
                a0 = fma_i(a0, pair_sum(mul_ss(w, q0, b * 32)), d * d0[b])
                b0 = fma_i(b0, pair_sum(mul_ss(w, q1, b * 32)), d * d1[b])
                a0, a1, b0, b1 = a1, a0, b1, b0
            out[i, col + r] = fsum(fadd(a0, a1)) * scale
            out[i + 1, col + r] = fsum(fadd(b0, b1)) * scale
    if n % 2:
        i = n - 1
        q0, d0 = xq[i], xd[i]
        for r in range(rows):
            a0, a1 = fzero(), fzero()
            for b in range(nb):
                t = r * nb + b
                a0 = fma_i(a0, pair_sum(mul_ss(bytes32(codes, t * 32), q0, b * 32)), dd[2 * t] * d0[b])
                a0, a1 = a1, a0
            out[i, col + r] = fsum(fadd(a0, a1)) * scale


@jit
def gemm_32u(codes, dd, rows, xq, xd, xs, out, col, scale):
    n, nb = xq.shape[0], xq.shape[1] // 32
    for i in range(0, n - 1, 2):
        q0, q1, d0, d1, s0, s1 = xq[i], xq[i + 1], xd[i], xd[i + 1], xs[i], xs[i + 1]
        for r in range(rows):
            a0, a1, b0, b1 = fzero(), fzero(), fzero(), fzero()
            t0 = t1 = np.float32(0.0)
            for b in range(nb):
                t = r * nb + b
                w, d, m = bytes32(codes, t * 32), dd[2 * t], dd[2 * t + 1]
                a0 = fma_i(a0, pair_sum(mul_us(w, q0, b * 32)), d * d0[b])
                b0 = fma_i(b0, pair_sum(mul_us(w, q1, b * 32)), d * d1[b])
                t0 += m * s0[b]
                t1 += m * s1[b]
                a0, a1, b0, b1 = a1, a0, b1, b0
            out[i, col + r] = (fsum(fadd(a0, a1)) + t0) * scale
            out[i + 1, col + r] = (fsum(fadd(b0, b1)) + t1) * scale
    if n % 2:
        i = n - 1
        q0, d0, s0 = xq[i], xd[i], xs[i]
        for r in range(rows):
            a0, a1 = fzero(), fzero()
            t0 = np.float32(0.0)
            for b in range(nb):
                t = r * nb + b
                a0 = fma_i(a0, pair_sum(mul_us(bytes32(codes, t * 32), q0, b * 32)), dd[2 * t] * d0[b])
                t0 += dd[2 * t + 1] * s0[b]
                a0, a1 = a1, a0
            out[i, col + r] = (fsum(fadd(a0, a1)) + t0) * scale
