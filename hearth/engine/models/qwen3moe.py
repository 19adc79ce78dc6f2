"""qwen3moe (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3's attention (q/k RMS norms per head, NeoX
RoPE, no biases) and a mixture-of-experts FFN in every layer: a softmax over all experts' router
logits, the top k, their weights renormalised to sum 1, SiLU-gated experts, no shared expert
(llama.cpp's LLM_ARCH_QWEN3MOE; the routing is in moe.py, the flags in engine/models/moe_config.py)."""

from __future__ import annotations

from .moe_config import config_fields  # noqa: F401  (the ModelConfig fields of this architecture)
from .moe_decoder import MoeDecoder


class Qwen3Moe(MoeDecoder):
    FFN_NORM = "ffn_norm.weight"
