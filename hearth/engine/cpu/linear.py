"""The matrices a model multiplies by, used straight from the memory-mapped GGUF blocks.

`Linear(w, type, n_in)` wraps one GGUF matrix (uint8 [n_out, bytes per row], a view of the file:
nothing is copied or converted at load). `Activations(x)` quantizes the input rows once for every
matrix that reads them. A product `lin(act)` -> float32 [n, n_out] runs as:
- a few rows (decode): the matrix-vector kernel of the weight type per row, on all of numba's
  threads: for quantized weights with x quantized to 8 bits as llama.cpp does
  (engine.cpu.kernels_int8) where both the matrix (`Linear.int8`) and the input
  (`Activations(x, int8=True)`: the decoder's one-token passes) allow it, else with float32 x
  (engine.cpu.kernels);
- more rows (prefill, short inputs): the matrix in tiles of rows, each decoded once and multiplied by
  every row of x. With 8-bit x allowed (as above, and `Activations(x, int8=True)`: every pass of the
  decoder unless HEARTH_CPU_INT8_BATCH=0):
  - on CPUs with VNNI (AVX-512 VNNI or AVX-VNNI; `vnni_tiles`), every quantized type's tile is
    decoded into unsigned codes interleaved 16 rows by 4 bytes (engine/cpu/tiles_vnni.py) and
    multiplied by x's 8-bit blocks with vpdpbusd (engine/cpu/gemm_vnni.py): llama.cpp's arithmetic,
    2-5x faster than float32 tiles with BLAS (bench/README.md, VNNI tiles);
  - elsewhere, a K-quant matrix's tile of up to INT8_TILES_MAX_ROWS rows of x is decoded into int8
    codes and integer scales (engine/cpu/tiles_int8.py) and multiplied in integers
    (engine/cpu/gemm_int8.py).
  Otherwise (float x, longer inputs without VNNI, the float types) each tile is dequantized into a
  per-thread float32 scratch buffer and multiplied by BLAS (sgemm).
The float32 kernels and the tiles compute the float32 product of the file's weights and the
activations, as the numpy reference does, so they agree to float rounding; the 8-bit kernels compute
the product with x's 8-bit values (llama.cpp's arithmetic): each x moves by at most half a step,
max |x| / 254 of its block. HEARTH_CPU_INT8=0 turns 8-bit x off (float32 x everywhere).
The int8 tiles of a row give the same integers as its matrix-vector kernel, summed in float32 in
another order (float rounding apart).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from . import gemm_int8 as G8
from . import gemm_vnni as GV
from . import kernels as K
from . import kernels_int8 as K8
from . import kernels_iq as KQ
from . import kernels_mxfp4 as KM
from . import simd_vnni
from . import tiles_int8 as T8
from . import tiles_vnni as TV
from . import tiles_vnni_iq as TVQ

# Up to this many rows a product runs row by row through the matrix-vector kernel; from here on,
# dequantized tiles and BLAS.
MATVEC_MAX_ROWS = 4
# float32 elements of one dequantized tile (2 MiB): the tile stays in L2/L3 while BLAS packs it;
# but at least TILE_MIN_ROWS rows, or wide matrices (ffn_down's 8,192 inputs) come in tiles too short
# for BLAS to amortize packing x (measured, one thread, 256 rows of x: 61 GFLOP/s at 64 rows of
# 8,192, 73 at 256; no change at 2,048 inputs).
TILE_FLOATS = 1 << 19
TILE_MIN_ROWS = 256
# Up to this many rows a tile's product is computed as W x^T into a scratch and copied out
# transposed: OpenBLAS (0.3.31, one thread) runs that 1.3-1.6x faster than x W^T at 5-64 rows and
# 1.1x at 128, even at 192 to 256, with the same bits (bench/README.md, short inputs' tiles).
SWAP_MAX_ROWS = 128
# Without VNNI, up to this many rows a K-quant matrix multiplies 8-bit x in int8 tiles; from here on,
# float32 tiles and BLAS. On AVX-512 both run at about 32 products a cycle (pmaddubsw and pmaddwd, or
# FMA), so int8 gains only what float32 tiles lose to dequantizing and packing, which short inputs
# feel and prefill chunks do not (bench.cpu_tiles, one thread, quiet: 1.00-1.52x at 8-32 rows,
# 0.97-1.01x at 64, 0.75-0.98x at 256). HEARTH_CPU_INT8_TILE_ROWS=<n> sets it.
INT8_TILES_MAX_ROWS = int(os.environ.get("HEARTH_CPU_INT8_TILE_ROWS", "") or 32)
# Rows of an int8 tile: its codes and scales (2 bytes a weight) stay in L2 while every row of x
# passes over them, and a short input's matrix still makes dozens of tiles to spread over threads.
TILE8_ROWS = 32
# A short input's VNNI products are cut into about this many jobs a matrix for the threads to share
# (each job one compiled call over its sub-tiles, engine/cpu/gemm_vnni.py); a prefill chunk's row
# range multiplies each matrix in one call.
VNNI_JOBS = 4

# numba's workqueue pool takes one parallel launch at a time: serialize them across engines.
_LAUNCH = threading.Lock()
_local = threading.local()

_QUANT = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"} | KQ.TYPES
_FLOAT = {"F32", "F16", "BF16"}
_OFFSETS = {"Q4_1", "Q5_1", "Q2_K", "Q4_K", "Q5_K"}   # w = d * q + m: their products need sums of x
_Q8_K = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"} | KQ.Q8_K_TYPES   # x as Q8_K (blocks of 256); the rest Q8_0 / Q8_1
_NO_SUMS = np.zeros((1, 1), np.float32)
KERNEL_TYPES = _QUANT | _FLOAT


def int8_default() -> bool:
    """Whether quantized matrices multiply one-row inputs with 8-bit x, as llama.cpp does: on unless
    HEARTH_CPU_INT8=0 (bench/README.md, 8-bit activations in decode)."""
    return os.environ.get("HEARTH_CPU_INT8", "") != "0"


def int8_batches_default() -> bool:
    """Whether inputs of several rows (prefill, short inputs) multiply quantized matrices in int8
    tiles, where 8-bit x is on at all: unless HEARTH_CPU_INT8_BATCH=0 (float32 tiles and BLAS)."""
    return int8_default() and os.environ.get("HEARTH_CPU_INT8_BATCH", "") != "0"


def vnni_tiles() -> bool:
    """Whether batches with 8-bit x multiply quantized matrices in VNNI tiles (engine/cpu/gemm_vnni.py):
    where the CPU has AVX-512 VNNI or AVX-VNNI. HEARTH_CPU_VNNI=0 turns them off (then the K-quants'
    int8 tiles for short inputs and float32 tiles with BLAS, as on CPUs without VNNI); =1 turns them on
    everywhere, in generic vector IR where the CPU has no VNNI (the same bits, slowly: for tests)."""
    flag = os.environ.get("HEARTH_CPU_VNNI", "")
    return flag == "1" or (flag != "0" and simd_vnni.lanes() != 0)


def no_parallel_kernels() -> None:
    """Mark this thread as one of several that run rows at once (the CPU backend's row pool): its
    products never launch numba's parallel kernels, which take one caller at a time."""
    _local.serial = True


def parallel_kernels() -> bool:
    """Whether this thread may launch numba's parallel kernels (not a row thread: no_parallel_kernels)."""
    return not getattr(_local, "serial", False)


def set_threads(n: int) -> None:
    """Use n threads for the parallel kernels this thread launches."""
    import numba  # noqa: PLC0415
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))


