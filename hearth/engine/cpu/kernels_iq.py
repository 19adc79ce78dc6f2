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
Every such product is exact in float32 (engine/quants/iq.py says why), so dequant_T gives the
reference's bits. With 8-bit x the sums are llama.cpp's (ggml_vec_dot_iq*_q8_K, *_q8_0): per chunk
the integer sum of code * x code, times ls, summed in int32 over the block, times d' * x's scale.
Codes: |code| <= 62 (IQ2/IQ3), 127 (IQ4), 12 (MXFP4): the int32 sums stay far below 2^31.
x's 8-bit blocks: Q8_0 for IQ4_NL and MXFP4, Q8_K for the rest (as llama.cpp's vec_dot_type).
With 8-bit x (the decode path) the codes are made in vectors where they can be: IQ4_NL / IQ4_XS /
MXFP4 by one 16-byte lookup for 32 weights (simd_iq.lut16: pshufb), the IQ2 / IQ3 grid entries and
sign masks as 64-bit words (8 weights a load), then multiplied as blocks_int8 multiplies (mul_ss:
pmaddubsw with the sign trick, pmaddwd with the chunk scales). Dequantization and float32 x (the
reference paths) decode block by block in scalar code (decode_block).
Tables: engine/quants/tables.py (numba freezes the global arrays into the compiled code).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..quants import tables as QT
from ..quants.iq import e8m0_half
from .kernels import _part, _total
from .simd import bytes32, f16_at, fadd, fma_i, fsum, fzero, izero, mul_ss, nibbles32, scale_sum, scale_sum2_i8
from .simd_iq import lut16

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
# The 8-bit-x products' tables: grid entries as little-endian words (byte j = weight j), sign masks
# as words of 0x00 / 0xFF bytes (byte j = 0xFF: weight j negative; llama.cpp's ksigns64), codebooks
# as uint8 for the byte lookup.
_G2XXS64 = QT.IQ2_GRIDS["iq2xxs"].view("<u8").ravel()
_G2XS64 = QT.IQ2_GRIDS["iq2xs"].view("<u8").ravel()
_G2S64 = QT.IQ2_GRIDS["iq2s"].view("<u8").ravel()
_G3XXS32 = QT.IQ3XXS_GRID.view("<u4").ravel().astype(np.uint64)
_G3S32 = QT.IQ3S_GRID.view("<u4").ravel().astype(np.uint64)
_KS64 = np.where(_SIGNED < 0, 255, 0).astype(np.uint8).view("<u8").ravel()
_BS64 = np.where(_BITSIGN < 0, 255, 0).astype(np.uint8).view("<u8").ravel()
_ONES = np.uint64(0x0101010101010101)
_KV4U = QT.KVALUES_IQ4NL.view(np.uint8).copy()
_KVFP4U = QT.KVALUES_MXFP4.view(np.uint8).copy()


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
def _signed8(g, m):
    """8 grid bytes g (each >= 1) negated where the mask m has 0xFF: (g ^ m) + 1 per negated byte,
    with no carry between bytes."""
    return (g ^ m) + (m & _ONES)


