"""VNNI tiles of the i-quants and MXFP4: their rows decoded once (engine/cpu/kernels_iq.py's
decode_block: grid values times signs, or codebook values, as signed codes) into the layout of
engine/cpu/tiles_vnni.py, and multiplied by many rows of 8-bit x with engine/cpu/gemm_vnni.py's
products (prefill and short inputs on CPUs with VNNI).

Codes are stored as code + 128 (unsigned, as Q8_0's), decoded as the one-row kernels decode them
(kernels_iq: a 16-byte lookup for IQ4_NL / IQ4_XS / MXFP4, 64-bit grid words and sign masks for the
IQ2 / IQ3 types), so every family here has OFFSET 128:
    IQ2_XXS, IQ3_XXS, IQ3_S, IQ4_XS  chunks of 32 with integer scales ls (family k32o128)
    IQ2_XS, IQ2_S                    chunks of 16 (family k16o128)
    IQ4_NL, MXFP4                    32-weight blocks, one float scale (Q8_0's family o128)
and d the block's d' (kernels_iq: w = d' * ls * code). A row's product is then llama.cpp's:
    sum over blocks of (sum_c ls_c (sum_{j in c} code_j q_j)) * d' * dx
(the offset's 128 * sum q taken off each chunk's int32 sum exactly). The int32 sums stay below 2^31:
|code| <= 127, |ls| <= 32, |q| <= 127: 32 x 127 x 127 x 32 x 8 < 2^27 over a block.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import gemm_vnni as GV
from .kernels_iq import _E8M0, _KV4U, _KVFP4U, _codes8
from .simd import add8, f16_at, nibbles32, store32
from .simd_iq import lut16
from .simd_vnni import make_block_k
from .tiles_vnni import _interleave

jit = njit(nogil=True, cache=True)
inline = njit(inline="always", nogil=True, cache=True)


_FLIP = np.uint64(0x8080808080808080)   # + 128 on every byte of a word of int8 codes


@inline
def _block_codes(kind, row, o, scratch, s64, t, c64, ls, ls8, t32, sci, lr):
    """A block's codes + 128 into scratch[t:] (s64: its uint64 view; t a multiple of 8) and its
    integer chunk scales into t32 at sci + 16 c + lr -> d'."""
    if kind == 6 or kind == 7:   # IQ4_NL, MXFP4: one chunk, no integer scale
        tab = _KV4U if kind == 6 else _KVFP4U
        store32(scratch, t, add8(lut16(tab, nibbles32(row, o + (2 if kind == 6 else 1))), 128))
        return f16_at(row, o) if kind == 6 else _E8M0[row[o]]
    if kind == 5:                # IQ4_XS
        sh = np.int32(row[o + 2]) | (np.int32(row[o + 3]) << 8)
        for c in range(8):
            store32(scratch, t + 32 * c, add8(lut16(_KV4U, nibbles32(row, o + 8 + 16 * c)), 128))
            t32[sci + 16 * c + lr] = (np.int32((row[o + 4 + c // 2] >> (4 * (c % 2))) & 15)
                                      | (((sh >> (2 * c)) & 3) << 4)) - 32
        return f16_at(row, o)
    d = _codes8(kind, row, o, c64, ls, ls8)
    for i in range(32):
        s64[t // 8 + i] = c64[i] ^ _FLIP
    if kind == 1 or kind == 2:
        for c in range(16):
            t32[sci + 16 * c + lr] = ls8[c]
    else:
        for c in range(8):
            t32[sci + 16 * c + lr] = ls[c]
    return d


@inline
def _iq_tile(kind, bw, bb, cs, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes):
    """Rows [r0, r1) of w into groups of 16 (type `kind` of kernels_iq: bw weights and bb bytes a
    block, chunks of cs; sc0 unused for 32-weight blocks, whose one chunk has ls = 1)."""
    nb, nch = n_in // bw, bw // cs
    t32 = tile.view(np.int32)
    tf = tile.view(np.float32)
    s64 = scratch.view(np.uint64)
    c64 = np.empty(32, np.uint64)
    ls, ls8 = np.empty(8, np.int32), np.empty(16, np.int8)
    for g in range((r1 - r0 + 15) // 16):
        gb = g * gbytes
        for lr in range(16):
            r = r0 + 16 * g + lr
            if r >= r1:
                scratch[lr * n_in:(lr + 1) * n_in] = 0
                for b in range(nb):
                    tf[(gb + d0) // 4 + 16 * b + lr] = 0.0
                    if bw == 256:
                        for c in range(nch):
                            t32[(gb + sc0) // 4 + 16 * (nch * b + c) + lr] = 0
                continue
            row = w[r]
            for b in range(nb):
                sci = (gb + sc0) // 4 + 16 * nch * b
                d = _block_codes(kind, row, b * bb, scratch, s64, lr * n_in + b * bw, c64, ls, ls8, t32, sci, lr)
                tf[(gb + d0) // 4 + 16 * b + lr] = d
        _interleave(scratch, n_in, tile, gb)


# One top-level tile function a type, tiles_vnni's signature.

@jit
def tile_iq2_xxs(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(0, 256, 66, 32, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


@jit
def tile_iq2_xs(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(1, 256, 74, 16, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


@jit
def tile_iq2_s(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(2, 256, 82, 16, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


@jit
def tile_iq3_xxs(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(3, 256, 98, 32, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


@jit
def tile_iq3_s(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(4, 256, 110, 32, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


@jit
def tile_iq4_xs(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(5, 256, 136, 32, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


@jit
def tile_iq4_nl(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(6, 32, 18, 32, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


@jit
def tile_mxfp4(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    _iq_tile(7, 32, 17, 32, w, r0, r1, tile, scratch, n_in, sc0, d0, gbytes)


gemm_k32o128 = GV._gemm_k(make_block_k(GV.NX, GV.V, 32, 128, False), 512, 0, 0, 8)
gemm_k16o128 = GV._gemm_k(make_block_k(GV.NX, GV.V, 16, 128, False), 1024, 0, 0, 16)
FAMILY = {"IQ2_XXS": gemm_k32o128, "IQ3_XXS": gemm_k32o128, "IQ3_S": gemm_k32o128, "IQ4_XS": gemm_k32o128,
          "IQ2_XS": gemm_k16o128, "IQ2_S": gemm_k16o128, "IQ4_NL": GV.gemm_o128, "MXFP4": GV.gemm_o128}


# One job function a type (gemm_vnni's signature): sub-tiles decoded and multiplied, one call a job.

_iq2_xxs = GV._job(tile_iq2_xxs, gemm_k32o128)
_iq2_xs = GV._job(tile_iq2_xs, gemm_k16o128)
_iq2_s = GV._job(tile_iq2_s, gemm_k16o128)
_iq3_xxs = GV._job(tile_iq3_xxs, gemm_k32o128)
_iq3_s = GV._job(tile_iq3_s, gemm_k32o128)
_iq4_xs = GV._job(tile_iq4_xs, gemm_k32o128)
_iq4_nl = GV._job(tile_iq4_nl, GV.gemm_o128)
_mxfp4 = GV._job(tile_mxfp4, GV.gemm_o128)


@jit
def iq2_xxs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _iq2_xxs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def iq2_xs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _iq2_xs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def iq2_s(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _iq2_s(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def iq3_xxs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _iq3_xxs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def iq3_s(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _iq3_s(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def iq4_xs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _iq4_xs(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def iq4_nl(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _iq4_nl(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def mxfp4(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _mxfp4(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)
