"""The engine's exceptions. Every error the engine raises on purpose is an EngineError,
so the app can catch one type, show its message, and stay up."""


class EngineError(Exception):
    """Base class: something the user can be told about in one sentence."""


class GGUFError(EngineError):
    """A GGUF file that cannot be read: names the file and what is wrong with it."""


class UnsupportedModelError(EngineError):
    """A readable GGUF that this engine cannot run (architecture, tensor type, RoPE scaling ...)."""


class ContextFullError(EngineError):
    """The tokens asked for do not fit in the context; nothing was written. `resident`, `new` and
    `n_ctx`, where known, let a caller say it in its own words."""

    def __init__(self, message: str, resident: int | None = None, new: int | None = None,
                 n_ctx: int | None = None):
        super().__init__(message)
        self.resident, self.new, self.n_ctx = resident, new, n_ctx


class TemplateError(EngineError):
    """The model's chat template failed to render."""


class PrefixImageError(EngineError):
    """A prefix image was refused. `reason` is a short machine-readable code
    (for example 'key', 'truncated', 'checksum', 'magic', 'shape')."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class HubError(EngineError):
    """The model Hub or a download failed. `reason` is a short machine-readable code
    ('gated', 'auth', 'not_found', 'network', 'checksum', 'disk_full', 'interrupted', 'cancelled',
    'changed', 'bad_response'); the message says what happened and what to do."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
