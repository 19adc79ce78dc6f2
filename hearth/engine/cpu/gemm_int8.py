"""Products of a K-quant int8 weight tile (engine/cpu/tiles_int8.py) with many rows of 8-bit x:
prefill and short inputs, as llama.cpp computes them (x quantized to Q8_K blocks, integer products).

    gemm_k(codes, scv, dd, rows, xq, xd, off, out, col, scale)
        xq int8 [n, k] x's codes, xd float32 [n, k / 256] their scales, off float32 [n, rows] the
        tile's offset terms (x's scaled code sums per 16 times the tile's mw, one float32 product:
        `offsets`); out[i, col + r] = (row r of the tile . x row i) * scale, every x row i and tile
        row r
One call runs on the calling thread (the CPU backend spreads tiles or x rows over its threads).
Two rows of x at a time: each block's codes and scales are loaded once for both. Each product is
summed in one fixed order, whatever the tile or thread split, and an x row alone gets the same bits
as in a pair (the same operations, in the same order, on its own accumulator).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .simd import fma_i16, fsum16, fzero16, k_block_sum

jit = njit(nogil=True, cache=True)


@jit
def gemm_k(codes, scv, dd, rows, xq, xd, off, out, col, scale):
    n, nb = xq.shape[0], xq.shape[1] // 256
    for i in range(0, n - 1, 2):
        q0, q1, d0, d1 = xq[i], xq[i + 1], xd[i], xd[i + 1]
        for r in range(rows):
            a0, a1 = fzero16(), fzero16()
            for b in range(nb):
                t = r * nb + b
                d = dd[t]
                a0 = fma_i16(a0, k_block_sum(codes, t * 256, q0, b * 256, scv, t * 128), d * d0[b])
                a1 = fma_i16(a1, k_block_sum(codes, t * 256, q1, b * 256, scv, t * 128), d * d1[b])
            out[i, col + r] = (fsum16(a0) + off[i, r]) * scale
            out[i + 1, col + r] = (fsum16(a1) + off[i + 1, r]) * scale
    if n % 2:
        i = n - 1
        q0, d0 = xq[i], xd[i]
        for r in range(rows):
            a0 = fzero16()
            for b in range(nb):
                t = r * nb + b
                a0 = fma_i16(a0, k_block_sum(codes, t * 256, q0, b * 256, scv, t * 128), dd[t] * d0[b])
            out[i, col + r] = (fsum16(a0) + off[i, r]) * scale


def x_sums(xd: np.ndarray, bs: np.ndarray) -> np.ndarray:
    """x's code sums per 16 times their block scales: float32 [n, k / 16] from xd float32
    [n, k / 256] and bs int32 [n, k / 16] (the Q8_K blocks of engine/cpu/kernels_int8.py)."""
    n, nb = xd.shape
    return (bs.reshape(n, nb, 16) * xd[:, :, None]).reshape(n, nb * 16).astype(np.float32)


def offsets(xsum: np.ndarray, mw: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The offset terms of a tile's rows for every row of x: xsum float32 [n, k / 16] (x_sums)
    times mw float32 [rows, k / 16] transposed, into out float32 [n, rows] (C-contiguous)."""
    return np.matmul(xsum, mw.T, out=out)
