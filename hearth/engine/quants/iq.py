"""Dequantization of the i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS) and
MXFP4, registered into engine.quants' table (imported by it).

As llama.cpp's `dequantize_row_*` (ggml-quants.c). Every product below is exact in float32 in any
grouping (an f16 scale's 11-bit mantissa times a sub-block scale of at most 6 bits times a grid or
codebook value of at most 7 bits: <= 24 bits; MXFP4's scale is a power of two), so the order of the
multiplications does not change a bit. Tables: engine/quants/tables.py.
"""

from __future__ import annotations

import numpy as np

from . import tables as T
from . import QK_K, _f16, _register

_SIGNS = T.sign_table()                                            # float32 [128, 8] of +-1
_SIGN_BITS = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1, np.float32(-1), np.float32(1))  # [256, 8]
_GRID2 = {k: g.astype(np.float32) for k, g in T.IQ2_GRIDS.items()}  # [N, 8]
_GRID3XXS = T.IQ3XXS_GRID.astype(np.float32)                       # [256, 4]
_GRID3S = T.IQ3S_GRID.astype(np.float32)                           # [512, 4]
_KV_IQ4 = T.KVALUES_IQ4NL.astype(np.float32)                       # [16]
_KV_FP4 = T.KVALUES_MXFP4.astype(np.float32)                       # [16]
_NIB = np.array([0, 4], np.uint8)


