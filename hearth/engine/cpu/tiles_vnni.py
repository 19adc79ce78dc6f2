"""VNNI tiles: rows of a quantized matrix decoded once into the layout engine/cpu/gemm_vnni.py
multiplies by many rows of 8-bit x (prefill and short inputs), for every quantized type.

Rows go in groups of 16 (a group past the matrix's last row is padded with zero rows). A group of
rows [r, r + 16) of n_in weights is `group_bytes(type, n_in)` bytes, in planar regions:
    code  uint8 [n_in / 4][16][4]   step k holds weights 4k..4k+3 of each of the 16 rows, as
                                    unsigned codes (the bytes vpdpbusd multiplies)
K-quants (nsb = n_in / 256 blocks; chunks of s weights share an integer scale: s = 32 for Q4_K and
Q5_K, 16 for Q2_K, Q3_K and Q6_K):
    sc    int32 [nsb][256 / s][16]      each chunk's integer scale
    mo    int32 [nsb][256 / s / 2][16]  the integer mins of chunks 2p, 2p + 1 as an int16 pair
                                        (Q2_K, Q4_K, Q5_K)
    d     float32 [nsb][16]             the block's scale d
    e     float32 [nsb][16]             the scale of its mins, -dmin (Q2_K, Q4_K, Q5_K)
32-weight types (nb = n_in / 32):
    d     float32 [nb][16]              the block's scale
    m     float32 [nb][16]              its offset m (Q4_1, Q5_1)
so that, with x's codes q and scale dx per block, a row's product is the sum over blocks of
    K-quants: (sum_c sc_c (code_c . q_c - OFFSET * sum q_c)) * d * dx + (sum_c mo_c sum q_c) * e * dx
    others:   (code . q - OFFSET * sum q) * d * dx + m * (dx * sum q, rounded as llama.cpp's Q8_1)
OFFSET is what makes a type's codes unsigned: Q3_K 4, Q6_K 32, Q4_0 8, Q5_0 16, Q8_0 128 (its int8
weights stored as q + 128), 0 for the types with mins. The codes are what engine/cpu/blocks_int8.py
reads; the tests compare the products with the numpy reference.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .simd import add8, bits_to_bytes, bytes32, f16_at, field8, nibbles32, or_shl8, store32, u32_at
from .simd_vnni import interleave16
from .tiles_int8 import _k4_scale_min, _q3_scale

jit = njit(nogil=True, cache=True)
inline = njit(inline="always", nogil=True, cache=True)

# Per type: (weights per block, bytes per block, chunk size s (K-quants) or 0, OFFSET, mins)
LAYOUT = {
    "Q4_0": (32, 18, 0, 8, False), "Q4_1": (32, 20, 0, 0, True), "Q5_0": (32, 22, 0, 16, False),
    "Q5_1": (32, 24, 0, 0, True), "Q8_0": (32, 34, 0, 128, False),
    "Q2_K": (256, 84, 16, 0, True), "Q3_K": (256, 110, 16, 4, False), "Q4_K": (256, 144, 32, 0, True),
    "Q5_K": (256, 176, 32, 0, True), "Q6_K": (256, 210, 16, 32, False),
    # the i-quants and MXFP4 (engine/cpu/tiles_vnni_iq.py): signed codes stored + 128
    "IQ2_XXS": (256, 66, 32, 128, False), "IQ2_XS": (256, 74, 16, 128, False), "IQ2_S": (256, 82, 16, 128, False),
    "IQ3_XXS": (256, 98, 32, 128, False), "IQ3_S": (256, 110, 32, 128, False), "IQ4_XS": (256, 136, 32, 128, False),
    "IQ4_NL": (32, 18, 0, 128, False), "MXFP4": (32, 17, 0, 128, False),
}
TYPES = frozenset(LAYOUT)


def regions(name: str, n_in: int) -> tuple[int, int, int, int, int, int]:
    """(code, sc, mo, d, e, total) byte offsets of a group's regions (K-quants), or (code, 0, 0, d,
    m, total) for the 32-weight types: every region starts on a 64-byte boundary."""
    bw, _, s, _, mins = LAYOUT[name]
    nb = n_in // bw
    code = 0
    if s:
        sc = code + 16 * n_in
        mo = sc + nb * (256 // s) * 64
        d = mo + (nb * (256 // s // 2) * 64 if mins else 0)
        e = d + nb * 64
        return code, sc, mo, d, e, e + (nb * 64 if mins else 0)
    d = code + 16 * n_in
    m = d + nb * 64
    return code, 0, 0, d, m, m + (nb * 64 if mins else 0)


def group_bytes(name: str, n_in: int) -> int:
    return regions(name, n_in)[5]


# --- each type's codes of one block into a row of 16 codes rows (row-major, weight order) ---------

@inline
def _codes_q4_k(row, o, dst, t):
    for j in range(4):
        v = bytes32(row, o + 16 + 32 * j)
        store32(dst, t + 64 * j, field8(v, 0, 15))
        store32(dst, t + 64 * j + 32, field8(v, 4, 15))


@inline
def _codes_q5_k(row, o, dst, t):
    qh = bytes32(row, o + 16)
    for j in range(4):
        v = bytes32(row, o + 48 + 32 * j)
        store32(dst, t + 64 * j, or_shl8(field8(v, 0, 15), field8(qh, 2 * j, 1), 4))
        store32(dst, t + 64 * j + 32, or_shl8(field8(v, 4, 15), field8(qh, 2 * j + 1, 1), 4))


@inline
def _codes_q6_k(row, o, dst, t):
    for h in range(2):
        qh = bytes32(row, o + 128 + 32 * h)
        for k in range(4):
            v = bytes32(row, o + 64 * h + 32 * (k % 2))
            store32(dst, t + 128 * h + 32 * k, or_shl8(field8(v, 4 * (k // 2), 15), field8(qh, 2 * k, 3), 4))


@inline
def _codes_q3_k(row, o, dst, t):
    hm = bytes32(row, o)
    for h in range(2):
        v = bytes32(row, o + 32 + 32 * h)
        for k in range(4):
            store32(dst, t + 128 * h + 32 * k, or_shl8(field8(v, 2 * k, 3), field8(hm, 4 * h + k, 1), 2))


@inline
def _codes_q2_k(row, o, dst, t):
    for h in range(2):
        v = bytes32(row, o + 16 + 32 * h)
        for k in range(4):
            store32(dst, t + 128 * h + 32 * k, field8(v, 2 * k, 3))


@inline
def _codes_32(kind, row, o, dst, t):
    """A 32-weight block's codes (kind: 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1, 4 Q8_0)."""
    if kind == 0:
        store32(dst, t, nibbles32(row, o + 2))
    elif kind == 1:
        store32(dst, t, nibbles32(row, o + 4))
    elif kind == 2:
        store32(dst, t, or_shl8(nibbles32(row, o + 6), bits_to_bytes(u32_at(row, o + 2), 0), 4))
    elif kind == 3:
        store32(dst, t, or_shl8(nibbles32(row, o + 8), bits_to_bytes(u32_at(row, o + 4), 0), 4))
    else:
        store32(dst, t, add8(bytes32(row, o + 2), 128))


