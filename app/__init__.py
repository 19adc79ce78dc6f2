"""Hearth's desktop window (PySide6). The engine (`engine/`) never imports this package."""

from . import qtfix  # noqa: F401  (before any signal is emitted: see qtfix's docstring)
