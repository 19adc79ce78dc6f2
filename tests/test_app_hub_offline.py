"""The Models window's Hub tab without a Hub: an endpoint where nothing listens and a server that
accepts connections but never answers both give "cannot reach the Hugging Face Hub (no network?)"
within the probe's few seconds, with the busy bar and Cancel shown while it waits; Cancel drops
the wait at once."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from hearth.app.library.models_window import ModelsWindow
from hearth.engine.library.registry import ModelRegistry
from hub_fixtures import _no_hf_login  # noqa: F401
from mcp_fixtures import free_port


SILENT = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def silent_server():
    """A process whose socket takes connections into its backlog and never answers a byte."""
    p = subprocess.Popen([sys.executable, "-c", SILENT, "60"], stdout=subprocess.PIPE, text=True)
    yield f"http://127.0.0.1:{int(p.stdout.readline())}"
    p.kill()
    p.wait()


def window(qtbot, tmp_path, endpoint) -> ModelsWindow:
    r = ModelRegistry()
    r.set_models_dir(tmp_path / "models")
    w = ModelsWindow(r, endpoint=endpoint, available=10**12)
    w.tasks.reach_timeout_s = 1.0        # the silent server's wait; the app waits 5 s
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.mark.parametrize("where", ["nothing listens", "never answers"])
def test_a_search_without_a_hub_says_so_with_a_busy_bar_and_cancel(qtbot, tmp_path, silent_server, where):
    endpoint = f"http://127.0.0.1:{free_port()}" if where == "nothing listens" else silent_server
    w = window(qtbot, tmp_path, endpoint)
    qtbot.keyClicks(w.hub.query, "llama")
    qtbot.keyClick(w.hub.query, Qt.Key.Key_Return)
    assert w.hub.busy.isVisible() and w.hub.cancel_button.isVisible()
    assert w.hub.status.text() == "Searching for “llama”…"
    qtbot.waitUntil(lambda: "no network?" in w.hub.status.text(), timeout=15_000)
    assert w.hub.status.text().startswith("Cannot reach the Hugging Face Hub (no network?)")
    assert not w.hub.busy.isVisible() and not w.hub.cancel_button.isVisible()
    w.shutdown()


def test_cancel_stops_the_wait_and_drops_the_late_answer(qtbot, tmp_path, silent_server):
    w = window(qtbot, tmp_path, silent_server)
    w.tasks.reach_timeout_s = 3.0
    qtbot.keyClicks(w.hub.query, "qwen")
    qtbot.mouseClick(w.hub.search_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(w.hub.cancel_button, Qt.MouseButton.LeftButton)
    assert w.hub.status.text() == "Search cancelled."
    assert not w.hub.busy.isVisible() and not w.hub.cancel_button.isVisible()
    qtbot.wait(4500)                      # the probe's answer arrives, and is dropped
    assert w.hub.status.text() == "Search cancelled."
    w.shutdown()
