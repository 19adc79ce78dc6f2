"""The "…" of a reply that has no text yet, which after a second says what it waits for and for how
long ("waiting for the server… 12 s"), so that a slow first token shows the app is alive."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel

TICK_MS = 1000


class WaitingLabel(QLabel):
    def __init__(self, parent=None):
        super().__init__("…", parent)
        self.setObjectName("typingIndicator")
        self.what = ""            # "waiting for the server"; "" keeps the plain "…"
        self._since = 0.0
        self._timer = QTimer(self, interval=TICK_MS)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._since = time.monotonic()
        self._show("…", False)
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        self._show("…", False)

    def _tick(self) -> None:
        n = int(time.monotonic() - self._since)
        if self.what and n >= 1:
            self._show(f"{self.what}… {n} s", True)

    def _show(self, text: str, waiting: bool) -> None:
        self.setText(text)
        if self.property("waiting") != waiting:
            self.setProperty("waiting", waiting)   # the stylesheet draws the sentence smaller than "…"
            self.style().unpolish(self)
            self.style().polish(self)
