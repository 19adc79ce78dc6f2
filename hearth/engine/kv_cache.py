"""The key/value cache: one preallocated buffer for K and one for V, float32 or float16.

Layout (the layout prefix images store, whichever backend wrote them):
    k[layer], v[layer]: dtype [n_kv_heads, max_ctx, head_dim]  — contiguous per layer,
    views into two arrays of shape [n_layers, n_kv_heads, max_ctx, head_dim] allocated once.
Position p of head h lives at k[layer][h, p, :]. Nothing is ever grown or concatenated:
`truncate` and `clear` only move `n_tokens`, the count of valid positions.

dtype (`KV_DTYPES`): "f32" (the default: K and V exactly as computed) or "f16" (half the memory and
image bytes, as llama.cpp keeps its cache by default). float16 values are rounded to nearest even
when stored (numpy's conversion; the GPU cache rounds the same way, wgsl/f16_pack.wgsl) and read
back exactly; all arithmetic stays float32.
"""

from __future__ import annotations

import mmap

import numpy as np

from .errors import ContextFullError, EngineError


KV_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16)}
_ALIASES = {"float32": "f32", "float16": "f16", "fp32": "f32", "fp16": "f16"}


def kv_dtype(name) -> np.dtype:
    """The numpy dtype of a KV cache setting: "f32" or "f16" (also "float32", "float16")."""
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    if key not in KV_DTYPES:
        raise EngineError(f"unknown KV cache dtype '{name}' (choose f32 or f16)")
    return KV_DTYPES[key]


def kv_dtype_name(dtype) -> str:
    """"f32" or "f16" for a cache's numpy dtype."""
    return next(k for k, v in KV_DTYPES.items() if v == np.dtype(dtype))


def kv_bytes(n_layers: int, n_kv_heads: int, head_dim: int, n_ctx: int, dtype="f32") -> int:
    """Bytes of K and V for n_ctx positions of every layer."""
    return 2 * kv_dtype(dtype).itemsize * n_layers * n_kv_heads * head_dim * n_ctx


# The checks both KV caches (this one and engine/gpu/kv.py's) make, with the same errors.
def check_sizes(n_layers: int, n_kv_heads: int, head_dim: int, max_ctx: int) -> None:
    if min(n_layers, n_kv_heads, head_dim, max_ctx) <= 0:
        raise EngineError(f"KV cache sizes must be positive (layers {n_layers}, kv heads {n_kv_heads}, "
                          f"head dim {head_dim}, context {max_ctx})")


def check_range(pos: int, n: int, max_ctx: int) -> None:
    """Raise ContextFullError if positions [pos, pos + n) do not fit in max_ctx."""
    if pos < 0 or n < 0:
        raise EngineError(f"bad cache range: position {pos}, {n} tokens")
    if pos + n > max_ctx:
        raise ContextFullError(
            f"{pos + n} tokens do not fit in the context of {max_ctx} "
            f"({pos} resident + {n} new); start a new chat or load with a larger n_ctx", pos, n, max_ctx)


def check_prefix_shapes(layer: int, k, v, want: tuple[int, int, int]) -> None:
    """K and V handed to write_prefix / write_at must both be [n_kv_heads, n, head_dim]."""
    if tuple(k.shape) != want or tuple(v.shape) != want:
        raise EngineError(f"write_prefix: layer {layer} expects K and V of shape {want}, "
                          f"got {tuple(k.shape)} and {tuple(v.shape)}")


def check_span(kv, layer: int, start: int, k, v) -> int:
    """What a cache's write_at checks before writing anything: K and V of one shape
    [n_kv_heads, n, head_dim], positions [start, start + n) inside the context. Returns n."""
    n = k.shape[1] if k.ndim == 3 else -1
    check_prefix_shapes(layer, k, v, (kv.n_kv_heads, n, kv.head_dim))
    kv.check_fits(start, n)
    return n


