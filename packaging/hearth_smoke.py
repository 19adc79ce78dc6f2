"""Smoke-test driver for a running Hearth, from outside the app's code: HEARTH_SMOKE_TEST=1.

`install()` is called before Hearth's own `main()` (by the bundle's runtime hook, or by
packaging/smoke/sitecustomize.py for an unbundled run). It creates the QApplication that `main()`
then reuses, and polls every 10 ms. Once the main window is shown and exposed it types a message
into `messageInput`, clicks `sendButton`, follows the reply in `messageView`'s model (through the
model's public role names: content, role, streaming, error), prints it, closes the window and lets
`main()` return. Only object names and Qt's public API are used: nothing in app/ knows about this.

Events go to stdout, one line each: `HEARTH_SMOKE <event> <json>`, every one with `t` (time.time()):
    window        the main window is shown, exposed and the event loop runs
    model_ready   the window's modelReady signal: the model finished loading {"load_s", "adapter", "path"}
    sent          the message was typed and Send clicked
    first_token   the reply's first text appeared in the message view
    reply         the reply ended: {"text", "error"}
    where         then, where the code ran from: {"app" (app/'s folder), "engine_sources" (hash)}
    timeout       HEARTH_SMOKE_TIMEOUT seconds (default 180) passed first: exit status 3
Exit status: 0 after a reply without error, 1 after an error, 3 on timeout.

HEARTH_SMOKE_MESSAGE sets the message (default: "Say hello."). HEARTH_SMOKE_STOP=1 clicks `stopButton`
at the first token (benchmarks: the reply ends there, as if the user pressed Stop).
"""

from __future__ import annotations

import json
import os
import sys
import time

_driver = None


def emit(event: str, **kw) -> None:
    kw.setdefault("t", time.time())
    print("HEARTH_SMOKE", event, json.dumps(kw), flush=True)


def _where() -> dict:
    """Where the running app's code comes from: app/'s folder and the hash of engine/'s sources as
    engine.build_info sees them (in a bundle: the .py files collected beside the archive)."""
    out = {"app": os.path.dirname(sys.modules["hearth.app"].__file__)}
    try:
        from hearth.engine.build_info import hash_sources
        out["engine_sources"] = hash_sources()
    except Exception as e:  # noqa: BLE001  (information only)
        out["engine_sources"] = f"error: {e!r}"
    return out


class _Driver:
    def __init__(self, qapp):
        from PySide6.QtCore import QTimer

        self.qapp = qapp
        self.message = os.environ.get("HEARTH_SMOKE_MESSAGE", "Say hello.")
        self.stop_early = os.environ.get("HEARTH_SMOKE_STOP") == "1"
        self.deadline = time.time() + float(os.environ.get("HEARTH_SMOKE_TIMEOUT", "180"))
        self.state = "window"
        self.win = self.model = None
        self.roles: dict[str, int] = {}
        self.status = 0
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self.tick)
        self.timer.start()

    def _main_window(self):
        for w in self.qapp.topLevelWidgets():
            if w.objectName() == "mainWindow" and w.isVisible():
                h = w.windowHandle()
                if h is not None and h.isExposed():
                    return w
        return None

    def _last(self, name: str):
        m = self.model
        n = m.rowCount()
        return m.index(n - 1, 0).data(self.roles[name]) if n else None

    def tick(self) -> None:
        if time.time() > self.deadline and self.state != "closing":
            emit("timeout", state=self.state)
            self._finish(3)
            return
        if self.state == "window":
            self.win = self._main_window()
            if self.win is None:
                return
            emit("window")
            from PySide6.QtWidgets import QAbstractButton, QPlainTextEdit, QWidget
            self.win.modelReady.connect(lambda info: emit("model_ready", load_s=info.get("load_s"),
                                                                 adapter=info.get("adapter"),
                                                                 path=info.get("path")))
            self.model = self.win.findChild(QWidget, "messageView").model()
            self.roles = {bytes(v).decode(): k for k, v in self.model.roleNames().items()}
            self.win.findChild(QPlainTextEdit, "messageInput").setPlainText(self.message)
            self.win.findChild(QAbstractButton, "sendButton").click()
            emit("sent", message=self.message)
            self.state = "first_token"
        elif self.state == "first_token":
            if self._last("role") == "assistant" and (self._last("content") or self._last("error")):
                emit("first_token")
                self.state = "reply"
                if self.stop_early:
                    from PySide6.QtWidgets import QAbstractButton
                    self.win.findChild(QAbstractButton, "stopButton").click()
        if self.state == "reply":
            if self._last("role") == "assistant" and not self._last("streaming"):
                err = self._last("error") or ""
                emit("reply", text=self._last("content"), error=err)
                emit("where", **_where())  # after the timings: hashing the sources takes a while
                self._finish(1 if err else 0)

    def _finish(self, status: int) -> None:
        from PySide6.QtCore import QTimer

        self.state = "closing"
        self.status = status
        self.timer.stop()
        if self.win is not None:
            self.win.close()  # saves settings and stops the engine's worker (MainWindow.closeEvent)
        QTimer.singleShot(0, lambda: self.qapp.exit(status))


def install():
    """Create the QApplication (main() reuses it) and start polling. Idempotent."""
    global _driver
    if _driver is not None:
        return _driver
    try:
        import hearth.app  # noqa: F401  (app's PySide6 workarounds first, as in a normal start)
    except ImportError:
        pass
    from PySide6.QtWidgets import QApplication

    qapp = QApplication.instance() or QApplication(sys.argv)
    _driver = _Driver(qapp)
    return _driver
