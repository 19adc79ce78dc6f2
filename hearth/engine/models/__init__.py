"""Forward passes, keyed by architecture.

All four supported families run through one `Decoder` (see `decoder.py` for why); the registry
is kept so a genuinely different architecture can get its own module without touching callers.
"""

from __future__ import annotations

from ..config import ModelConfig
from .decoder import Decoder
from .gemma4 import Gemma4
from .gpt_oss import GptOss
from .qwen3moe import Qwen3Moe
from .qwen35 import Qwen35
from .qwen35moe import Qwen35Moe

REGISTRY = {"llama": Decoder, "qwen2": Decoder, "qwen3": Decoder, "gemma3": Decoder,
            "qwen3moe": Qwen3Moe, "gpt-oss": GptOss,
            "qwen35": Qwen35, "qwen35moe": Qwen35Moe, "gemma4": Gemma4}


def build_model(cfg: ModelConfig, g):
    return REGISTRY[cfg.arch](cfg, g)
