"""Hearth's desktop window (PySide6). The engine (`engine/`) never imports this package.

The modules whose docstring says "Qt-free" (the stores, the chat sources, the markdown splitter)
import no Qt and can be used where PySide6 is not installed; tests/test_layout.py checks it.
"""

try:
    from . import qtfix  # noqa: F401  (before any signal is emitted: see qtfix's docstring)
except ModuleNotFoundError as e:  # no PySide6, so no signal can be emitted: nothing to fix
    if (e.name or "").split(".")[0] != "PySide6":
        raise
