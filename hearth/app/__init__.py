"""Hearth's desktop window (PySide6). The engine (`engine/`) never imports this package.

    main.py            entry points; window.py: MainWindow assembles the parts and connects them
    window_parts.py    the window's top bar, centre, menus, status line and panel fit
    worker.py          the engine worker: one QObject on one QThread does all model work
    chat_source.py     where a chat's text comes from (ChatBackend; Qt-free); chat_context.py
                       a local engine's chat contexts on disk
    chat/ library/ presets/ tools/ servers/ store/   the subsystems (each __init__ says what it
                       owns, the signals it emits and what it may import)
    theme.py, qtfix.py, gui_gc.py, single_instance.py, about.py, elided_label.py   window-wide

The modules whose docstring says "Qt-free" (the stores, the chat sources, the markdown splitter)
import no Qt and can be used where PySide6 is not installed; tests/test_layout.py checks it.
"""

try:
    from . import qtfix  # noqa: F401  (before any signal is emitted: see qtfix's docstring)
except ModuleNotFoundError as e:  # no PySide6, so no signal can be emitted: nothing to fix
    if (e.name or "").split(".")[0] != "PySide6":
        raise
