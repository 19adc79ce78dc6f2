"""smollm3 (SmolLM3): llama's layers (RMSNorm, q/k/v, adjacent-pair RoPE, SiLU-gated FFN), except
that every 4th layer (il + 1 divisible by 4) rotates nothing: its q and k enter attention as they
come out of their matrices (llama.cpp's LLM_ARCH_SMOLLM3, n_no_rope_layer_step = 4; the flags are
read in engine/dense_config.py).

One-token passes stay on the per-operation path: the compiled layers rotate every layer.
"""

from __future__ import annotations

import numpy as np

from ..dense_config import config_fields  # noqa: F401  (the ModelConfig fields of this architecture)
from .decoder import Decoder


class SmolLM3(Decoder):

    def __init__(self, cfg, g):
        super().__init__(cfg, g)
        self.compiled_reason = "layers without RoPE (smollm3)"

    def _before_attention(self, i, b, x, q, r0, r1, pos, kv, cs, window, i8, work=None):
        if self.cfg.nope_layers[i]:
            # The identity rotation (cos 1, sin 0) is exact: x * 1 - y * 0 == x in float32.
            cs = (np.ones_like(cs[0]), np.zeros_like(cs[1]))
        super()._before_attention(i, b, x, q, r0, r1, pos, kv, cs, window, i8, work)
