"""Helpers for the tests that drive the real window: wait on the Qt event loop, open a window on
given data and cache directories and wait for its model to load."""

from __future__ import annotations

import os
import time
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEventLoop

from hearth.app.main import create_window


# A prompt whose greedy reply on the default model is long (~50 tokens): it spans several of the
# view's 30 ms flushes even when decoding is fast, so a test can see the text arrive in pieces.
STREAMING_PROMPT = "Write a short poem about the sea."


def wait_until(pred, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError("condition not met in time")
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.005)


def open_window(data: Path, cache: Path):
    old = {k: os.environ.get(k) for k in ("HEARTH_DATA_DIR", "HEARTH_CACHE_DIR")}
    os.environ["HEARTH_DATA_DIR"], os.environ["HEARTH_CACHE_DIR"] = str(data), str(cache)
    try:
        w = create_window()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    loaded = []
    w.modelReady.connect(loaded.append)
    w.client.worker.modelFailed.connect(loaded.append)
    w.show()
    wait_until(lambda: loaded, 120)
    assert isinstance(loaded[0], dict), f"model failed to load: {loaded[0]}"
    wait_until(lambda: not w.client.busy, 120)
    return w
