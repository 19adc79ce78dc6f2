"""Products of a VNNI tile (engine/cpu/tiles_vnni.py) with many rows of 8-bit x: prefill and short
inputs, llama.cpp's arithmetic (x quantized to Q8_K blocks for the K-quants, Q8_0/Q8_1 for the
others; integer products, float scales per block), at the speed of vpdpbusd.

    <type>(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)
        rows [r0, r1) of the GGUF matrix w times x into out[:, col:col + r1 - r0], in sub-tiles of
        SUB rows, each decoded (tiles_vnni.tile_<type>, into `tile` and `rows16`: this thread's
        scratch) and multiplied (gemm_<family>): one compiled call a job, however many sub-tiles.
    gemm_<family>(tile, groups, gbytes, code, sc, mo, d, e, xq, xd, xc, out, col, rows, scale)
        tile: `groups` groups of 16 rows, `gbytes` each, regions at the byte offsets code, sc, mo, d,
        e (tiles_vnni.regions); xq int8 [n, k] x's codes, xd float32 [n, blocks] their scales, xc
        int32 or float32 [n, ...] what the family needs of their sums (engine/cpu/linear.py:
        Activations.vnni_x); out[i, col + r] = (tile row r . x row i) * scale, for r < rows.
Families: k32m (Q4_K, Q5_K: chunks of 32, mins), k16m (Q2_K), k16o4 (Q3_K: offset 4), k16o32 (Q6_K),
o8 (Q4_0), o16 (Q5_0), o128 (Q8_0), m (Q4_1, Q5_1).

Register blocking: NX rows of x times V groups (32 weight rows) a step, their NX x V accumulators
in registers over the whole row of blocks; the last rows of x are done by the last NX rows again
(n >= NX: the tile path is used from MATVEC_MAX_ROWS + 1 rows on), which recomputes a row's
product with the same operations, so the same bits. Each (x row, weight row) is summed in one fixed
order, whatever the batch, the tile or the thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import tiles_vnni as TV
from .simd import store_scaled
from .simd_vnni import make_block_32, make_block_k, make_zeros

jit = njit(nogil=True, cache=True)

NX, V = 3, 2      # rows of x, groups of 16 weight rows (bench/README.md: VNNI tiles)
SUB = 64          # rows of a sub-tile: decoded, then used by every row of x while in L1/L2
_zeros = make_zeros(NX * V)

_k32m = make_block_k(NX, V, 32, 0, True)
_k16m = make_block_k(NX, V, 16, 0, True)
_k16o4 = make_block_k(NX, V, 16, 4, False)
_k16o32 = make_block_k(NX, V, 16, 32, False)
_o8 = make_block_32(NX, V, 8, False)
_o16 = make_block_32(NX, V, 16, False)
_o128 = make_block_32(NX, V, 128, False)
_m = make_block_32(NX, V, 0, True)


@njit(inline="always", nogil=True, cache=True)
def _store(acc, out, i0, g0, groups, col, rows, scale, tmp):
    """The NX x V accumulators into out (rows past `rows`, the padding of the last group, dropped;
    groups past `groups`, a pair's missing second group, too)."""
    for k in range(NX * V):
        i, g = i0 + k // V, g0 + k % V
        if g >= groups:
            continue
        r = 16 * g
        if r + 16 <= rows:
            store_scaled(out[i], col + r, acc[k], scale)
        else:
            store_scaled(tmp, 0, acc[k], scale)
            for j in range(rows - r):
                out[i, col + r + j] = tmp[j]


@njit(inline="always", nogil=True, cache=True)
def _rows_of_x(n):
    """The first row of each step of NX rows: the last step ends at n (it may overlap the one
    before it)."""
    starts = list(range(0, n - NX + 1, NX))
    if n % NX:
        starts.append(n - NX)
    return starts


# Each family: the same loops around its block (simd_vnni), a function of its own (a family serves two
# types). Not cached by itself: numba keys a closure's cache by its pickled cells, which for a
# compiled block are not stable across processes; the job functions below, which are, carry the
# family's code in their cached library.

def _gemm_k(block, sc_b: int, mo_b: int, e_b: int, xc_b: int):
    """A K-quant family's product over 256-weight blocks: the block's chunk scales, mins or offsets and
    x's sums advance by sc_b, mo_b, e_b bytes and xc_b entries a block (0: one region for all)."""
    @njit(nogil=True)
    def gemm(tile, groups, gbytes, code, sc, mo, d, e, xq, xd, xc, out, col, rows, scale):
        n, nb, xcs = xq.shape[0], xq.shape[1] // 256, xc.shape[1]
        tmp = np.empty(16, np.float32)
        for g0 in range(0, groups, V):
            for i0 in _rows_of_x(n):
                acc = _zeros()
                for b in range(nb):
                    acc = block(acc, tile, g0 * gbytes, gbytes, code + 4096 * b, sc + sc_b * b, mo + mo_b * b,
                                d + 64 * b, e + e_b * b, xq, i0 * nb * 256 + 256 * b, nb * 256, xd, i0 * nb + b,
                                nb, xc, i0 * xcs + xc_b * b, xcs)
                _store(acc, out, i0, g0, groups, col, rows, scale, tmp)
    return gemm


def _gemm_32(block):
    """A 32-weight family's product: one block of codes, scale and offset or sum a 32 weights."""
    @njit(nogil=True)
    def gemm(tile, groups, gbytes, code, sc, mo, d, e, xq, xd, xc, out, col, rows, scale):
        n, nb = xq.shape[0], xq.shape[1] // 32
        tmp = np.empty(16, np.float32)
        for g0 in range(0, groups, V):
            for i0 in _rows_of_x(n):
                acc = _zeros()
                for b in range(nb):
                    acc = block(acc, tile, g0 * gbytes, gbytes, code + 512 * b, d + 64 * b, e + 64 * b,
                                xq, i0 * nb * 32 + 32 * b, nb * 32, xd, i0 * nb + b, nb, xc, i0 * nb + b, nb)
                _store(acc, out, i0, g0, groups, col, rows, scale, tmp)
    return gemm


gemm_k32m = _gemm_k(_k32m, 512, 256, 64, 4)
gemm_k16m = _gemm_k(_k16m, 1024, 512, 64, 8)
gemm_k16o4 = _gemm_k(_k16o4, 1024, 0, 0, 16)
gemm_k16o32 = _gemm_k(_k16o32, 1024, 0, 0, 16)
gemm_o8 = _gemm_32(_o8)
gemm_o16 = _gemm_32(_o16)
gemm_o128 = _gemm_32(_o128)
gemm_m = _gemm_32(_m)


FAMILY = {"Q4_K": gemm_k32m, "Q5_K": gemm_k32m, "Q2_K": gemm_k16m, "Q3_K": gemm_k16o4, "Q6_K": gemm_k16o32,
          "Q4_0": gemm_o8, "Q5_0": gemm_o16, "Q8_0": gemm_o128, "Q4_1": gemm_m, "Q5_1": gemm_m}



# One job function a type: every sub-tile of rows [r0, r1) decoded by the type's tile function and
# multiplied by its family's product, one compiled call a job. Each type's is the top-level function
# below (numba caches those by name), its body the inlined `_job`.

def _job(tile_fn, gemm):
    @njit(inline="always", nogil=True)
    def job(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
        for s0 in range(r0, r1, SUB):
            s1 = min(r1, s0 + SUB)
            tile_fn(w, s0, s1, tile, rows16, n_in, sc, mo, d, e, gbytes)
            gemm(tile, (s1 - s0 + 15) // 16, gbytes, code, sc, mo, d, e, xq, xd, xc, out, col + s0 - r0,
                 s1 - s0, scale)
    return job


_q2_k = _job(TV.tile_q2_k, gemm_k16m)


@jit
def q2_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q2_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q3_k = _job(TV.tile_q3_k, gemm_k16o4)


@jit
def q3_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q3_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q4_k = _job(TV.tile_q4_k, gemm_k32m)


@jit
def q4_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q4_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q5_k = _job(TV.tile_q5_k, gemm_k32m)


@jit
def q5_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q5_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q6_k = _job(TV.tile_q6_k, gemm_k16o32)


@jit
def q6_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q6_k(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q4_0 = _job(TV.tile_q4_0, gemm_o8)


@jit
def q4_0(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q4_0(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q4_1 = _job(TV.tile_q4_1, gemm_m)


@jit
def q4_1(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q4_1(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q5_0 = _job(TV.tile_q5_0, gemm_o16)


@jit
def q5_0(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q5_0(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q5_1 = _job(TV.tile_q5_1, gemm_m)


@jit
def q5_1(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q5_1(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


_q8_0 = _job(TV.tile_q8_0, gemm_o128)


@jit
def q8_0(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    _q8_0(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)
