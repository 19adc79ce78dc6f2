"""smollm3 (SmolLM3): llama's layers (RMSNorm, q/k/v, adjacent-pair RoPE, SiLU-gated FFN), except
that every 4th layer (il + 1 divisible by 4) rotates nothing: its q and k enter attention as they
come out of their matrices (llama.cpp's LLM_ARCH_SMOLLM3, n_no_rope_layer_step = 4; the flags are
read in engine/models/dense_config.py).

Both paths give those layers the identity rotation (cos 1, sin 0), which is exact in float32
(x * 1 - y * 0 == x): the per-operation path through `_before_attention`, the compiled one-token
path by running the layers in stretches that rotate alike (`_NopeStretches`).
"""

from __future__ import annotations

import numpy as np

from .dense_config import config_fields  # noqa: F401  (the ModelConfig fields of this architecture)
from .decoder import Decoder


def _identity(cs):
    return np.ones_like(cs[0]), np.zeros_like(cs[1])


class SmolLM3(Decoder):

    def __init__(self, cfg, g):
        super().__init__(cfg, g)
        self._stretches = None

    @property
    def compiled(self):
        comp = Decoder.compiled.fget(self)
        if comp is None:
            return None
        if self._stretches is None or self._stretches.comp is not comp:
            self._stretches = _NopeStretches(comp, self.cfg.nope_layers)
        return self._stretches

    def _before_attention(self, i, b, x, q, r0, r1, pos, kv, cs, window, i8, work=None):
        if self.cfg.nope_layers[i]:
            cs = _identity(cs)
        super()._before_attention(i, b, x, q, r0, r1, pos, kv, cs, window, i8, work)


class _NopeStretches:
    """The compiled layers' `run`, split where the layers switch between rotating and not."""

    def __init__(self, comp, nope: tuple[bool, ...]):
        self.comp, self.nope = comp, nope

    def run(self, l0: int, l1: int, x, pos: int, kv, cs) -> None:
        a = l0
        while a < l1:
            b = a + 1
            while b < l1 and self.nope[b] == self.nope[a]:
                b += 1
            self.comp.run(a, b, x, pos, kv, _identity(cs) if self.nope[a] else cs)
            a = b