@inline
def _codes8(kind, w, o, c64, ls, ls8):
    """A 256-weight i-quant block's signed codes as bytes into c64 (uint64 [32]), its chunk scales
    into ls (int32, chunks of 32) or ls8 (int8, chunks of 16) -> d' (as decode_block)."""
    if kind == 0:      # IQ2_XXS
        for ib in range(8):
            a1 = _u32(w, o + 6 + 8 * ib)
            ls[ib] = 2 * np.int32(a1 >> 28) + 1
            for k in range(4):
                c64[4 * ib + k] = _signed8(_G2XXS64[w[o + 2 + 8 * ib + k]], _KS64[(a1 >> (7 * k)) & 127])
        return f16_at(w, o) * np.float32(0.125)
    if kind == 1:      # IQ2_XS
        for i in range(32):
            q = np.int64(w[o + 2 + 2 * i]) | (np.int64(w[o + 3 + 2 * i]) << 8)
            c64[i] = _signed8(_G2XS64[q & 511], _KS64[q >> 9])
        for c in range(16):
            ls8[c] = 2 * ((w[o + 66 + c // 2] >> (4 * (c % 2))) & 15) + 1
        return f16_at(w, o) * np.float32(0.125)
    if kind == 2:      # IQ2_S
        for i in range(32):
            gi = np.int64(w[o + 2 + i]) | (np.int64((w[o + 66 + i // 4] >> (2 * (i % 4))) & 3) << 8)
            c64[i] = _signed8(_G2S64[gi], _BS64[w[o + 34 + i]])
        for c in range(16):
            ls8[c] = 2 * ((w[o + 74 + c // 2] >> (4 * (c % 2))) & 15) + 1
        return f16_at(w, o) * np.float32(0.125)
    if kind == 3:      # IQ3_XXS
        for ib in range(8):
            a = _u32(w, o + 66 + 4 * ib)
            ls[ib] = 2 * np.int32(a >> 28) + 1
            for k in range(4):
                g = _G3XXS32[w[o + 2 + 8 * ib + 2 * k]] | (_G3XXS32[w[o + 3 + 8 * ib + 2 * k]] << np.uint64(32))
                c64[4 * ib + k] = _signed8(g, _KS64[(a >> (7 * k)) & 127])
        return f16_at(w, o) * np.float32(0.25)
    for i in range(32):  # IQ3_S
        g0, g1 = 2 * i, 2 * i + 1
        i0 = np.int64(w[o + 2 + g0]) | (np.int64((w[o + 66 + g0 // 8] >> (g0 % 8)) & 1) << 8)
        i1 = np.int64(w[o + 2 + g1]) | (np.int64((w[o + 66 + g1 // 8] >> (g1 % 8)) & 1) << 8)
        c64[i] = _signed8(_G3S32[i0] | (_G3S32[i1] << np.uint64(32)), _BS64[w[o + 74 + i]])
    for c in range(8):
        ls[c] = 2 * np.int32((w[o + 106 + c // 2] >> (4 * (c % 2))) & 15) + 1
    return f16_at(w, o)


@inline
def _block8(kind, w, o, xq, e, c64, codes, ls, ls8):
    """The block at byte o times x's codes xq[e:e + block]: (int32x8 sums, d')."""
    acc = izero()
    if kind == 6 or kind == 7:   # IQ4_NL, MXFP4: one codebook lookup for the 32 codes
        tab = _KV4U if kind == 6 else _KVFP4U
        acc = scale_sum(acc, mul_ss(lut16(tab, nibbles32(w, o + (2 if kind == 6 else 1))), xq, e), 1)
        return acc, (f16_at(w, o) if kind == 6 else _E8M0[w[o]])
    if kind == 5:                # IQ4_XS: 8 sub-blocks of 32, 6-bit scales
        sh = np.int32(w[o + 2]) | (np.int32(w[o + 3]) << 8)
        for c in range(8):
            lc = (np.int32((w[o + 4 + c // 2] >> (4 * (c % 2))) & 15) | (((sh >> (2 * c)) & 3) << 4)) - 32
            acc = scale_sum(acc, mul_ss(lut16(_KV4U, nibbles32(w, o + 8 + 16 * c)), xq, e + 32 * c), lc)
        return acc, f16_at(w, o)
    d = _codes8(kind, w, o, c64, ls, ls8)
    for c in range(8):
        p = mul_ss(bytes32(codes, 32 * c), xq, e + 32 * c)
        if kind == 1 or kind == 2:
            acc = scale_sum2_i8(acc, p, ls8, 2 * c)
        else:
            acc = scale_sum(acc, p, ls[c])
    return acc, d


@inline
def _matvec8(kind, bw, bb, cs, ws, xq, xd, out, scales):
    """8-bit x (codes xq, one scale xd per block of bw): integer sums, as llama.cpp."""
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        row = ws[p][r]
        c64 = np.empty(32, np.uint64)
        codes = c64.view(np.uint8)
        ls, ls8 = np.empty(8, np.int32), np.empty(16, np.int8)
        a0, a1 = fzero(), fzero()
        for b in range(row.shape[0] // bb):
            acc, d = _block8(kind, row, b * bb, xq, b * bw, c64, codes, ls, ls8)
            a0 = fma_i(a0, acc, d * xd[b])
            a0, a1 = a1, a0
        out[g] = fsum(fadd(a0, a1)) * scales[p]


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
