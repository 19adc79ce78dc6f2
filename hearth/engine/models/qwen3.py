"""Qwen3: the shared decoder with an RMSNorm of q and of k per head and NeoX RoPE, no biases.

The norms are `blk.{i}.attn_q_norm.weight` / `attn_k_norm.weight` [head_dim], which Decoder reads
when present (folding the attention scale into q's); the rotation style is the registry's ("neox").
"""

from __future__ import annotations

from .decoder import Decoder


class Model(Decoder):
    pass
