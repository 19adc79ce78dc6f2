"""Hearth's inference engine. Never imports Qt."""

from .errors import (ContextFullError, EngineError, GGUFError, PrefixImageError, TemplateError,
                     UnsupportedModelError)
