"""Weight tiles in int8: rows of a GGML matrix decoded once into the codes and integer scales that
engine/cpu/gemm_int8.py multiplies by many rows of 8-bit x (prefill and short inputs).

A tile is what every block of the rows [r0, r1) holds, with its bit packing undone, so that the
product loop is the same for every type of a family and the unpacking is paid once per tile rather
than once per row of x. Block t = (r - r0) * nb + b (nb blocks a row):

The 32-weight types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), x as Q8_0/Q8_1 blocks of 32:
    codes uint8 [t * 32 : t * 32 + 32]   the weights' integer values: centred int8 for Q4_0
                                         (-8..7), Q5_0 (-16..15) and Q8_0, unsigned for Q4_1 and
                                         Q5_1 (0..15, 0..31), as blocks_int8 multiplies them
    dd float32 [2 t], [2 t + 1]          d, and m (Q4_1 / Q5_1's offset; 0 for the centred types)
The K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), x as Q8_K blocks of 256:
    codes uint8 [t * 256 : t * 256 + 256]   unsigned codes 0..63 in weight order
    scv int16 [t * 128 + 16 c + l]       chunk c's (32 weights) scales, one per int16 pair sum of
                                         pmaddubsw: lanes 0-7 the scale of weights 32c..32c+15,
                                         lanes 8-15 that of 32c+16..32c+31
    mins int16 [t * 16 + g]              what each 16 weights' code sum of x is multiplied by:
                                         Q2_K/Q4_K/Q5_K's mins, Q3_K/Q6_K's scales
    dd float32 [2 t], [2 t + 1]          d, and the offset factor: -dmin (Q2_K, Q4_K, Q5_K), -4 d
                                         (Q3_K), -32 d (Q6_K)
so that a block's product is d * dx * sum_c scv_c . (codes_c x_c) + dm * dx * sum_g mins_g bs_g
(bs: x's code sums per 16), the integer parts exact in int32, as in engine/cpu/blocks_int8.py
(whose layouts the decoders below read; the tests compare both with the numpy reference).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .blocks_int8 import _q5
from .simd import add8, bytes32, f16_at, field8, nibbles32, or_shl8, store32

jit = njit(nogil=True, cache=True)
inline = njit(inline="always", nogil=True, cache=True)

# Bytes per block of each type, and whether it is a K-quant (256 weights, x as Q8_K).
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34,
               "Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
K_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
CENTRED = {"Q4_0", "Q5_0", "Q8_0"}   # signed codes, multiplied with the sign trick (mul_ss)


def tile_arrays(gtype: str, rows: int, n_in: int):
    """Empty (codes, scv, mins, dd) for a tile of `rows` rows of n_in weights (scv and mins of the
    32-weight types are one-element placeholders)."""
    nb = n_in // (256 if gtype in K_TYPES else 32)
    codes = np.empty(rows * n_in, np.uint8)
    if gtype in K_TYPES:
        return codes, np.empty(rows * nb * 128, np.int16), np.empty(rows * nb * 16, np.int16), \
            np.empty(rows * nb * 2, np.float32)
    return codes, np.empty(1, np.int16), np.empty(1, np.int16), np.empty(rows * nb * 2, np.float32)


# --- the 32-weight types -------------------------------------------------------------------------

@jit
def tile_q4_0(w, r0, r1, codes, scv, mins, dd):
    nb = w.shape[1] // 18
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 18
            store32(codes, t * 32, add8(nibbles32(row, o + 2), -8))
            dd[2 * t], dd[2 * t + 1] = f16_at(row, o), 0.0


@jit
def tile_q4_1(w, r0, r1, codes, scv, mins, dd):
    nb = w.shape[1] // 20
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 20
            store32(codes, t * 32, nibbles32(row, o + 4))
            dd[2 * t], dd[2 * t + 1] = f16_at(row, o), f16_at(row, o + 2)


@jit
def tile_q5_0(w, r0, r1, codes, scv, mins, dd):
    nb = w.shape[1] // 22
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 22
            store32(codes, t * 32, add8(_q5(row, o + 2, o + 6), -16))
            dd[2 * t], dd[2 * t + 1] = f16_at(row, o), 0.0


@jit
def tile_q5_1(w, r0, r1, codes, scv, mins, dd):
    nb = w.shape[1] // 24
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 24
            store32(codes, t * 32, _q5(row, o + 4, o + 8))
            dd[2 * t], dd[2 * t + 1] = f16_at(row, o), f16_at(row, o + 2)


@jit
def tile_q8_0(w, r0, r1, codes, scv, mins, dd):
    nb = w.shape[1] // 34
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 34
            store32(codes, t * 32, bytes32(row, o + 2))
            dd[2 * t], dd[2 * t + 1] = f16_at(row, o), 0.0


# --- the K-quants --------------------------------------------------------------------------------

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
def _k4_block(row, o, t, scv, mins, dd):
    """Q4_K/Q5_K's scales, mins, d and -dmin of the block at o into tile block t."""
    for j in range(8):
        sc, mn = _k4_scale_min(row, o + 4, j)
        _scales(scv, t, j, sc, sc)
        mins[t * 16 + 2 * j] = mn
        mins[t * 16 + 2 * j + 1] = mn
    dd[2 * t], dd[2 * t + 1] = f16_at(row, o), -f16_at(row, o + 2)


