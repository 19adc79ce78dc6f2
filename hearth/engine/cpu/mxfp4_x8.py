"""MXFP4 matrices repacked in groups of 8 rows, so that one vpdpbusd multiplies 8 rows by the same 4
codes of x (llama.cpp's block_mxfp4x8 idea, in our own byte order). The one owner of the layout:
the repack (numpy reference and the compiled one used at load), the float64 reference product and
the dequantization that the kernels (engine/cpu/kernels_mxfp4_x8.py) are tested against.

Why: the row kernel (engine/cpu/kernels_mxfp4.py) spends ~15 instructions on each 32-weight block of
one row (a lookup, a vpdpbusd, a float conversion and FMA per block and row) and is compute-bound on
Zen 4 (~16 GB/s of weights a thread). Here the lookups, the float steps and the x broadcasts are
shared by 8 rows: per 8 rows x 32 weights, 4 loads, 8 lookups, 8 vpdpbusd, one float FMA.

The file's MXFP4 matrix uint8 [n_out, nb * 17] (row r, block b: e u8, the E8M0 scale | qs u8[16]:
the low nibble of qs[i] is code i, the high nibble code i + 16) becomes uint8 [n_out / 8, nb * 136]:
group g holds rows 8g..8g+7; its block b, at byte 136 b:
    [0:8]      the 8 rows' scale bytes e (row r at byte r)
    [8:136]    4 chunks of 32 bytes; chunk c, byte 4 r + i (r = 0..7, i = 0..3):
                   low nibble = code 8c + i of row r, high nibble = code 8c + 4 + i of row r
So a chunk & 0xF holds in its int32 lane r the codes 8c..8c+3 of row r, and chunk >> 4 the codes
8c+4..8c+7: each times x's 4 codes broadcast to every lane. The bytes are the file's, moved: the
repacked matrix is as large as the mapped one. Rows n_out % 8 != 0 keep the row layout.
"""

from __future__ import annotations

import os

import numpy as np
from numba import njit, prange

from ..quants import tables as QT
from ..quants.iq import e8m0_half
from .simd import u32_at

BLOCK = 32          # weights a block
ROW_BLOCK = 17      # bytes of one row's block in the file
GROUP = 8           # rows a group
GROUP_BLOCK = 136   # bytes of a group's block: 8 scales + 128 bytes of nibbles


def applies(n_out: int, n_in: int) -> bool:
    """Whether a matrix of n_out rows of n_in weights can be repacked."""
    return n_out % GROUP == 0 and n_in % BLOCK == 0 and n_out > 0


def enabled() -> bool:
    """HEARTH_CPU_MXFP4_X8=0: gpt-oss's experts stay in the mapped file's row layout."""
    return os.environ.get("HEARTH_CPU_MXFP4_X8", "") != "0"


def repacked_shape(n_out: int, n_in: int) -> tuple[int, int]:
    return n_out // GROUP, n_in // BLOCK * GROUP_BLOCK


