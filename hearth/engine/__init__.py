"""Hearth's inference engine. Never imports Qt."""

from .errors import (ContextFullError, EngineError, GGUFError, PrefixImageError, TemplateError,
                     UnsupportedModelError)
from .generation import GenerationEvent, GenerationStats
from .sampling import Sampling
from .engine import Engine

__all__ = ["Engine", "Sampling", "GenerationEvent", "GenerationStats", "EngineError", "GGUFError",
           "UnsupportedModelError", "ContextFullError", "TemplateError", "PrefixImageError"]