@inline
def _interleave(scratch, n_in, tile, base):
    """The 16 code rows of scratch [16 * n_in] into the group's code region at `base`."""
    tail = n_in % 64
    c0 = n_in - tail
    for c in range(0, c0, 64):
        interleave16(scratch, c, n_in, tile, base + 16 * c)
    if tail:   # the last 32 weights (n_in = 64 k + 32): bytewise
        for r in range(16):
            for j in range(tail):
                k = c0 + j
                tile[base + 64 * (k // 4) + 4 * r + k % 4] = scratch[r * n_in + k]


# --- packers: rows [r0, r1) of w (uint8 [rows, bytes per row]) into tile (uint8, groups of 16) -----

@inline
def _k_group(kind, w, r0, r1, g, tile, gb, scratch, n_in, sc0, mo0, d0, e0):
    """Group g of a K-quant matrix (kind: 0 Q2_K, 1 Q3_K, 2 Q4_K, 3 Q5_K, 4 Q6_K)."""
    nb = n_in // 256
    t32 = tile.view(np.int32)
    t16 = tile.view(np.int16)
    tf = tile.view(np.float32)
    for lr in range(16):
        r = r0 + 16 * g + lr
        if r >= r1:
            scratch[lr * n_in:(lr + 1) * n_in] = 0
            for b in range(nb):
                tf[(gb + d0) // 4 + 16 * b + lr] = 0.0
            continue
        row = w[r]
        for b in range(nb):
            t = lr * n_in + 256 * b
            if kind == 0:
                o = 84 * b
                _codes_q2_k(row, o, scratch, t)
                for c in range(16):
                    t32[(gb + sc0) // 4 + 16 * (16 * b + c) + lr] = row[o + c] & 15
                for p in range(8):
                    i16 = (gb + mo0) // 2 + 32 * (8 * b + p) + 2 * lr
                    t16[i16] = row[o + 2 * p] >> 4
                    t16[i16 + 1] = row[o + 2 * p + 1] >> 4
                tf[(gb + d0) // 4 + 16 * b + lr] = f16_at(row, o + 80)
                tf[(gb + e0) // 4 + 16 * b + lr] = -f16_at(row, o + 82)
            elif kind == 1:
                o = 110 * b
                _codes_q3_k(row, o, scratch, t)
                for c in range(16):
                    t32[(gb + sc0) // 4 + 16 * (16 * b + c) + lr] = _q3_scale(row, o + 96, c)
                tf[(gb + d0) // 4 + 16 * b + lr] = f16_at(row, o + 108)
            elif kind == 4:
                o = 210 * b
                _codes_q6_k(row, o, scratch, t)
                for c in range(16):
                    t32[(gb + sc0) // 4 + 16 * (16 * b + c) + lr] = np.int8(row[o + 192 + c])
                tf[(gb + d0) // 4 + 16 * b + lr] = f16_at(row, o + 208)
            else:
                o = (144 if kind == 2 else 176) * b
                if kind == 2:
                    _codes_q4_k(row, o, scratch, t)
                else:
                    _codes_q5_k(row, o, scratch, t)
                for j in range(8):
                    sc, mn = _k4_scale_min(row, o + 4, j)
                    t32[(gb + sc0) // 4 + 16 * (8 * b + j) + lr] = sc
                    t16[(gb + mo0) // 2 + 32 * (4 * b + j // 2) + 2 * lr + j % 2] = mn
                tf[(gb + d0) // 4 + 16 * b + lr] = f16_at(row, o)
                tf[(gb + e0) // 4 + 16 * b + lr] = -f16_at(row, o + 2)
    _interleave(scratch, n_in, tile, gb)


@inline
def _k_tile(kind, w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    for g in range((r1 - r0 + 15) // 16):
        _k_group(kind, w, r0, r1, g, tile, g * gbytes, scratch, n_in, sc0, mo0, d0, e0)


@inline
def _q_tile(kind, bsize, w, r0, r1, tile, scratch, n_in, d0, m0, gbytes):
    """A 32-weight type's tile (kind as _codes_32; bsize bytes a block)."""
    nb = n_in // 32
    tf = tile.view(np.float32)
    for g in range((r1 - r0 + 15) // 16):
        gb = g * gbytes
        for lr in range(16):
            r = r0 + 16 * g + lr
            if r >= r1:
                scratch[lr * n_in:(lr + 1) * n_in] = 0
                for b in range(nb):
                    tf[(gb + d0) // 4 + 16 * b + lr] = 0.0
                    if kind == 1 or kind == 3:
                        tf[(gb + m0) // 4 + 16 * b + lr] = 0.0
                continue
            row = w[r]
            for b in range(nb):
                o = bsize * b
                _codes_32(kind, row, o, scratch, lr * n_in + 32 * b)
                tf[(gb + d0) // 4 + 16 * b + lr] = f16_at(row, o)
                if kind == 1 or kind == 3:
                    tf[(gb + m0) // 4 + 16 * b + lr] = f16_at(row, o + 2)
        _interleave(scratch, n_in, tile, gb)


# One top-level function a type (numba caches only those): tile(w, r0, r1, tile, scratch, n_in,
# regions...) with scratch uint8 [16 * n_in].

@jit
def tile_q2_k(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _k_tile(0, w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes)


@jit
def tile_q3_k(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _k_tile(1, w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes)


@jit
def tile_q4_k(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _k_tile(2, w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes)


@jit
def tile_q5_k(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _k_tile(3, w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes)


@jit
def tile_q6_k(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _k_tile(4, w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes)


@jit
def tile_q4_0(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _q_tile(0, 18, w, r0, r1, tile, scratch, n_in, d0, e0, gbytes)


@jit
def tile_q4_1(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _q_tile(1, 20, w, r0, r1, tile, scratch, n_in, d0, e0, gbytes)


@jit
def tile_q5_0(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _q_tile(2, 22, w, r0, r1, tile, scratch, n_in, d0, e0, gbytes)


@jit
def tile_q5_1(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _q_tile(3, 24, w, r0, r1, tile, scratch, n_in, d0, e0, gbytes)


@jit
def tile_q8_0(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _q_tile(4, 34, w, r0, r1, tile, scratch, n_in, d0, e0, gbytes)
