"""Qwen2 (and Qwen2.5): the shared decoder with biases on q, k and v and NeoX RoPE.

The biases are `blk.{i}.attn_{q,k,v}.bias`, which Decoder reads when present; the rotation style
is the registry's ("neox").
"""

from __future__ import annotations

from .decoder import Decoder


class Model(Decoder):
    pass
