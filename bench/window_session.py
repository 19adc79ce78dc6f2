"""The set-up the window benchmarks share: temporary data/cache folders with a chosen backend (set
before Hearth reads its folders), offscreen unless DISPLAY is set, and a wait that keeps the event loop
running (the benchmarks drive the real window from the GUI thread, so they must never block it)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path


def isolated_folders(backend: str = "cpu") -> Path:
    """A fresh temporary root whose data/ and cache/ Hearth will use; call before importing the app."""
    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    tmp = Path(tempfile.mkdtemp(prefix="hearth-bench-"))
    (tmp / "data").mkdir()
    (tmp / "data" / "settings.ini").write_text(f"[model]\nbackend={backend}\n")
    os.environ["HEARTH_DATA_DIR"], os.environ["HEARTH_CACHE_DIR"] = str(tmp / "data"), str(tmp / "cache")
    return tmp


def spin(pred, timeout: float = 900.0) -> None:
    """Run the event loop until `pred()` is true (TimeoutError after `timeout` seconds)."""
    from PySide6.QtCore import QCoreApplication, QEventLoop

    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.002)