def repack_numpy(raw: np.ndarray) -> np.ndarray:
    """The reference repack: uint8 [n_out, nb * 17] -> uint8 [n_out / 8, nb * 136]."""
    n_out, nb = raw.shape[0], raw.shape[1] // ROW_BLOCK
    blocks = raw.reshape(n_out // GROUP, GROUP, nb, ROW_BLOCK)                 # [G, 8, nb, 17]
    e = blocks[..., 0].transpose(0, 2, 1)                                      # [G, nb, 8]
    qs = blocks[..., 1:]
    codes = np.concatenate([qs & 0xF, qs >> 4], axis=-1)                       # [G, 8, nb, 32]
    codes = codes.reshape(n_out // GROUP, GROUP, nb, 4, 2, 4)                  # [G, r, nb, c, lo/hi, i]
    packed = codes[..., 0, :] | (codes[..., 1, :] << 4)                        # [G, r, nb, c, i]
    packed = packed.transpose(0, 2, 3, 1, 4).reshape(n_out // GROUP, nb, 128)  # [G, nb, c r i]
    return np.concatenate([e, packed], axis=-1).reshape(n_out // GROUP, nb * GROUP_BLOCK)


@njit(nogil=True, cache=True, parallel=True)
def repack(raw, out):
    """repack_numpy's bytes into out uint8 [n_out / 8, nb * 136], the groups spread over threads.
    A row's block as 4 little-endian words w0..w3 (its qs bytes 0-3, 4-7, 8-11, 12-15): chunk 0 is
    the low nibbles of w0 with those of w1 above them, chunk 1 the same of w2, w3, chunks 2 and 3
    the high nibbles (codes 16..31)."""
    nb = raw.shape[1] // 17
    lo, hi = np.uint64(0x0F0F0F0F), np.uint64(0xF0F0F0F0)
    for g in prange(out.shape[0]):
        o = out[g]
        o32 = o.view(np.uint32)                      # 136 b + 8 + 32 c + 4 r = 4 (34 b + 2 + 8 c + r)
        for r in range(8):
            src = raw[8 * g + r]
            for b in range(nb):
                q = 17 * b + 1
                o[136 * b + r] = src[q - 1]
                w0, w1, w2, w3 = u32_at(src, q), u32_at(src, q + 4), u32_at(src, q + 8), u32_at(src, q + 12)
                at = 34 * b + 2 + r
                o32[at] = np.uint32((w0 & lo) | ((w1 & lo) << np.uint64(4)))
                o32[at + 8] = np.uint32((w2 & lo) | ((w3 & lo) << np.uint64(4)))
                o32[at + 16] = np.uint32(((w0 >> np.uint64(4)) & lo) | (w1 & hi))
                o32[at + 24] = np.uint32(((w2 >> np.uint64(4)) & lo) | (w3 & hi))


def codes_and_scales(x8: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A repacked matrix's codes int8 [n_out, n_in] (KVALUES_MXFP4: e2m1 doubled) and scales float32
    [n_out, nb] (e8m0 halved): w = code * scale."""
    G, nb = x8.shape[0], x8.shape[1] // GROUP_BLOCK
    blocks = x8.reshape(G, nb, GROUP_BLOCK)
    e = blocks[..., :8].transpose(0, 2, 1).reshape(G * GROUP, nb)
    nib = blocks[..., 8:].reshape(G, nb, 4, GROUP, 4)                          # [G, nb, c, r, i]
    idx = np.stack([nib & 0xF, nib >> 4], axis=3)                              # [G, nb, c, lo/hi, r, i]
    idx = idx.transpose(0, 4, 1, 2, 3, 5).reshape(G * GROUP, nb * BLOCK)       # [rows, (b, c, lo/hi, i)]
    return QT.KVALUES_MXFP4[idx], e8m0_half(e)


def dequant(x8: np.ndarray) -> np.ndarray:
    """float32 [n_out, n_in]: the weights (exact: a code times a power of two)."""
    codes, s = codes_and_scales(x8)
    n_out, nb = s.shape
    return (codes.reshape(n_out, nb, BLOCK) * s[:, :, None]).reshape(n_out, nb * BLOCK).astype(np.float32)


def reference_product(x8: np.ndarray, xq: np.ndarray, xd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The product with 8-bit x (Q8_0 codes xq int8 [n_in], scales xd float32 [n_in / 32]) in float64:
    (y [n_out], the sum of |each block's term| [n_out], for an error bound)."""
    codes, s = codes_and_scales(x8)
    n_out, nb = s.shape
    ints = (codes.reshape(n_out, nb, BLOCK).astype(np.int64) * xq.reshape(nb, BLOCK)).sum(-1)   # [n_out, nb]
    terms = ints * (s.astype(np.float64) * xd.astype(np.float64))
    return terms.sum(-1), np.abs(terms).sum(-1)


def repack_experts(raw: np.ndarray, drop=None) -> np.ndarray:
    """A 3-D expert tensor uint8 [E, n_out, nb * 17] (a view of the mapped file) -> a new anonymous
    array uint8 [E, n_out / 8, nb * 136]; then drop(raw), which may take the mapped pages out of this
    process's memory (GGUFFile.drop_pages): one tensor at a time has both copies resident."""
    E, n_out, rb = raw.shape
    # numpy asks for transparent huge pages on large arrays itself (Linux, numpy >= 1.21)
    out = np.empty((E, n_out // GROUP, rb // ROW_BLOCK * GROUP_BLOCK), np.uint8)
    repack(raw.reshape(E * n_out, rb), out.reshape(E * n_out // GROUP, -1))
    if drop is not None:
        drop(raw)
    return out
