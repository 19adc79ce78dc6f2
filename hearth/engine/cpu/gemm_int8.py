"""Products of a K-quant int8 weight tile (engine/cpu/tiles_int8.py) with many rows of 8-bit x:
prefill and short inputs, as llama.cpp computes them (x quantized to Q8_K blocks, integer products).

    gemm_k(codes, scv, dd, mw, rows, xq, xd, xsum, out, col, scale)
        xq int8 [n, k] x's codes, xd float32 [n, k / 256] their scales, xsum float32 [n, k / 16]
        their code sums per 16 times the scales (`x_sums`, for the tile's offsets mw);
        out[i, col + r] = (row r of the tile . x row i) * scale, every x row i and tile row r
One call runs on the calling thread (the CPU backend spreads tiles or x rows over its threads).
Two rows of x at a time: each block's codes and scales are loaded once for both. Each product is
summed in one fixed order, whatever the tile or thread split, and an x row alone gets the same bits
as in a pair (the same operations, in the same order, on its own accumulator).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .simd import fma_f16x, fma_i16, fsum16, fzero16, k_block_sum

jit = njit(nogil=True, cache=True)


@jit
def gemm_k(codes, scv, dd, mw, rows, xq, xd, xsum, out, col, scale):
    n, nb = xq.shape[0], xq.shape[1] // 256
    for i in range(0, n - 1, 2):
        q0, q1, d0, d1, s0, s1 = xq[i], xq[i + 1], xd[i], xd[i + 1], xsum[i], xsum[i + 1]
        for r in range(rows):
            a0, a1 = fzero16(), fzero16()
            for b in range(nb):
                t = r * nb + b
                d = dd[t]
                a0 = fma_f16x(fma_i16(a0, k_block_sum(codes, t * 256, q0, b * 256, scv, t * 128), d * d0[b]),
                              mw, t * 16, s0, b * 16)
                a1 = fma_f16x(fma_i16(a1, k_block_sum(codes, t * 256, q1, b * 256, scv, t * 128), d * d1[b]),
                              mw, t * 16, s1, b * 16)
            out[i, col + r] = fsum16(a0) * scale
            out[i + 1, col + r] = fsum16(a1) * scale
    if n % 2:
        i = n - 1
        q0, d0, s0 = xq[i], xd[i], xsum[i]
        for r in range(rows):
            a0 = fzero16()
            for b in range(nb):
                t = r * nb + b
                a0 = fma_f16x(fma_i16(a0, k_block_sum(codes, t * 256, q0, b * 256, scv, t * 128), dd[t] * d0[b]),
                              mw, t * 16, s0, b * 16)
            out[i, col + r] = fsum16(a0) * scale


def x_sums(xd: np.ndarray, bs: np.ndarray) -> np.ndarray:
    """x's code sums per 16 times their block scales: float32 [n, k / 16] from xd float32
    [n, k / 256] and bs int32 [n, k / 16] (the Q8_K blocks of engine/cpu/kernels_int8.py)."""
    n, nb = xd.shape
    return (bs.reshape(n, nb, 16) * xd[:, :, None]).reshape(n, nb * 16).astype(np.float32)
