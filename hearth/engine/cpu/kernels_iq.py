"""Row kernels of the i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS, IQ4_NL) and MXFP4:
matrix-vector products with float32 x and with 8-bit x, and row dequantization, as engine/cpu/
kernels.py / kernels_int8.py provide them for the other types (the same signatures, so that
engine/cpu/linear.py uses them alike).

Every block is first decoded into signed int8 codes (grid value times sign, or codebook value), one
integer scale per chunk of `CHUNK` weights and a float scale d' such that
    w_j = d' * ls_c * code_j                                          (j in chunk c)
    IQ2_XXS / IQ2_XS / IQ2_S: d' = d / 8, ls = 2 s + 1  (llama.cpp: d * (0.5 + s) * 0.25)
    IQ3_XXS: d' = d / 4, ls = 2 s + 1;  IQ3_S: d' = d, ls = 2 s + 1;  IQ4_XS: d' = d, ls = s - 32
    IQ4_NL: d' = d, ls = 1;  MXFP4: d' = 2^(e - 128), ls = 1
Every such product is exact in float32 (engine/quants_iq.py says why), so dequant_T gives the
reference's bits. With 8-bit x the sums are llama.cpp's (ggml_vec_dot_iq*_q8_K, *_q8_0): per chunk
the integer sum of code * x code, times ls, summed in int32 over the block, times d' * x's scale.
Codes: |code| <= 62 (IQ2/IQ3), 127 (IQ4), 12 (MXFP4): the int32 sums stay far below 2^31.
x's 8-bit blocks: Q8_0 for IQ4_NL and MXFP4, Q8_K for the rest (as llama.cpp's vec_dot_type).
The code decoding is scalar (table lookups); the products are plain loops LLVM vectorizes.
Tables: engine/quant_tables.py (numba freezes the global arrays into the compiled code).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .. import quant_tables as QT
from ..quants_iq import e8m0_half
from .kernels import _part, _total
from .simd import f16_at

jit = njit(nogil=True, cache=True)
pjit = njit(nogil=True, cache=True, parallel=True)
fpjit = njit(nogil=True, cache=True, parallel=True, fastmath=True)
inline = njit(inline="always", nogil=True, cache=True)

# Per type: (kind, weights a block, bytes a block, weights a chunk)
LAYOUT = {
    "IQ2_XXS": (0, 256, 66, 32), "IQ2_XS": (1, 256, 74, 16), "IQ2_S": (2, 256, 82, 16),
    "IQ3_XXS": (3, 256, 98, 32), "IQ3_S": (4, 256, 110, 32), "IQ4_XS": (5, 256, 136, 32),
    "IQ4_NL": (6, 32, 18, 32), "MXFP4": (7, 32, 17, 32),
}
TYPES = frozenset(LAYOUT)
Q8_K_TYPES = frozenset(t for t, v in LAYOUT.items() if v[1] == 256)   # x as Q8_K; the rest Q8_0

_SIGNED = np.where((QT.KSIGNS[:, None] >> np.arange(8, dtype=np.uint8)) & 1, -1, 1).astype(np.int8)  # [128, 8]
_BITSIGN = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1, -1, 1).astype(np.int8)         # [256, 8]
_G2XXS = QT.IQ2_GRIDS["iq2xxs"].astype(np.int8)
_G2XS = QT.IQ2_GRIDS["iq2xs"].astype(np.int8)
_G2S = QT.IQ2_GRIDS["iq2s"].astype(np.int8)
_G3XXS = QT.IQ3XXS_GRID.astype(np.int8)
_G3S = QT.IQ3S_GRID.astype(np.int8)
_KV4 = QT.KVALUES_IQ4NL.copy()
_KVFP4 = QT.KVALUES_MXFP4.copy()
_E8M0 = e8m0_half(np.arange(256, dtype=np.uint8))                  # float32 [256]


@inline
def _u32(w, o):
    return np.uint32(w[o]) | (np.uint32(w[o + 1]) << 8) | (np.uint32(w[o + 2]) << 16) | (np.uint32(w[o + 3]) << 24)


@inline
def _put8(codes, t, grid, gi, signs, si):
    for j in range(8):
        codes[t + j] = grid[gi, j] * signs[si, j]


@inline
def decode_block(kind, w, o, codes, ls):
    """The block at byte o of row w: codes int8 [block] (signed), ls int32 [block / chunk] -> d'."""
    if kind == 0:      # IQ2_XXS: d | 8 x (u32 grid bytes, u32 signs + scale)
        for ib in range(8):
            a1 = _u32(w, o + 6 + 8 * ib)
            ls[ib] = 2 * np.int32(a1 >> 28) + 1
            for k in range(4):
                _put8(codes, 32 * ib + 8 * k, _G2XXS, w[o + 2 + 8 * ib + k], _SIGNED, (a1 >> (7 * k)) & 127)
        return f16_at(w, o) * np.float32(0.125)
    if kind == 1:      # IQ2_XS: d | qs u16[32] | scales[8]
        for i in range(32):
            q = np.int64(w[o + 2 + 2 * i]) | (np.int64(w[o + 3 + 2 * i]) << 8)
            _put8(codes, 8 * i, _G2XS, q & 511, _SIGNED, q >> 9)
        for c in range(16):
            ls[c] = 2 * np.int32((w[o + 66 + c // 2] >> (4 * (c % 2))) & 15) + 1
        return f16_at(w, o) * np.float32(0.125)
    if kind == 2:      # IQ2_S: d | qs[32] | signs[32] | qh[8] | scales[8]
        for i in range(32):
            gi = np.int64(w[o + 2 + i]) | (np.int64((w[o + 66 + i // 4] >> (2 * (i % 4))) & 3) << 8)
            _put8(codes, 8 * i, _G2S, gi, _BITSIGN, w[o + 34 + i])
        for c in range(16):
            ls[c] = 2 * np.int32((w[o + 74 + c // 2] >> (4 * (c % 2))) & 15) + 1
        return f16_at(w, o) * np.float32(0.125)
    if kind == 3:      # IQ3_XXS: d | qs[64] | u32[8] signs + scale
        for ib in range(8):
            a = _u32(w, o + 66 + 4 * ib)
            ls[ib] = 2 * np.int32(a >> 28) + 1
            for k in range(4):
                si = (a >> (7 * k)) & 127
                g1, g2 = w[o + 2 + 8 * ib + 2 * k], w[o + 3 + 8 * ib + 2 * k]
                t = 32 * ib + 8 * k
                for j in range(4):
                    codes[t + j] = _G3XXS[g1, j] * _SIGNED[si, j]
                    codes[t + 4 + j] = _G3XXS[g2, j] * _SIGNED[si, 4 + j]
        return f16_at(w, o) * np.float32(0.25)
    if kind == 4:      # IQ3_S: d | qs[64] | qh[8] | signs[32] | scales[4]
        for i in range(64):
            gi = np.int64(w[o + 2 + i]) | (np.int64((w[o + 66 + i // 8] >> (i % 8)) & 1) << 8)
            sb = w[o + 74 + i // 2]
            h = 4 * (i % 2)
            for j in range(4):
                codes[4 * i + j] = _G3S[gi, j] * _BITSIGN[sb, h + j]
        for c in range(8):
            ls[c] = 2 * np.int32((w[o + 106 + c // 2] >> (4 * (c % 2))) & 15) + 1
        return f16_at(w, o)
    if kind == 5:      # IQ4_XS: d | scales_h u16 | scales_l[4] | qs[128]
        sh = np.int32(w[o + 2]) | (np.int32(w[o + 3]) << 8)
        for c in range(8):
            ls[c] = (np.int32((w[o + 4 + c // 2] >> (4 * (c % 2))) & 15) | (((sh >> (2 * c)) & 3) << 4)) - 32
            for j in range(16):
                b = w[o + 8 + 16 * c + j]
                codes[32 * c + j] = _KV4[b & 15]
                codes[32 * c + 16 + j] = _KV4[b >> 4]
        return f16_at(w, o)
    if kind == 6:      # IQ4_NL: d | qs[16]
        ls[0] = 1
        for j in range(16):
            b = w[o + 2 + j]
            codes[j] = _KV4[b & 15]
            codes[16 + j] = _KV4[b >> 4]
        return f16_at(w, o)
    ls[0] = 1          # MXFP4: e | qs[16]
    for j in range(16):
        b = w[o + 1 + j]
        codes[j] = _KVFP4[b & 15]
        codes[16 + j] = _KVFP4[b >> 4]
    return _E8M0[w[o]]


@inline
def _dequant(kind, bw, bb, cs, w, r0, r1, out):
    codes, ls = np.empty(bw, np.int8), np.empty(bw // cs, np.int32)
    for r in range(r0, r1):
        row, dst = w[r], out[r - r0]
        for b in range(row.shape[0] // bb):
            d = decode_block(kind, row, b * bb, codes, ls)
            for c in range(bw // cs):
                s = d * np.float32(ls[c])
                for j in range(cs):
                    dst[b * bw + c * cs + j] = s * np.float32(codes[c * cs + j])


@inline
def _matvec(kind, bw, bb, cs, ws, x, out, scales):
    """float32 x: per chunk the float32 sum of code * x, times ls, summed over the block, times d'."""
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row = ws[p][r]
        codes, ls = np.empty(bw, np.int8), np.empty(bw // cs, np.int32)
        acc = np.float32(0.0)
        for b in range(row.shape[0] // bb):
            d = decode_block(kind, row, b * bb, codes, ls)
            blk = np.float32(0.0)
            for c in range(bw // cs):
                t = np.float32(0.0)
                for j in range(cs):
                    t += np.float32(codes[c * cs + j]) * x[b * bw + c * cs + j]
                blk += t * np.float32(ls[c])
            acc += blk * d
        out[g] = acc * scales[p]


@inline
def _matvec8(kind, bw, bb, cs, ws, xq, xd, out, scales):
    """8-bit x (codes xq, one scale xd per block of bw): integer sums, as llama.cpp."""
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row = ws[p][r]
        codes, ls = np.empty(bw, np.int8), np.empty(bw // cs, np.int32)
        acc = np.float32(0.0)
        for b in range(row.shape[0] // bb):
            d = decode_block(kind, row, b * bb, codes, ls)
            isum = np.int32(0)
            for c in range(bw // cs):
                t = np.int32(0)
                for j in range(cs):
                    t += np.int32(codes[c * cs + j]) * np.int32(xq[b * bw + c * cs + j])
                isum += t * ls[c]
            acc += np.float32(isum) * (d * xd[b])
        out[g] = acc * scales[p]


# One top-level function a type and kernel (numba caches only those): the signatures of
# kernels.dequant_T(w, r0, r1, out), kernels.matvec_T(ws, x, xs, out, scales) and
# kernels_int8.matvec_T(ws, xq, xd, xs, out, scales).

@jit
def dequant_iq2_xxs(w, r0, r1, out):
    _dequant(0, 256, 66, 32, w, r0, r1, out)


@jit
def dequant_iq2_xs(w, r0, r1, out):
    _dequant(1, 256, 74, 16, w, r0, r1, out)


@jit
def dequant_iq2_s(w, r0, r1, out):
    _dequant(2, 256, 82, 16, w, r0, r1, out)


@jit
def dequant_iq3_xxs(w, r0, r1, out):
    _dequant(3, 256, 98, 32, w, r0, r1, out)


@jit
def dequant_iq3_s(w, r0, r1, out):
    _dequant(4, 256, 110, 32, w, r0, r1, out)


@jit
def dequant_iq4_xs(w, r0, r1, out):
    _dequant(5, 256, 136, 32, w, r0, r1, out)


@jit
def dequant_iq4_nl(w, r0, r1, out):
    _dequant(6, 32, 18, 32, w, r0, r1, out)


@jit
def dequant_mxfp4(w, r0, r1, out):
    _dequant(7, 32, 17, 32, w, r0, r1, out)


@fpjit
def matvec_iq2_xxs(ws, x, xs, out, scales):
    _matvec(0, 256, 66, 32, ws, x, out, scales)


@fpjit
def matvec_iq2_xs(ws, x, xs, out, scales):
    _matvec(1, 256, 74, 16, ws, x, out, scales)


@fpjit
def matvec_iq2_s(ws, x, xs, out, scales):
    _matvec(2, 256, 82, 16, ws, x, out, scales)


@fpjit
def matvec_iq3_xxs(ws, x, xs, out, scales):
    _matvec(3, 256, 98, 32, ws, x, out, scales)


@fpjit
def matvec_iq3_s(ws, x, xs, out, scales):
    _matvec(4, 256, 110, 32, ws, x, out, scales)


@fpjit
def matvec_iq4_xs(ws, x, xs, out, scales):
    _matvec(5, 256, 136, 32, ws, x, out, scales)


@fpjit
def matvec_iq4_nl(ws, x, xs, out, scales):
    _matvec(6, 32, 18, 32, ws, x, out, scales)


@fpjit
def matvec_mxfp4(ws, x, xs, out, scales):
    _matvec(7, 32, 17, 32, ws, x, out, scales)


@pjit
def matvec8_iq2_xxs(ws, xq, xd, xs, out, scales):
    _matvec8(0, 256, 66, 32, ws, xq, xd, out, scales)


@pjit
def matvec8_iq2_xs(ws, xq, xd, xs, out, scales):
    _matvec8(1, 256, 74, 16, ws, xq, xd, out, scales)


@pjit
def matvec8_iq2_s(ws, xq, xd, xs, out, scales):
    _matvec8(2, 256, 82, 16, ws, xq, xd, out, scales)


@pjit
def matvec8_iq3_xxs(ws, xq, xd, xs, out, scales):
    _matvec8(3, 256, 98, 32, ws, xq, xd, out, scales)


@pjit
def matvec8_iq3_s(ws, xq, xd, xs, out, scales):
    _matvec8(4, 256, 110, 32, ws, xq, xd, out, scales)


@pjit
def matvec8_iq4_xs(ws, xq, xd, xs, out, scales):
    _matvec8(5, 256, 136, 32, ws, xq, xd, out, scales)


@pjit
def matvec8_iq4_nl(ws, xq, xd, xs, out, scales):
    _matvec8(6, 32, 18, 32, ws, xq, xd, out, scales)


@pjit
def matvec8_mxfp4(ws, xq, xd, xs, out, scales):
    _matvec8(7, 32, 17, 32, ws, xq, xd, out, scales)
