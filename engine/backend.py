"""The interface both backends implement (see DESIGN.md). A backend only computes: the Engine
owns the token list, prefix reuse, sampling, stops and context checks."""

from __future__ import annotations

import numpy as np


class Backend:
    name: str = "?"
    kv: object  # KVCache-like: .n_layers .n_kv_heads .head_dim .max_ctx .nbytes .read_prefix .write_prefix

    def forward(self, ids: np.ndarray, pos: int, all_logits: bool = False) -> np.ndarray:
        """Run int32 ids [n] at positions [pos, pos + n), writing their K/V into the cache.
        Returns float32 logits [n_vocab] of the last position, or [n, n_vocab] with all_logits."""
        raise NotImplementedError

    def describe(self) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        pass
