"""Entry points: `create_window()` for tests and scripts, `main()` for `hearth` and `python -m hearth`."""

from __future__ import annotations

import logging
import signal
import sys

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from hearth.engine.paths import cache_dir, data_dir

from . import gui_gc
from .chat_source import LocalBackend
from .runtime_dir import ensure_runtime_dir
from .servers.remote_source import RemoteBackend, RoutingBackend
from .store.chat_store import ChatStore
from .store.preset_store import RESOURCES, PresetStore
from .store.settings import Settings
from .single_instance import SingleInstance
from .window import MainWindow


def create_window(backend=None) -> MainWindow:
    """The main window on the user's (or HEARTH_DATA_DIR's) chats and presets. A QApplication must
    exist. The model named in the settings (default: the default model) starts loading at once on
    the worker thread; `window.modelReady` says when it is ready."""
    app = QApplication.instance()
    if app is None:
        raise RuntimeError("create_window() needs a QApplication")
    app.setApplicationName("Hearth")
    app.setWindowIcon(QIcon(str(RESOURCES / "hearth.svg")))
    gui_gc.install(app)
    settings = Settings()
    if backend is None:
        cap = int(settings.get("cache/cap_gib") * (1 << 30))
        backend = RoutingBackend(LocalBackend(cache_dir() / "prefixes", cap), RemoteBackend())
    chats, notice = ChatStore.open_or_move_aside(data_dir() / "chats.sqlite3")
    presets = PresetStore(data_dir() / "presets.json")
    win = MainWindow(settings, chats, presets, backend)
    if notice or presets.notice:
        win.show_banner(" ".join(filter(None, [notice, presets.notice])), "notice")
    return win


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    ensure_runtime_dir()
    app = QApplication.instance() or QApplication(sys.argv if argv is None else argv)
    app.setApplicationDisplayName("Hearth")
    app.setDesktopFileName("hearth")
    # One window per data folder: a second start brings the first forward instead of opening a
    # second window that would rewrite the same presets and purge the same deleted chats.
    guard = SingleInstance(data_dir())
    if not guard.claim():
        print(f"Hearth is already running on {data_dir()}; its window was brought forward.", file=sys.stderr)
        return 0
    win = create_window()
    guard.activated.connect(lambda: _bring_forward(win))
    win.show()
    # Ctrl+C in the terminal or a SIGTERM closes the window the normal way (settings saved, the
    # engine thread stopped, a reply in progress kept). Python runs signal handlers only between
    # bytecodes, so a timer wakes the interpreter now and then.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: win.close())
    wake = QTimer(interval=250)
    wake.timeout.connect(lambda: None)
    wake.start()
    try:
        return app.exec()
    finally:
        guard.release()


def _bring_forward(win: MainWindow) -> None:
    logging.getLogger("hearth.app").info("Hearth was started again: bringing the window forward")
    if win.isMinimized():
        win.showNormal()
    win.show()
    win.raise_()
    win.activateWindow()
