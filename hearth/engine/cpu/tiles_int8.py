"""Weight tiles in int8: rows of a K-quant matrix (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) decoded once into
the codes and integer scales that engine/cpu/gemm_int8.py multiplies by many rows of 8-bit x
(prefill and short inputs: x as Q8_K blocks of 256).

A tile is what every block of the rows [r0, r1) holds, with its bit packing undone, so that the
product loop is the same for every K-quant and the unpacking is paid once per tile rather than once
per row of x. Block t = (r - r0) * nb + b (nb blocks a row):
    codes uint8 [t * 256 : t * 256 + 256]   unsigned codes 0..63 in weight order
    scv int16 [t * 128 + 16 c + l]       chunk c's (32 weights) scales, one per int16 pair sum of
                                         pmaddubsw: lanes 0-7 the scale of weights 32c..32c+15,
                                         lanes 8-15 that of 32c+16..32c+31
    dd float32 [t]                       d
    mw float32 [t * 16 + g]              the offset of each 16 weights per unit of x: -dmin * min
                                         (Q2_K, Q4_K, Q5_K), -4 d * scale (Q3_K), -32 d * scale (Q6_K)
so that a block's product with x is d * dx * sum_c scv_c . (codes_c x_c) + sum_g mw_g * dx * bs_g
(bs: x's code sums per 16): the first part exact in int32, as in engine/cpu/blocks_int8.py (whose
layouts the decoders below read; the tests compare both with the numpy reference); the offsets, a
sixteenth of the work, in float32.
The 32-weight types have no int8 tiles: their per-32 float scales leave a float step per 32
products, and float32 tiles with BLAS measured faster (bench/README.md, int8 tiles).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .simd import bytes32, f16_at, field8, or_shl8, store32

jit = njit(nogil=True, cache=True)
inline = njit(inline="always", nogil=True, cache=True)


def tile_arrays(rows: int, n_in: int):
    """Empty (codes, scv, dd, mw) for a tile of `rows` rows of n_in weights."""
    nb = n_in // 256
    return (np.empty(rows * n_in, np.uint8), np.empty(rows * nb * 128, np.int16),
            np.empty(rows * nb, np.float32), np.empty(rows * nb * 16, np.float32))


@inline
def _scales(scv, t, c, s_lo, s_hi):
    """Chunk c of block t: lanes 0-7 scale s_lo, lanes 8-15 s_hi."""
    e = t * 128 + 16 * c
    for l in range(8):
        scv[e + l] = s_lo
        scv[e + 8 + l] = s_hi


@inline
def _k4_scale_min(row, s, j):
    """Q4_K/Q5_K's 6-bit scale and min of sub-block j from the 12 bytes at s (llama.cpp's
    get_scale_min_k4)."""
    if j < 4:
        return np.int32(row[s + j] & 63), np.int32(row[s + j + 4] & 63)
    sc = (row[s + j + 4] & 0x0F) | ((row[s + j - 4] >> 6) << 4)
    mn = (row[s + j + 4] >> 4) | ((row[s + j] >> 6) << 4)
    return np.int32(sc), np.int32(mn)


@inline
def _k4_block(row, o, t, scv, dd, mw):
    """Q4_K/Q5_K's scales, d and offsets -dmin * min of the block at o into tile block t."""
    dm = -f16_at(row, o + 2)
    for j in range(8):
        sc, mn = _k4_scale_min(row, o + 4, j)
        _scales(scv, t, j, sc, sc)
        mw[t * 16 + 2 * j] = dm * np.float32(mn)
        mw[t * 16 + 2 * j + 1] = dm * np.float32(mn)
    dd[t] = f16_at(row, o)


@jit
def tile_q4_k(w, r0, r1, codes, scv, dd, mw):
    nb = w.shape[1] // 144
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 144
            for j in range(4):
                v = bytes32(row, o + 16 + 32 * j)
                store32(codes, t * 256 + 64 * j, field8(v, 0, 15))
                store32(codes, t * 256 + 64 * j + 32, field8(v, 4, 15))
            _k4_block(row, o, t, scv, dd, mw)


@jit
def tile_q5_k(w, r0, r1, codes, scv, dd, mw):
    nb = w.shape[1] // 176
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 176
            qh = bytes32(row, o + 16)
            for j in range(4):
                v = bytes32(row, o + 48 + 32 * j)
                store32(codes, t * 256 + 64 * j, or_shl8(field8(v, 0, 15), field8(qh, 2 * j, 1), 4))
                store32(codes, t * 256 + 64 * j + 32, or_shl8(field8(v, 4, 15), field8(qh, 2 * j + 1, 1), 4))
            _k4_block(row, o, t, scv, dd, mw)


@jit
def tile_q6_k(w, r0, r1, codes, scv, dd, mw):
    nb = w.shape[1] // 210
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 210
            for h in range(2):
                qh = bytes32(row, o + 128 + 32 * h)
                for k in range(4):
                    v = bytes32(row, o + 64 * h + 32 * (k % 2))
                    q = or_shl8(field8(v, 4 * (k // 2), 15), field8(qh, 2 * k, 3), 4)
                    store32(codes, t * 256 + 128 * h + 32 * k, q)
            d = f16_at(row, o + 208)
            for c in range(8):
                _scales(scv, t, c, np.int8(row[o + 192 + 2 * c]), np.int8(row[o + 193 + 2 * c]))
            for g in range(16):
                mw[t * 16 + g] = np.float32(-32.0) * d * np.float32(np.int8(row[o + 192 + g]))
            dd[t] = d


@inline
def _q3_scale(row, s, g):
    """Q3_K's signed 6-bit scale g (minus 32) of the 12 bytes at s (llama.cpp's unpacking: low
    nibbles from bytes 0-7, high 2 bits from bytes 8-11)."""
    lo = (row[s + g % 8] >> (4 * (g // 8))) & 0x0F
    hi = (row[s + 8 + g % 4] >> (2 * (g // 4))) & 3
    return np.int32(lo | (hi << 4)) - 32


@jit
def tile_q3_k(w, r0, r1, codes, scv, dd, mw):
    nb = w.shape[1] // 110
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 110
            hm = bytes32(row, o)
            for h in range(2):
                v = bytes32(row, o + 32 + 32 * h)
                for k in range(4):
                    q = or_shl8(field8(v, 2 * k, 3), field8(hm, 4 * h + k, 1), 2)
                    store32(codes, t * 256 + 128 * h + 32 * k, q)
            # llama.cpp's 6-bit scales: low nibbles from bytes 0-7, high 2 bits from bytes 8-11
            d = f16_at(row, o + 108)
            for c in range(8):
                _scales(scv, t, c, _q3_scale(row, o + 96, 2 * c), _q3_scale(row, o + 96, 2 * c + 1))
            for g in range(16):
                mw[t * 16 + g] = np.float32(-4.0) * d * np.float32(_q3_scale(row, o + 96, g))
            dd[t] = d


@jit
def tile_q2_k(w, r0, r1, codes, scv, dd, mw):
    nb = w.shape[1] // 84
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 84
            for h in range(2):
                v = bytes32(row, o + 16 + 32 * h)
                for k in range(4):
                    store32(codes, t * 256 + 128 * h + 32 * k, field8(v, 2 * k, 3))
            dm = -f16_at(row, o + 82)
            for c in range(8):
                _scales(scv, t, c, np.int32(row[o + 2 * c] & 15), np.int32(row[o + 2 * c + 1] & 15))
            for g in range(16):
                mw[t * 16 + g] = dm * np.float32(row[o + g] >> 4)
            dd[t] = f16_at(row, o + 80)
