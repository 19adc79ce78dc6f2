"""What the screenshot scripts share: temporary data/cache folders, the real window with its model
loaded, waiting on the Qt event loop, and capturing the X display (ImageMagick's `import`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

_app = None   # the QApplication, kept alive for the whole script


def use_temp_dirs() -> Path:
    """Point HEARTH_DATA_DIR and HEARTH_CACHE_DIR at new temporary folders (CPU backend, light theme)."""
    tmp = Path(tempfile.mkdtemp(prefix="hearth-shots-"))
    (tmp / "data").mkdir()
    (tmp / "data" / "settings.ini").write_text("[model]\nbackend=cpu\n[ui]\ntheme=light\n")
    os.environ["HEARTH_DATA_DIR"], os.environ["HEARTH_CACHE_DIR"] = str(tmp / "data"), str(tmp / "cache")
    return tmp


def spin(pred=lambda: False, seconds=600.0):
    """Run the event loop until `pred()` is true or `seconds` have passed."""
    from PySide6.QtCore import QCoreApplication, QEventLoop
    end = time.monotonic() + seconds
    while not pred() and time.monotonic() < end:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.005)


def send_and_wait(w, text):
    """Type `text` into the window's message box, send it and wait for the reply to finish."""
    done = []
    c = w.conversation.replyFinished.connect(done.append)
    w.messageInput.setPlainText(text)
    w.send()
    spin(lambda: done)
    w.conversation.replyFinished.disconnect(c)


def shot(name, widget=None):
    """Capture the display to docs/screenshots/<name>.png, cropped to `widget`'s frame if given."""
    spin(seconds=0.8)
    out = HERE / f"{name}.png"
    if shutil.which("import") is None:      # no ImageMagick: Qt draws the widget itself
        if widget is None:
            raise RuntimeError("shot() needs a widget where ImageMagick's `import` is missing")
        widget.window().grab().save(str(out)) if widget.isWindow() else widget.grab().save(str(out))
        print("wrote", out)
        return
    subprocess.run(["import", "-window", "root", str(out)], check=True)
    if widget is not None:   # crop to the widget's frame
        g = widget.frameGeometry()
        subprocess.run(["convert", str(out), "-crop", f"{g.width()}x{g.height()}+{g.x()}+{g.y()}", "+repage",
                        str(out)], check=True)
    print("wrote", out)


def open_window():
    """(window, ready): the main window at 1400x900 in the corner, shown once its model has loaded.
    `ready` is the list the window's modelReady signal appends to (later loads add to it)."""
    global _app
    from PySide6.QtWidgets import QApplication

    from hearth.app.main import create_window

    _app = QApplication(sys.argv[:1])
    w = create_window()
    w.resize(1400, 900)
    w.move(0, 0)
    w.show()
    ready = []
    w.modelReady.connect(ready.append)
    spin(lambda: ready)
    spin(lambda: not w.client.busy)
    return w, ready
