"""Python's cycle collector runs on the GUI thread only.

The collector runs in whichever thread happens to allocate when a generation's threshold is
crossed: the engine worker, a Hub search thread, a download thread. Cyclic garbage holding Qt
wrappers (a closed dialog and its slots) is then destroyed off the GUI thread, which PySide6 does
not survive (a segmentation fault inside "Garbage-collecting" on a Hub search thread was seen in
the test suite). So, as qutebrowser does, the automatic collector is switched off once a window
exists and a GUI-thread timer collects whatever generation's threshold has been crossed.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 250
_collector: "GuiCollector | None" = None


class GuiCollector(QObject):
    def __init__(self, parent: QObject):
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        self.timer = QTimer(self, interval=INTERVAL_MS)
        self.timer.timeout.connect(self.collect)
        gc.disable()
        self.timer.start()

    def collect(self) -> None:
        counts = gc.get_count()
        for gen in (2, 1, 0):
            if counts[gen] > self.thresholds[gen]:
                gc.collect(gen)
                return


def install(app: QObject) -> None:
    """Move cycle collection to `app`'s thread (the GUI thread); once per process."""
    global _collector
    if _collector is None:
        _collector = GuiCollector(app)
