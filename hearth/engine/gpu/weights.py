"""Model weights on the GPU, uploaded once in their GGUF block format.

A matrix whose type has a kernel (ops.GPU_TYPES) is uploaded byte for byte; one whose type has none
is dequantized once on the CPU and uploaded as F16 (said in the log), so every GGUF the numpy
backend reads also runs here. Vectors (norm weights, biases, rope_freqs) become float32.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import EngineError, UnsupportedModelError
from ..quants import dequantize
from .ops import GPU_TYPES

log = logging.getLogger(__name__)


class GpuMatrix:
    """A weight matrix [rows, k] on the GPU: `buffer` (GGUF bytes), `qtype`, `rows`, `k`.
    `parts`: [(buffer, first_row, rows)] — one part, unless the matrix is larger than the GPU binds in
    one buffer (a 262k-token vocabulary), when it is split by rows."""

    def __init__(self, buffer, qtype: str, rows: int, k: int, parts=None):
        self.buffer, self.qtype, self.rows, self.k = buffer, qtype, rows, k
        self.parts = parts or [(buffer, 0, rows)]


class GpuWeights:
    def __init__(self, dev, gguf):
        self.dev = dev
        self.g = gguf
        self.buffers = []
        self.nbytes = 0
        self.fallbacks: list[str] = []
        self.max_binding = int(dev.limits["max-storage-buffer-binding-size"])

    def _upload(self, data, label):
        b = self.dev.upload(data, label)
        self.buffers.append(b)
        self.nbytes += b.size
        return b

    def matrix(self, name: str, rows: int, k: int, split: bool = False) -> GpuMatrix:
        """`split`: a matrix over the binding limit is uploaded in row parts (callers that loop over
        `.parts`: the embedding and the output head); otherwise that is an error."""
        t = self.g.tensors.get(name)
        if t is None:
            raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} is missing")
        if tuple(t.shape) != (k, rows):
            raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} has shape {list(t.shape)}, "
                                        f"expected [{k}, {rows}]")
        if k % 32:
            raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} rows of {k} weights are not a "
                                        f"multiple of 32, which the GPU kernels need")
        if t.type.name in GPU_TYPES:
            data, qtype = t.data, t.type.name
        else:
            log.info("%s: tensor %s has type %s with no GPU kernel: uploading a dequantized F16 copy",
                     self.g.path.name, name, t.type.name)
            self.fallbacks.append(f"{name} ({t.type.name} -> F16)")
            data, qtype = dequantize(t.data, t.type, t.shape, name).astype(np.float16), "F16"
        raw = np.asarray(data).view(np.uint8).reshape(rows, -1)
        rb = raw.shape[1]
        if raw.nbytes + 4 <= self.max_binding:
            return GpuMatrix(self._upload(raw, name), qtype, rows, k)
        per = (self.max_binding - 4) // rb
        if not split or -(-rows // per) > 4:
            raise EngineError(f"{self.g.path.name}: tensor {name} ({raw.nbytes >> 20} MiB) is larger than the GPU "
                              f"{self.dev.info['device']} can bind in one buffer ({self.max_binding >> 20} MiB)")
        parts = [(self._upload(raw[r:r + per], f"{name}[{r}:]"), r, min(per, rows - r)) for r in range(0, rows, per)]
        log.info("%s: tensor %s split in %d parts of at most %d rows (GPU binding limit)", self.g.path.name, name,
                 len(parts), per)
        return GpuMatrix(parts[0][0], qtype, rows, k, parts)

    def vector(self, name: str, n: int | None = None, optional: bool = False):
        t = self.g.tensors.get(name)
        if t is None:
            if optional:
                return None
            raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} is missing")
        v = dequantize(t.data, t.type, t.shape, name).reshape(-1).astype(np.float32)
        if n is not None and v.size != n:
            raise UnsupportedModelError(f"{self.g.path.name}: tensor {name} has {v.size} values, expected {n}")
        return self._upload(v, name)

    def floats(self, arr: np.ndarray, label: str):
        return self._upload(np.ascontiguousarray(arr, np.float32), label)

    def destroy(self):
        for b in self.buffers:
            b.destroy()
        self.buffers = []
