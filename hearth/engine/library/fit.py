"""Does a model fit this machine? fits / tight / won't fit, from the bytes a model needs at a
context length against the memory available (RAM for the CPU backend, the adapter's memory for
the GPU one; the caller passes which).

The estimate is a function, `MemoryEstimate(facts, n_ctx) -> bytes`, so the engine's own memory
estimate replaces `simple_estimate` here (set `ESTIMATE`) without the library or the app changing.
`simple_estimate` counts what dominates: the weights (the file is mapped, every page is touched)
plus Hearth's KV cache for `n_ctx` (K and V, every layer; float32, or float16 with `kv_dtype="f16"`)
plus the logits buffers.
"""

from __future__ import annotations

import enum
from typing import Callable

from .. import memory
from .model_facts import ModelFacts

MemoryEstimate = Callable[[ModelFacts, int], int]

# Before download only the file size is known: weights plus this share for cache and buffers.
SIZE_ONLY_OVERHEAD = 0.2


class Fit(enum.Enum):
    FITS = "fits"
    TIGHT = "tight"
    WONT_FIT = "won't fit"
    UNKNOWN = "unknown"


def kv_cache_bytes(facts: ModelFacts, n_ctx: int, kv_dtype: str = "f32") -> int | None:
    """The KV cache at n_ctx of `kv_dtype` ("f32" or "f16"), as engine.memory's estimate counts it;
    None when the header did not give the cache's dimensions."""
    if not (facts.n_layer and facts.n_head_kv and facts.head_dim):
        return None
    return memory.kv_part(facts.n_layer, facts.n_head_kv, facts.head_dim, facts.head_dim_v, n_ctx, kv_dtype)


def simple_estimate(facts: ModelFacts, n_ctx: int, kv_dtype: str = "f32") -> int:
    kv = kv_cache_bytes(facts, n_ctx, kv_dtype)
    if kv is None:
        return size_only_estimate(facts.size)
    logits = 2 * 4 * (facts.n_vocab or 0)  # the last position's logits and the sampler's copy
    return facts.size + kv + logits


def size_only_estimate(file_size: int) -> int:
    return int(file_size * (1 + SIZE_ONLY_OVERHEAD))


ESTIMATE: MemoryEstimate = simple_estimate


def available_memory() -> int | None:
    """Bytes of RAM available to a new allocation now, or None (engine.memory owns how it is read)."""
    return memory.available_bytes()


def judge(needed: int, available: int | None) -> Fit:
    """hearth.engine.memory's verdict (the rule the engine's load check uses), unknown when the
    available memory cannot be read."""
    if available is None or available <= 0:
        return Fit.UNKNOWN
    return Fit(memory.verdict(needed, available))


def fit_for(facts: ModelFacts, n_ctx: int, available: int | None = None,
            estimate: MemoryEstimate | None = None, kv_dtype: str = "f32") -> tuple[Fit, int]:
    """(fit, bytes needed) for a model on disk at `n_ctx` with a KV cache of `kv_dtype`. An estimate
    function is for float32; a float16 cache needs the difference of the two cache sizes less."""
    needed = (estimate or ESTIMATE)(facts, n_ctx)
    if kv_dtype != "f32" and kv_cache_bytes(facts, n_ctx) is not None:
        needed -= kv_cache_bytes(facts, n_ctx) - kv_cache_bytes(facts, n_ctx, kv_dtype)
    return judge(needed, available_memory() if available is None else available), needed


def fit_before_download(file_size: int, available: int | None = None) -> tuple[Fit, int]:
    needed = size_only_estimate(file_size)
    return judge(needed, available_memory() if available is None else available), needed
