"""The weights of a model: matrices used from the file's blocks, small tensors as float32.

Matrices stay in the memory-mapped file, in their GGUF type, and are multiplied by the compiled
kernels of engine.cpu (nothing is copied or dequantized at load, so loading costs no time and the
resident memory is the file's pages the OS keeps). Matrices that read the same input are grouped:
q/k/v into one `Matrices` and gate/up into another, each part a `Linear`, so one quantization of
the input serves them all and their outputs land side by side. A type the kernels do not cover
(the IQ types, rows not a multiple of 32 weights) is dequantized once into float32 [n_out, n_in]
and multiplied by BLAS: correct, at the old memory cost.
"""

from __future__ import annotations

import numpy as np

from ..cpu.linear import KERNEL_TYPES, Activations, Linear
from ..errors import UnsupportedModelError
from ..quants import dequantize, dequantize_blocks, dequantize_rows
from ..system.resident_pages import populate


class Dense:
    """A matrix dequantized to float32 [n_out, n_in] (types without a kernel)."""

    def __init__(self, w: np.ndarray):
        self.w, self.n_out = w, w.shape[0]
        self.ws = (w,)
        self.scales = np.ones(1, np.float32)

    @property
    def nbytes(self) -> int:
        return self.w.nbytes

    def __call__(self, act: Activations, out: np.ndarray, work=None) -> np.ndarray:
        np.matmul(act.x, self.w.T, out=out)
        if self.scales[0] != 1.0:
            out *= self.scales[0]
        return out


class Matrices:
    """GGUF matrices that read the same input, their outputs side by side:
    `m(act)` -> float32 [n, sum(rows)]. Consecutive matrices of one kernel type form one `Linear`
    (one parallel launch for all of them)."""

    def __init__(self, parts: list):
        self.parts = parts
        self.n_out = sum(p.n_out for p in parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def touch(self) -> None:
        """Make the parts' pages resident: in one call where the kernel can (Linux 5.14+: ~2x faster
        than a fault per page for a file in the page cache, and without the GIL), else one read per
        4 KiB page."""
        for p in self.parts:
            for w in p.ws:
                flat = w.reshape(-1).view(np.uint8)
                if flat.size and not populate(flat, write=False):
                    flat[::4096].max()

    def scale_first(self, s: float) -> None:
        """Multiply the first matrix's outputs by s."""
        self.parts[0].scales[0] = s

    def __call__(self, act: Activations, work=None) -> np.ndarray:
        """`work`: spreads a product's weight tiles over threads (`RowRunner.map`), or None."""
        out = np.empty((act.n, self.n_out), np.float32)
        c = 0
        for p in self.parts:
            p(act, out[:, c:c + p.n_out], work)
            c += p.n_out
        return out


class Loader:
    """Builds `Matrices` from GGUF tensor names, checking shapes against the metadata."""

    def __init__(self, g):
        self.g = g

    def matrix(self, names: list[str], n_in: int, rows: list[int]) -> Matrices:
        """GGUF matrices `names` (rows[i] outputs of n_in inputs each), outputs side by side."""
        parts: list = []
        for name, nr in zip(names, rows):
            t = self.g.tensors.get(name)
            if t is None:
                raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} is missing")
            if tuple(t.shape) != (n_in, nr):
                raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} has shape {tuple(t.shape[::-1])}, "
                                            f"expected {(nr, n_in)} from the metadata")
            if t.type.name in KERNEL_TYPES and n_in % 32 == 0:
                w = t.data.reshape(nr, -1)
                last = parts[-1] if parts else None
                if isinstance(last, Linear) and last.type == t.type:
                    parts[-1] = Linear([*last.ws, w], t.type, n_in, last.name)
                else:
                    parts.append(Linear(w, t.type, n_in, name))
            else:
                parts.append(Dense(dequantize_rows(t)))
        return Matrices(parts)


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
