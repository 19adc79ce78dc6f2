"""Forward passes, keyed by architecture.

All four supported families run through one `Decoder` (see `decoder.py` for why); the registry
is kept so a genuinely different architecture can get its own module without touching callers.
"""

from __future__ import annotations

from ..config import ModelConfig
from .decoder import Decoder
from .gpt_oss import GptOss
from .mistral3 import Mistral3
from .phi3 import Phi3
from .qwen3moe import Qwen3Moe
from .smollm3 import SmolLM3

REGISTRY = {"llama": Decoder, "qwen2": Decoder, "qwen3": Decoder, "gemma3": Decoder,
            "qwen3moe": Qwen3Moe, "gpt-oss": GptOss,
            "smollm3": SmolLM3, "phi3": Phi3, "mistral3": Mistral3}


def build_model(cfg: ModelConfig, g) -> Decoder:
    return REGISTRY[cfg.arch](cfg, g)