def _tile8_scratch(rows: int, n_in: int):
    """This thread's int8 tile arrays (tiles_int8.tile_arrays) for `rows` rows of n_in weights."""
    bufs = getattr(_local, "tiles8", None)
    if bufs is None:
        bufs = _local.tiles8 = {}
    got = bufs.get((rows, n_in))
    if got is None:
        got = bufs[(rows, n_in)] = T8.tile_arrays(rows, n_in)
    return got


def _vnni_scratch(tile_bytes: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's VNNI tile (uint8, at least tile_bytes) and code rows (uint8 [16 * n_in])."""
    got = getattr(_local, "vnni", None)
    if got is None or got[0].size < tile_bytes or got[1].size < 16 * n_in:
        tile = np.empty(max(tile_bytes, got[0].size if got else 0), np.uint8)
        rows = np.empty(max(16 * n_in, got[1].size if got else 0), np.uint8)
        got = _local.vnni = (tile, rows)
    return got[0][:tile_bytes], got[1][:16 * n_in]


def _scratch(n: int, slot: int = 0) -> np.ndarray:
    """This thread's float32 scratch `slot` (0: the dequantized tile, 1: a transposed product) of at
    least n elements (kept: fresh pages are slow)."""
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = [None, None]
    if bufs[slot] is None or bufs[slot].size < n:
        bufs[slot] = np.empty(n, np.float32)
    return bufs[slot][:n]


class Activations:
    """Input rows x float32 [n, k], and what the matrices that read x ask of it, made once: its
    sums per 16 (xs float32 [n, k / 16]) and its 8-bit quantizations (`q8`)."""

    def __init__(self, x: np.ndarray, int8: bool = False):
        self.x = np.ascontiguousarray(x, dtype=np.float32)
        self.int8 = int8    # whether matrices that quantize x to 8 bits (Linear.int8) may do so here
        self._xs = None
        self._q8 = {}
        self._x_sums = None
        self._vnni = {}

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def xs(self) -> np.ndarray:
        if self._xs is None:
            self._xs = np.empty((self.x.shape[0], self.x.shape[1] // 16), np.float32)
            K.block_sums(self.x, self._xs)
        return self._xs

    def q8(self, k_blocks: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x in llama.cpp's 8-bit blocks (engine/cpu/quant_activations.py): Q8_K (k_blocks) ->
        codes int8 [n, k], scales float32 [n, k / 256], code sums int32 [n, k / 16]; else Q8_0/Q8_1
        -> codes int8 [n, k], scales float32 [n, k / 32], block sums float32 [n, k / 32].
        One row (a decode token) is quantized into this thread's buffers for its size, reused by the
        next one-row Activations: ~1.2 us a call against ~3.4 us for fresh arrays (121 a token on
        SmolLM2). Each buffer remembers which Activations filled it, so an older one that is used
        again quantizes its x again instead of reading another x's codes."""
        if self.x.shape[0] == 1:
            return self._one_row(k_blocks)[1:4]
        got = self._q8.get(k_blocks)
        if got is None:
            got = self._q8[k_blocks] = (K8.q8_k_rows if k_blocks else K8.q8_0_rows)(self.x)
        return got

    def x_sums(self) -> np.ndarray:
        """The Q8_K code sums per 16 of q8(True) times their block scales, float32 [n, k / 16]: what
        the int8 tiles' offset terms multiply (engine/cpu/gemm_int8.py)."""
        if self._x_sums is None:
            _, d, bs = self.q8(True)
            self._x_sums = G8.x_sums(d, bs)
        return self._x_sums

    def vnni_x(self, gtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x as the VNNI tiles of type `gtype` read it (engine/cpu/gemm_vnni.py): codes int8 [n, k],
        scales float32 [n, blocks], and what the type's offsets need of the code sums: K-quants with
        mins, int16 pairs (as int32) of the sums per chunk (32 weights for Q4_K/Q5_K, 16 for Q2_K);
        Q3_K/Q6_K the int32 sums per 16; Q4_1/Q5_1 llama.cpp's Q8_1 block sums (float32); the other
        32-weight types the int32 code sums per 32."""
        _, _, s, _, mins = TV.LAYOUT[gtype]
        key = (s, mins)
        got = self._vnni.get(key)
        if got is None:
            if s:
                q, d, bs = self.q8(True)
                if not mins:   # int32 code sums per chunk: 16 (Q3_K, Q6_K, IQ2_XS/S) or 32 (the other i-quants)
                    xc = bs if s == 16 else np.ascontiguousarray(bs[:, 0::2] + bs[:, 1::2])
                elif s == 32:
                    xc = np.ascontiguousarray((bs[:, 0::2] + bs[:, 1::2]).astype(np.int16)).view(np.int32)
                else:
                    xc = bs.astype(np.int16).view(np.int32)
            else:
                q, d, sums = self.q8(False)
                xc = sums if mins else q.reshape(q.shape[0], -1, 32).sum(-1, dtype=np.int32)
            got = self._vnni[key] = (q, d, xc)
        return got

    def q8_row(self, k_blocks: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A one-row x's q8(k_blocks) as the row's own 1-D arrays (codes [k], scales, sums)."""
        return self._one_row(k_blocks)[4:7]

    def _one_row(self, k_blocks: bool) -> list:
        """This thread's buffer entry for one row of this size, filled with this x: [the Activations
        that filled it, codes [1, k], scales [1, ...], sums [1, ...], and the same as 1-D views]."""
        key = (k_blocks, self.x.shape[1])
        bufs = getattr(_local, "q8", None)
        if bufs is None:
            bufs = _local.q8 = {}
        got = bufs.get(key)
        if got is None:
            arrays = _q8_arrays(k_blocks, 1, self.x.shape[1])
            got = bufs[key] = [None, *arrays, *(a[0] for a in arrays)]
        if got[0] is not self:
            got[0] = self
            (K8.quantize_q8_k if k_blocks else K8.quantize_q8_0)(self.x[0], got[4], got[5], got[6])
        return got


def _q8_arrays(k_blocks: bool, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Empty (codes int8 [n, k], scales float32 [n, k / block], sums [n, ...]) of Q8_K or Q8_0/Q8_1."""
    if k_blocks:
        return np.empty((n, k), np.int8), np.empty((n, k // 256), np.float32), np.empty((n, k // 16), np.int32)
    return np.empty((n, k), np.int8), np.empty((n, k // 32), np.float32), np.empty((n, k // 32), np.float32)


class Linear:
    """GGUF matrices of one type reading the same n_in inputs, their outputs stacked:
    y = x @ concat(W_p * scales[p]).T for x [n, n_in]. One matrix, or q/k/v, or gate/up."""

    def __init__(self, ws, gtype, n_in: int, name: str = "matrix", tile_floats: int | None = None,
                 int8: bool | None = None):
        ws = (ws,) if isinstance(ws, np.ndarray) else tuple(ws)
        if gtype.name not in KERNEL_TYPES or n_in % 32:
            raise ValueError(f"{name}: no CPU kernel for {gtype.name} rows of {n_in}")
        self.ws = ws                                # each uint8 [rows_p, bytes per row]
        self.type, self.n_in, self.name = gtype, n_in, name
        self.rows = [w.shape[0] for w in ws]
        self.n_out = sum(self.rows)
        self.quantized = gtype.name in _QUANT
        self.sums = gtype.name in _OFFSETS
        self.scales = np.ones(len(ws), np.float32)  # output scale of each matrix
        key = gtype.name.lower()
        iq = gtype.name in KQ.TYPES   # the i-quants' and MXFP4's kernels: engine/cpu/kernels_iq.py
        self._matvec = getattr(KQ if iq else K, f"matvec_{key}")
        self._dequant = getattr(KQ if iq else K, f"dequant_{key}")
        rows = max(TILE_MIN_ROWS, TILE_FLOATS // n_in) if tile_floats is None else tile_floats // n_in
        self._tile = max(1, min(max(self.rows), rows))
        self._matvec8 = getattr(KQ, f"matvec8_{key}") if iq else getattr(K8, f"matvec_{key}", None)
        if key == "mxfp4" and simd_vnni.lanes():   # one vpdpbusd a block, the same bits (engine/cpu/kernels_mxfp4.py)
            self._matvec8 = KM.matvec8_mxfp4
        self._tile8 = getattr(T8, f"tile_{key}", None)   # the K-quants'
        self._vnni = gtype.name in TV.TYPES
        if self._vnni:
            self._vnni_job = getattr(TVQ if iq else GV, key)
            self._regions = TV.regions(gtype.name, n_in)
        self.k_blocks = gtype.name in _Q8_K
        self.int8 = int8_default() if int8 is None else int8

    @property
    def int8(self) -> bool:
        """Whether one-row products quantize x to 8 bits (quantized weights only)."""
        return self._int8

    @int8.setter
    def int8(self, value: bool) -> None:
        self._int8 = bool(value) and self._matvec8 is not None

    @property
    def nbytes(self) -> int:
        return sum(w.nbytes for w in self.ws)

    @property
    def scale(self) -> float:
        """The output scale (one matrix)."""
        return float(self.scales[0])

    @scale.setter
    def scale(self, value: float) -> None:
        self.scales[:] = value

    def __call__(self, act: Activations, out: np.ndarray | None = None, work=None) -> np.ndarray:
        """float32 [act.n, n_out] (written into `out` when given, any row stride). `work` (an object
        with `map(fn, items)`, None: this thread) runs the tiles of a tiled product, each on
        whichever thread takes it: a tile's product is the same one-thread BLAS call either way."""
        n = act.n
        if out is None:
            out = np.empty((n, self.n_out), np.float32)
        if n <= MATVEC_MAX_ROWS and not getattr(_local, "serial", False):
            self._rows(act, out)
        elif self._int8 and act.int8 and self._vnni and n >= GV.NX and vnni_tiles():
            self._tiles_vnni(act, out, work)
        elif self._int8 and act.int8 and self._tile8 is not None and n <= INT8_TILES_MAX_ROWS:
            self._tiles8(act, out, work)
        else:
            self._tiles(act, out, work)
        return out

    def _rows(self, act: Activations, out: np.ndarray) -> None:
        direct = out.strides[1] == 4
        if act.n == 1 and direct and self._int8 and act.int8:   # a decode token: no views to make
            q, d, s = act.q8_row(self.k_blocks)
            with _LAUNCH:
                self._matvec8(self.ws, q, d, s, out[0], self.scales)
            return
        with _LAUNCH:
            for i in range(act.n):
                dst = out[i] if direct else np.empty(self.n_out, np.float32)
                if self._int8 and act.int8:
                    q, d, s = act.q8(self.k_blocks)
                    self._matvec8(self.ws, q[i], d[i], s[i], dst, self.scales)
                elif self.quantized:
                    xs = act.xs[i] if self.sums else _NO_SUMS[0]
                    self._matvec(self.ws, act.x[i], xs, dst, self.scales)
                else:
                    self._matvec(self.ws, act.x[i], dst, self.scales)
                if not direct:
                    out[i] = dst

    def _tile_jobs(self, t: int) -> list:
        """The tiles of t rows: (matrix, its rows [r0, r1), output column of r0, scale), fixed by
        the shapes."""
        jobs, c = [], 0
        for w, nr, s in zip(self.ws, self.rows, self.scales):
            jobs += [(w, r0, min(nr, r0 + t), c + r0, s) for r0 in range(0, nr, t)]
            c += nr
        return jobs

    @staticmethod
    def _run(tile, jobs: list, work) -> None:
        """tile(job) for every job: on this thread, or spread by `work` (an object with map)."""
        if work is None or len(jobs) == 1:
            for job in jobs:
                tile(job)
        else:
            work.map(tile, jobs)

    def _tiles(self, act: Activations, out: np.ndarray, work=None) -> None:
        t, n = self._tile, act.n
        swap = n <= SWAP_MAX_ROWS

        def tile(job) -> None:
            w, r0, r1, col, s = job
            buf = _scratch(t * self.n_in).reshape(t, self.n_in)[:r1 - r0]   # this thread's
            self._dequant(w, r0, r1, buf)
            dst = out[:, col:col + r1 - r0]
            if swap:
                tmp = _scratch(t * n, 1).reshape(t, n)[:r1 - r0]        # [r1 - r0, n]
                np.matmul(buf, act.x.T, out=tmp)
                dst[...] = tmp.T
            else:
                np.matmul(act.x, buf.T, out=dst)
            if s != 1.0:
                dst *= s
        self._run(tile, self._tile_jobs(t), work)

    def _tiles8(self, act: Activations, out: np.ndarray, work=None) -> None:
        t = TILE8_ROWS
        q, d, _ = act.q8(True)
        xsum = act.x_sums()

        def tile(job) -> None:
            w, r0, r1, col, sc = job
            codes, scv, dd, mw = _tile8_scratch(t, self.n_in)   # this thread's
            self._tile8(w, r0, r1, codes, scv, dd, mw)
            G8.gemm_k(codes, scv, dd, mw, r1 - r0, q, d, xsum, out, col, sc)
        self._run(tile, self._tile_jobs(t), work)

    def _tiles_vnni(self, act: Activations, out: np.ndarray, work=None) -> None:
        q, d, xc = act.vnni_x(self.type.name)
        code, sc, mo, dd, e, gbytes = self._regions
        dst = out if out.strides[1] == 4 else np.empty((act.n, self.n_out), np.float32)
        sub = GV.SUB
        rows = self.n_out if work is None else -(-self.n_out // (VNNI_JOBS * sub)) * sub

        def job(j) -> None:
            w, r0, r1, col, s = j
            tile, rows16 = _vnni_scratch(sub // 16 * gbytes, self.n_in)   # this thread's
            self._vnni_job(w, r0, r1, tile, rows16, self.n_in, code, sc, mo, dd, e, gbytes, q, d, xc, dst, col, s)
        self._run(job, self._tile_jobs(rows), work)
        if dst is not out:
            out[...] = dst

    def dequant(self, r0: int, r1: int, out: np.ndarray) -> None:
        """float32 rows [r0, r1) of the first matrix into out [r1 - r0, n_in] (C-contiguous)."""
        self._dequant(self.ws[0], r0, r1, out)