def _u32(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<u4")


def _u16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<u2")


def _nibble_codes(qs: np.ndarray) -> np.ndarray:
    """uint8 [..., 16] -> uint8 [..., 32]: the 16 low nibbles (weights 0..15), then the high ones."""
    return ((qs[..., None, :] >> _NIB[:, None]) & np.uint8(0x0F)).reshape(*qs.shape[:-1], 32)


# IQ2_XXS (66 bytes / 256 weights): d f16 | 8 sub-blocks of 32 weights, each two u32: a0's 4 bytes
# index iq2xxs_grid (8 weights each), a1 holds four 7-bit sign indices (ksigns, 8 weights each) in
# bits 0..27 and the sub-block scale in bits 28..31;  w = d * (0.5 + s) * 0.25 * grid * sign
@_register("IQ2_XXS")
def _dq_iq2_xxs(b):
    n = len(b)
    q = _u32(b[:, 2:66]).reshape(n, 8, 2)
    idx = np.ascontiguousarray(q[:, :, 0]).view(np.uint8).reshape(n, 8, 4)
    sgn = (q[:, :, 1:2] >> np.array([0, 7, 14, 21], np.uint32)) & np.uint32(127)     # [n, 8, 4]
    db = _f16(b[:, :2]).reshape(n, 1) * (np.float32(0.5) + (q[:, :, 1] >> np.uint32(28)).astype(np.float32))
    db *= np.float32(0.25)
    out = _GRID2["iq2xxs"][idx] * _SIGNS[sgn]                                          # [n, 8, 4, 8]
    out *= db.reshape(n, 8, 1, 1)
    return out.reshape(n, QK_K)


# IQ2_XS (74 bytes / 256 weights): d f16 | qs u16[32] | scales u8[8];  qs[i]: bits 0..8 index
# iq2xs_grid, bits 9..15 a sign index, for weights 8i..8i+7;  scales[k] low nibble scales weights
# 32k..32k+15, high nibble 32k+16..32k+31;  w = d * (0.5 + s) * 0.25 * grid * sign
@_register("IQ2_XS")
def _dq_iq2_xs(b):
    n = len(b)
    q = _u16(b[:, 2:66])                                                               # [n, 32]
    s = (b[:, 66:74, None] >> _NIB) & np.uint8(0x0F)                                   # [n, 8, 2]
    db = _f16(b[:, :2]).reshape(n, 1) * (np.float32(0.5) + s.reshape(n, 16).astype(np.float32))
    db *= np.float32(0.25)
    out = _GRID2["iq2xs"][q & np.uint16(511)] * _SIGNS[q >> np.uint16(9)]              # [n, 32, 8]
    out = out.reshape(n, 16, 16)
    out *= db.reshape(n, 16, 1)
    return out.reshape(n, QK_K)


# IQ2_S (82 bytes / 256 weights): d f16 | qs u8[32] | signs u8[32] | qh u8[8] | scales u8[8];
# weights 8i..8i+7: grid index qs[i] | ((qh[i / 4] >> 2 (i % 4)) & 3) << 8 into iq2s_grid, sign
# bit j of signs[i];  scales as IQ2_XS;  w = d * (0.5 + s) * 0.25 * grid * sign
@_register("IQ2_S")
def _dq_iq2_s(b):
    n = len(b)
    hi = (b[:, 66:74, None] >> np.array([0, 2, 4, 6], np.uint8)) & np.uint8(3)       # [n, 8, 4]
    idx = b[:, 2:34].astype(np.uint16) | (hi.reshape(n, 32).astype(np.uint16) << np.uint16(8))
    s = (b[:, 74:82, None] >> _NIB) & np.uint8(0x0F)
    db = _f16(b[:, :2]).reshape(n, 1) * (np.float32(0.5) + s.reshape(n, 16).astype(np.float32))
    db *= np.float32(0.25)
    out = _GRID2["iq2s"][idx] * _SIGN_BITS[b[:, 34:66]]                                # [n, 32, 8]
    out = out.reshape(n, 16, 16)
    out *= db.reshape(n, 16, 1)
    return out.reshape(n, QK_K)


# IQ3_XXS (98 bytes / 256 weights): d f16 | qs u8[64] | u32[8];  qs[i] indexes iq3xxs_grid for
# weights 4i..4i+3;  u32 k (sub-block of 32): four 7-bit sign indices (8 weights each) and the
# scale in bits 28..31;  w = d * (0.5 + s) * 0.5 * grid * sign
@_register("IQ3_XXS")
def _dq_iq3_xxs(b):
    n = len(b)
    a = _u32(b[:, 66:98])                                                              # [n, 8]
    sgn = (a[:, :, None] >> np.array([0, 7, 14, 21], np.uint32)) & np.uint32(127)     # [n, 8, 4]
    db = _f16(b[:, :2]).reshape(n, 1) * (np.float32(0.5) + (a >> np.uint32(28)).astype(np.float32))
    db *= np.float32(0.5)
    out = _GRID3XXS[b[:, 2:66]].reshape(n, 8, 4, 8) * _SIGNS[sgn]
    out *= db.reshape(n, 8, 1, 1)
    return out.reshape(n, QK_K)


# IQ3_S (110 bytes / 256 weights): d f16 | qs u8[64] | qh u8[8] | signs u8[32] | scales u8[4];
# weights 4i..4i+3: index qs[i] | (bit i % 8 of qh[i / 8]) << 8 into iq3s_grid;  sign of weight j
# is bit j % 8 of signs[j / 8];  scales[k] low nibble scales weights 64k..64k+31, high nibble the
# next 32;  w = d * (1 + 2 s) * grid * sign
@_register("IQ3_S")
def _dq_iq3_s(b):
    n = len(b)
    hi = np.unpackbits(b[:, 66:74], axis=1, bitorder="little").astype(np.uint16)      # [n, 64]
    idx = b[:, 2:66].astype(np.uint16) | (hi << np.uint16(8))
    s = ((b[:, 106:110, None] >> _NIB) & np.uint8(0x0F)).reshape(n, 8).astype(np.float32)
    db = _f16(b[:, :2]).reshape(n, 1) * (np.float32(1) + np.float32(2) * s)
    out = _GRID3S[idx].reshape(n, 32, 8) * _SIGN_BITS[b[:, 74:106]]
    out = out.reshape(n, 8, 32)
    out *= db.reshape(n, 8, 1)
    return out.reshape(n, QK_K)


# IQ4_NL (18 bytes / 32 weights): d f16 | qs u8[16];  weight j < 16 the low nibble of qs[j],
# j + 16 the high one, through kvalues_iq4nl;  w = d * kvalues[q]
@_register("IQ4_NL")
def _dq_iq4_nl(b):
    out = _KV_IQ4[_nibble_codes(b[:, 2:18])]
    out *= _f16(b[:, :2])
    return out


# IQ4_XS (136 bytes / 256 weights): d f16 | scales_h u16 | scales_l u8[4] | qs u8[128];  8
# sub-blocks of 32, each 16 bytes of qs as IQ4_NL;  sub-block k's 6-bit scale: nibble k % 2 of
# scales_l[k / 2] | bits 2k..2k+1 of scales_h << 4;  w = d * (scale - 32) * kvalues[q]
@_register("IQ4_XS")
def _dq_iq4_xs(b):
    n = len(b)
    sh = _u16(b[:, 2:4]) >> (2 * np.arange(8, dtype=np.uint16))                        # [n, 8]
    sl = ((b[:, 4:8, None] >> _NIB) & np.uint8(0x0F)).reshape(n, 8)
    ls = (sl.astype(np.int16) | ((sh & np.uint16(3)).astype(np.int16) << np.int16(4))) - np.int16(32)
    dl = _f16(b[:, :2]) * ls.astype(np.float32)                                        # [n, 8]
    out = _KV_IQ4[_nibble_codes(b[:, 8:136].reshape(n, 8, 16))]                       # [n, 8, 32]
    out *= dl.reshape(n, 8, 1)
    return out.reshape(n, QK_K)


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """MXFP4's scale byte -> float32 2^(e - 128) (half the e8m0 value, as the doubled codebook
    needs; llama.cpp's ggml_e8m0_to_fp32_half, subnormal for e < 2)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


# MXFP4 (17 bytes / 32 weights): e u8 (e8m0 scale) | qs u8[16];  nibbles as IQ4_NL through the
# doubled e2m1 values;  w = 2^(e - 128) * kvalues_mxfp4[q]
@_register("MXFP4")
def _dq_mxfp4(b):
    out = _KV_FP4[_nibble_codes(b[:, 1:17])]
    out *= e8m0_half(b[:, :1])
    return out
