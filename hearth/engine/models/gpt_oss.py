"""gpt-oss (gpt-oss-20b, -120b; llama.cpp's LLM_ARCH_OPENAI_MOE, arch name "gpt-oss").

Per layer: RMSNorm; q/k/v with biases; NeoX RoPE with YaRN scaling (every layer, the windowed ones
too: one base, one scaling); attention with one sink logit per head (attention_sinks.py), over a
sliding window on even layers and the whole past on odd ones; the output projection with a bias;
then RMSNorm by `post_attention_norm` (the FFN's pre-norm, despite its name) and the MoE FFN: top k
of the router's logits plus its bias, a softmax over those k, experts with biases and OpenAI's
clamped SwiGLU (moe.swiglu_oai), experts stored in MXFP4. The output matrix is separate.
"""

from __future__ import annotations

from .moe_config import config_fields  # noqa: F401  (the ModelConfig fields of this architecture)
from .moe_decoder import MoeDecoder


class GptOss(MoeDecoder):
    FFN_NORM = "post_attention_norm.weight"

    def __init__(self, cfg, g):
        super().__init__(cfg, g)
        # Windowed layers rotate exactly as full ones (the dense decoder gives them gemma3's own base).
        self.rope_swa = self.rope
