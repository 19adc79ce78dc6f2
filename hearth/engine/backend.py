"""The interface both backends implement (see DESIGN.md). A backend only computes: the Engine
owns the token list, prefix reuse, sampling, stops and context checks.

Construction (what `Engine.load` calls): `Backend(cfg: ModelConfig, gguf: GGUFFile, n_ctx: int)`.
For backend="auto", `engine.gpu.probe()` returns a dict with `real_gpu` (True for a non-CPU
adapter) or None; the Engine takes the GPU only when `real_gpu` is true.
`kv.n_tokens` counts the valid positions; `forward` must raise ContextFullError (via
`kv.check_fits`) before writing anything when [pos, pos + n) does not fit.
For hybrid models `kv` is the model's own state (engine/models/layer_state.py: `HybridState` with a
recurrent part, `recurrent = True`, snapshot/restore; `SplitKV` for per-layer head sizes); the CPU
backend takes it from the model's `make_state(n_ctx, kv_dtype)` and `forward` advances all of it.
"""

from __future__ import annotations

import numpy as np


class Backend:
    name: str = "?"
    kv: object  # KVCache-like: .n_layers .n_kv_heads .head_dim .max_ctx .nbytes .read_prefix .write_prefix .write_at

    def forward(self, ids: np.ndarray, pos: int, all_logits: bool = False) -> np.ndarray:
        """Run int32 ids [n] at positions [pos, pos + n), writing their K/V into the cache.
        Returns float32 logits [n_vocab] of the last position, or [n, n_vocab] with all_logits."""
        raise NotImplementedError

    def describe(self) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        pass