def _lazy_zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Zeros in fresh anonymous pages, touched (made resident) only as positions are written.
    Not np.zeros: numpy asks for transparent huge pages on large arrays, and then writing position 0
    of every head makes whole 2 MiB pages resident (190 MB for one token of SmolLM2 at n_ctx 4096)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(mmap.mmap(-1, max(n, 1)), dtype=dtype, count=n // np.dtype(dtype).itemsize).reshape(shape)


class KVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_ctx: int, dtype="f32"):
        check_sizes(n_layers, n_kv_heads, head_dim, max_ctx)
        self.n_layers, self.n_kv_heads, self.head_dim, self.max_ctx = n_layers, n_kv_heads, head_dim, max_ctx
        self.dtype = kv_dtype(dtype)
        shape = (n_layers, n_kv_heads, max_ctx, head_dim)
        self._k = _lazy_zeros(shape, self.dtype)
        self._v = _lazy_zeros(shape, self.dtype)
        self.k = [self._k[i] for i in range(n_layers)]  # each dtype [n_kv_heads, max_ctx, head_dim]
        self.v = [self._v[i] for i in range(n_layers)]
        self.n_tokens = 0  # positions [0, n_tokens) hold valid K/V

    @property
    def nbytes(self) -> int:
        """Bytes allocated for K and V together."""
        return self._k.nbytes + self._v.nbytes

    def as_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """K and V of every layer as their bytes, uint8 [n_layers, n_kv_heads, max_ctx, head_dim *
        itemsize] views (compiled code that stores and reads positions in place)."""
        return self._k.view(np.uint8), self._v.view(np.uint8)

    def prefault(self) -> bool:
        """Make every page of K and V resident now (engine/system/resident_pages.py), so the first restore or
        prefill does not pay for first touches. Safe while another thread uses the cache."""
        from .system.resident_pages import populate  # noqa: PLC0415
        return populate(self._k) & populate(self._v)

    def check_fits(self, pos: int, n: int) -> None:
        """Raise ContextFullError if positions [pos, pos + n) do not fit; call before writing anything."""
        check_range(pos, n, self.max_ctx)

    def store(self, layer: int, pos: int, k: np.ndarray, v: np.ndarray) -> None:
        """Write K and V for positions [pos, pos + n); k, v: float32 [n_kv_heads, n, head_dim] (any
        strides; rounded to nearest even in a float16 cache)."""
        n = k.shape[1]
        self.k[layer][:, pos:pos + n] = k
        self.v[layer][:, pos:pos + n] = v

    def read_prefix(self, layer: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer `layer`'s K and V for positions [0, n): views [n_kv_heads, n, head_dim] of the cache's
        dtype, no copy."""
        if not 0 <= n <= self.max_ctx:
            raise EngineError(f"read_prefix: {n} positions asked of a cache of {self.max_ctx}")
        return self.k[layer][:, :n], self.v[layer][:, :n]

    def write_prefix(self, layer: int, n: int, k: np.ndarray, v: np.ndarray) -> None:
        """Fill positions [0, n) of layer `layer` from k, v [n_kv_heads, n, head_dim] of the cache's dtype
        (an image's bytes)."""
        check_prefix_shapes(layer, k, v, (self.n_kv_heads, n, self.head_dim))
        self.write_at(layer, 0, k, v)

    def write_at(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Fill positions [start, start + n) of layer `layer` from k, v [n_kv_heads, n, head_dim] of the
        cache's dtype (any strides: a part of an image); positions outside stay as they are."""
        n = check_span(self, layer, start, k, v)
        self.k[layer][:, start:start + n] = k
        self.v[layer][:, start:start + n] = v

    def truncate(self, n: int) -> None:
        """Forget positions >= n (the allocation stays)."""
        self.n_tokens = max(0, min(self.n_tokens, n))

    def clear(self) -> None:
        self.n_tokens = 0
