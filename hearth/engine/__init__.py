"""Hearth's inference engine. Never imports Qt."""

from .malloc_arenas import limit_malloc_arenas

limit_malloc_arenas()   # first, before the engine (or anything importing it) starts threads

from .errors import (ContextFullError, EngineError, GGUFError, PrefixImageError, TemplateError,
                     UnsupportedModelError)
from .generation import GenerationEvent, GenerationStats
from .sampling import Sampling
from .engine import Engine

__all__ = ["Engine", "Sampling", "GenerationEvent", "GenerationStats", "EngineError", "GGUFError",
           "UnsupportedModelError", "ContextFullError", "TemplateError", "PrefixImageError"]
