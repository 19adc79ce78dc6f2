"""CpuBackend: the numpy forward pass, prefilled in chunks.

Long inputs go through the model `chunk` tokens at a time: each chunk is one set of BLAS
matrix products per layer, and its attention scores are [heads, chunk, T] rather than
[heads, n, n], so memory stays bounded whatever the prompt length. numpy releases the GIL
inside BLAS, so a GUI thread stays responsive while this runs in a worker.
"""

from __future__ import annotations

import numpy as np

from .backend import Backend
from .config import ModelConfig
from .kv_cache import KVCache
from .models import build_model

DEFAULT_CHUNK = 512


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, cfg: ModelConfig, gguf, n_ctx: int, chunk: int = DEFAULT_CHUNK):
        self.cfg = cfg
        self.model = build_model(cfg, gguf)
        self.kv = KVCache(cfg.n_layer, cfg.n_head_kv, cfg.head_dim, n_ctx)
        self.chunk = chunk

    def forward(self, ids, pos: int, all_logits: bool = False) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        n = len(ids)
        if n == 0:
            raise ValueError("forward needs at least one token")
        self.kv.check_fits(pos, n)
        bad = (ids < 0) | (ids >= self.cfg.n_vocab)
        if bad.any():
            raise ValueError(f"token id {int(ids[bad][0])} is outside the vocabulary of {self.cfg.n_vocab}")
        outs = []
        for s in range(0, n, self.chunk):
            part = ids[s:s + self.chunk]
            last = s + self.chunk >= n
            out = self.model.forward(part, pos + s, self.kv, all_logits=all_logits)
            self.kv.n_tokens = pos + s + len(part)
            if all_logits:
                outs.append(out)
            elif last:
                outs.append(out)
        return np.concatenate(outs) if all_logits else outs[-1]

    def describe(self) -> dict:
        return {"backend": "cpu"}

    def close(self) -> None:
        self.model = None