@jit
def tile_q4_k(w, r0, r1, codes, scv, mins, dd):
    nb = w.shape[1] // 144
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 144
            for j in range(4):
                v = bytes32(row, o + 16 + 32 * j)
                store32(codes, t * 256 + 64 * j, field8(v, 0, 15))
                store32(codes, t * 256 + 64 * j + 32, field8(v, 4, 15))
            _k4_block(row, o, t, scv, mins, dd)


@jit
def tile_q5_k(w, r0, r1, codes, scv, mins, dd):
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
            _k4_block(row, o, t, scv, mins, dd)


@jit
def tile_q6_k(w, r0, r1, codes, scv, mins, dd):
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
            for g in range(16):
                mins[t * 16 + g] = np.int32(np.int8(row[o + 192 + g]))
            for c in range(8):
                _scales(scv, t, c, mins[t * 16 + 2 * c], mins[t * 16 + 2 * c + 1])
            d = f16_at(row, o + 208)
            dd[2 * t], dd[2 * t + 1] = d, np.float32(-32.0) * d


@jit
def tile_q3_k(w, r0, r1, codes, scv, mins, dd):
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
            s = o + 96
            for g in range(16):
                lo = (row[s + g % 8] >> (4 * (g // 8))) & 0x0F
                hi = (row[s + 8 + g % 4] >> (2 * (g // 4))) & 3
                mins[t * 16 + g] = np.int32(lo | (hi << 4)) - 32
            for c in range(8):
                _scales(scv, t, c, mins[t * 16 + 2 * c], mins[t * 16 + 2 * c + 1])
            d = f16_at(row, o + 108)
            dd[2 * t], dd[2 * t + 1] = d, np.float32(-4.0) * d


@jit
def tile_q2_k(w, r0, r1, codes, scv, mins, dd):
    nb = w.shape[1] // 84
    for r in range(r0, r1):
        row = w[r]
        for b in range(nb):
            t, o = (r - r0) * nb + b, b * 84
            for h in range(2):
                v = bytes32(row, o + 16 + 32 * h)
                for k in range(4):
                    store32(codes, t * 256 + 128 * h + 32 * k, field8(v, 2 * k, 3))
            for g in range(16):
                mins[t * 16 + g] = np.int32(row[o + g] >> 4)
            for c in range(8):
                _scales(scv, t, c, np.int32(row[o + 2 * c] & 15), np.int32(row[o + 2 * c + 1] & 15))
            dd[2 * t], dd[2 * t + 1] = f16_at(row, o + 80), -f16_at(row, o + 82)
