"""The KV cache on the GPU, in the numpy backend's layout.

Per layer one K and one V storage buffer, each [n_kv_heads, max_ctx, head_dim] of the cache's dtype
(float32, or float16 as numpy lays it out: two values a u32 word for the shaders, wgsl/f16_kv.wgsl):
position p of head h at element (h * max_ctx + p) * head_dim. Allocated once at load.

`read_prefix(layer, n)` copies positions [0, n) of every head (one copy command per head range) into
the device's one staging buffer and maps it once. A prefix image reads layers 0, 1, ... in turn, so the
first call copies every layer's range in one submit and later layers are served from that snapshot
(invalidated by any write). `write_at` (and `write_prefix`, its span from 0) uses queue.write_buffer per
head range and submits once per tensor, so staged uploads never pile up.
"""

from __future__ import annotations

import numpy as np

from ..errors import EngineError
from ..kv_cache import check_prefix_shapes, check_range, check_sizes, check_span, kv_dtype


class GpuKVCache:
    def __init__(self, dev, n_layers: int, n_kv_heads: int, head_dim: int, max_ctx: int, dtype="f32"):
        check_sizes(n_layers, n_kv_heads, head_dim, max_ctx)
        self.dev = dev
        self.n_layers, self.n_kv_heads, self.head_dim, self.max_ctx = n_layers, n_kv_heads, head_dim, max_ctx
        self.dtype = kv_dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.layer_bytes = n_kv_heads * max_ctx * head_dim * self.itemsize
        if self.layer_bytes > dev.limits["max-storage-buffer-binding-size"]:
            raise EngineError(f"a KV cache layer of {self.layer_bytes >> 20} MiB exceeds what the GPU binds "
                              f"({dev.limits['max-storage-buffer-binding-size'] >> 20} MiB): use a smaller n_ctx")
        self.k = [dev.buffer(self.layer_bytes, f"k{i}") for i in range(n_layers)]   # [n_kv, max_ctx, hd] dtype
        self.v = [dev.buffer(self.layer_bytes, f"v{i}") for i in range(n_layers)]
        self.n_tokens = 0
        self._snapshot = None     # (n, uint8 bytes of every layer's K then V ranges)
        self.generation = 0       # bumped by every write

    @property
    def nbytes(self) -> int:
        return 2 * self.n_layers * self.layer_bytes

    def check_fits(self, pos: int, n: int) -> None:
        check_range(pos, n, self.max_ctx)

    def touched(self) -> None:
        """The cache changed on the GPU (a forward pass): drop the read snapshot."""
        self._snapshot = None
        self.generation += 1

    def _ranges(self, layer: int, n: int):
        row = self.max_ctx * self.head_dim * self.itemsize
        size = n * self.head_dim * self.itemsize
        return ([(self.k[layer], h * row, size) for h in range(self.n_kv_heads)] +
                [(self.v[layer], h * row, size) for h in range(self.n_kv_heads)])

    def read_prefix(self, layer: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer `layer`'s K and V for positions [0, n): [n_kv_heads, n, head_dim] arrays of the cache's
        dtype (host copies; later forward passes do not change them)."""
        if not 0 <= n <= self.max_ctx or not 0 <= layer < self.n_layers:
            raise EngineError(f"read_prefix: layer {layer}, {n} positions asked of a cache of "
                              f"{self.n_layers} layers x {self.max_ctx}")
        shape = (self.n_kv_heads, n, self.head_dim)
        if n == 0:
            return np.zeros(shape, self.dtype), np.zeros(shape, self.dtype)
        if self._snapshot is None or self._snapshot[0] != n:
            copies = [c for i in range(self.n_layers) for c in self._ranges(i, n)]
            self._snapshot = (n, self.dev.read(copies).view(self.dtype))
        per = self.n_kv_heads * n * self.head_dim
        data = self._snapshot[1]
        # views of the snapshot (which nothing writes again): the copy from the GPU is the only one
        k = data[2 * layer * per:(2 * layer + 1) * per].reshape(shape)
        v = data[(2 * layer + 1) * per:(2 * layer + 2) * per].reshape(shape)
        if layer == self.n_layers - 1:
            self._snapshot = None        # the image is written: free the host copy
        return k, v

    def write_prefix(self, layer: int, n: int, k: np.ndarray, v: np.ndarray) -> None:
        check_prefix_shapes(layer, k, v, (self.n_kv_heads, n, self.head_dim))
        self.write_at(layer, 0, k, v)

    def write_at(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Positions [start, start + n) of layer `layer` from k, v [n_kv_heads, n, head_dim] of the
        cache's dtype (any strides: each head's run is copied once, contiguous or not); the positions
        outside stay on the GPU untouched, so a restore uploads only what it read."""
        n = check_span(self, layer, start, k, v)
        self.touched()
        if n == 0:
            return
        row = self.max_ctx * self.head_dim * self.itemsize
        at = start * self.head_dim * self.itemsize
        q = self.dev.queue
        for buf, src in ((self.k[layer], k), (self.v[layer], v)):
            for h in range(self.n_kv_heads):
                q.write_buffer(buf, h * row + at, np.ascontiguousarray(src[h], self.dtype))
            q.submit([])      # flush this tensor's staged upload before the next one

    def truncate(self, n: int) -> None:
        self.n_tokens = max(0, min(self.n_tokens, n))

    def clear(self) -> None:
        self.n_tokens = 0

    def destroy(self) -> None:
        for b in self.k + self.v:
            b.destroy()
        self.k, self.v = [], []
