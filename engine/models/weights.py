"""Loading GGUF tensors as float32 matrices laid out for BLAS.

Every matrix is dequantized once at load into float32 [n_out, n_in], C-contiguous, so that
`x @ W.T` (x [n, n_in]) runs as one BLAS sgemm with W read row by row — the fastest layout for
both prefill (matrix-matrix) and decode (matrix-vector, bandwidth-bound). Matrices that read the
same input are fused into one: q/k/v into `wqkv` and gate/up into `w_gate_up`, so each block
does two large products instead of five.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedModelError
from ..quants import dequantize


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


def optional(g, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
    return tensor(g, name, shape) if name in g.tensors else None


def fused(g, names: list[str], n_in: int, rows: list[int]) -> np.ndarray:
    """Matrices `names` (each [rows[i], n_in]) stacked into one float32 [sum(rows), n_in]."""
    out = np.empty((sum(rows), n_in), np.float32)
    r = 0
    for name, nr in zip(names, rows):
        out[r:r + nr] = tensor(g, name, (nr, n_in))
        r += nr
    return out


def fused_bias(g, names: list[str], rows: list[int]) -> np.ndarray | None:
    """Biases of the fused matrices, zeros where one is absent; None when all are absent."""
    if not any(n in g.tensors for n in names):
        return None
    parts = [tensor(g, n, (nr,)) if n in g.tensors else np.zeros(nr, np.float32) for n, nr in zip(names, rows)]
    return np.concatenate(parts)
