"""mistral3 (Ministral 3, Mistral Small 3.x as published under this architecture): llama's layers
(RMSNorm, q/k/v, adjacent-pair RoPE, SiLU-gated FFN, optional `rope_freqs`) with YaRN scaling
whose log multiplier sets the attention factor (config._rope_scaling), and Llama 4's temperature
tuning: after RoPE, q at position p is multiplied by 1 + s * ln(floor(p / n) + 1), s =
`attention.temperature_scale`, n = the original context (llama.cpp's LLM_ARCH_MISTRAL3; flags in
engine/models/dense_config.py). Below n positions the factor is 1.

One-token passes run through the compiled layers while every position of the pass is below n
(the factor is exactly 1 there: the published files have n = 16,384), on the per-operation path
from there on: the compiled layers have no per-position q factor.
"""

from __future__ import annotations

import numpy as np

from .dense_config import config_fields  # noqa: F401  (the ModelConfig fields of this architecture)
from .decoder import Decoder


class Mistral3(Decoder):

    def __init__(self, cfg, g):
        super().__init__(cfg, g)
        self._tuned = False          # whether the current pass has positions >= attn_temp_floor

    def forward(self, ids, pos, kv, *args, **kwargs):
        c = self.cfg
        self._tuned = bool(c.attn_temp_scale) and pos + len(ids) >= c.attn_temp_floor   # pos + len(ids): a tail token
        return super().forward(ids, pos, kv, *args, **kwargs)

    @property
    def compiled(self):
        return None if self._tuned else Decoder.compiled.fget(self)

    def _before_attention(self, i, b, x, q, r0, r1, pos, kv, cs, window, i8, work=None):
        super()._before_attention(i, b, x, q, r0, r1, pos, kv, cs, window, i8, work)
        c = self.cfg
        if c.attn_temp_scale:
            p = np.arange(pos + r0, pos + r1, dtype=np.float64)
            t = 1.0 + c.attn_temp_scale * np.log(np.floor(p / c.attn_temp_floor) + 1.0)   # [r1 - r0]
            q[r0:r1] *= t.astype(np.float32)[:, None, None]
