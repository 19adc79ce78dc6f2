"""Loading GGUF tensors as float32 matrices laid out for BLAS.

Every matrix is dequantized once at load into float32 [n_in, n_out], C-contiguous (the transpose
of GGUF's row order), so a layer is `y = x @ W` with x [n, n_in]. Measured with OpenBLAS on the
2-core machine, this layout reads weights ~1.6x faster than `x @ W.T` on [n_out, n_in] for
decode's matrix-vector products (which are bandwidth-bound: the whole model is read per token),
is faster for small batches (a chat turn's 20 tokens) and no slower for 512-token chunks.
Matrices that read the same input are fused column-wise: q/k/v into `wqkv` and gate/up into
`w_gate_up`, so a block does four products (with attn_output and ffn_down) instead of seven.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import UnsupportedModelError
from ..quants import dequantize, dequantize_blocks

# Rows per dequantization job: ~1 MiB of float32 output (an L2), so a job's temporaries stay in cache
# and its result is written once, straight into the final matrix.
_JOB_FLOATS = 1 << 18


class Loader:
    """Dequantizes matrices straight into preallocated float32 buffers, in parallel.

    `matrix(...)` returns the (not yet filled) buffer at once and queues its row chunks;
    `finish()` waits for every queued chunk. numpy releases the GIL in the dequantizers, so the
    chunks run on all cores, and no intermediate full-size array is made and copied.
    """

    def __init__(self, g):
        self.g = g
        self.jobs: list[tuple[np.ndarray, np.ndarray, object, str]] = []

    def matrix(self, names: list[str], n_in: int, rows: list[int]) -> np.ndarray:
        """GGUF matrices `names` (rows[i] outputs of n_in inputs each), transposed and placed
        side by side: float32 [n_in, sum(rows)], filled by finish()."""
        out = np.empty((n_in, sum(rows)), np.float32)
        r = 0
        for name, nr in zip(names, rows):
            t = self.g.tensors.get(name)
            if t is None:
                raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} is missing")
            if tuple(t.shape) != (n_in, nr):
                raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} has shape {tuple(t.shape[::-1])}, "
                                            f"expected {(nr, n_in)} from the metadata")
            blocks = t.data.reshape(-1, t.type.type_size)
            per_row = n_in // t.type.block_size
            step = max(1, _JOB_FLOATS // n_in)
            for r0 in range(0, nr, step):
                r1 = min(nr, r0 + step)
                self.jobs.append((out[:, r + r0:r + r1], blocks[r0 * per_row:r1 * per_row], t.type, name))
            r += nr
        return out

    def finish(self) -> None:
        def run(job):
            dst, blocks, gtype, name = job
            dst[...] = dequantize_blocks(blocks, gtype, name).reshape(dst.shape[::-1]).T
        jobs, self.jobs = self.jobs, []
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="load") as pool:
            list(pool.map(run, jobs, chunksize=16))


def tensor(g, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Tensor `name` as float32 in numpy order; `shape` (numpy order) is checked when given."""
    t = g.tensors.get(name)
    if t is None:
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} is missing")
    a = dequantize(t.data, t.type, t.shape, name)
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {tuple(a.shape)}, "
                                    f"expected {tuple(shape)} from the metadata")
    return a


class RowLookup:
    """Rows of a GGUF matrix (the token embeddings), dequantized on demand from the file's
    blocks: the same values as dequantizing the whole matrix, without keeping it in float32."""

    def __init__(self, g, name: str, n_rows: int, n_cols: int):
        t = g.tensors.get(name)
        if t is None:
            raise UnsupportedModelError(f"{g.path.name}: tensor {name} is missing")
        if tuple(t.shape) != (n_cols, n_rows):
            raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {tuple(t.shape[::-1])}, "
                                        f"expected {(n_rows, n_cols)} from the metadata")
        self.name, self.type, self.n_cols = name, t.type, n_cols
        self.blocks = t.data.reshape(n_rows, -1, t.type.type_size)   # [rows, blocks per row, bytes]

    def __getitem__(self, ids) -> np.ndarray:
        """float32 [len(ids), n_cols]."""
        ids = np.asarray(ids, np.int64)
        raw = self.blocks[ids].reshape(-1, self.type.type_size)
        return dequantize_blocks(raw, self.type, self.name).reshape(len(ids), self.n_cols)


def optional(g, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
    return tensor(g, name, shape) if name in g.tensors else None


def fused_bias(g, names: list[str], rows: list[int]) -> np.ndarray | None:
    """Biases of the fused matrices, zeros where one is absent; None when all are absent."""
    if not any(n in g.tensors for n in names):
        return None
    parts = [tensor(g, n, (nr,)) if n in g.tensors else np.zeros(nr, np.float32) for n, nr in zip(names, rows)]
    return np.concatenate(parts)
