"""Take the README's remote-server screenshots: the real window chatting with a real server
(`python -m engine serve` on 127.0.0.1, the default model), and the "Remote server…" dialog.

Needs an X display with nothing else on it (`Xvfb :98 -screen 0 1400x900x24 &`, `DISPLAY=:98`) and
ImageMagick's `import`. Uses temporary data/cache folders.

    DISPLAY=:98 python docs/screenshots/take_remote.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="hearth-shots-"))
    (tmp / "data").mkdir()
    (tmp / "data" / "settings.ini").write_text("[model]\nbackend=cpu\n[ui]\ntheme=light\n")
    os.environ["HEARTH_DATA_DIR"], os.environ["HEARTH_CACHE_DIR"] = str(tmp / "data"), str(tmp / "cache")
    server = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--port", "0", "--no-presets", "--ctx", "2048"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = ""
        while "Hearth server on " not in line:
            line = server.stdout.readline()
            if not line and server.poll() is not None:
                raise SystemExit("the server did not start")
        url = line.split("Hearth server on ", 1)[1].split()[0]
        return shoot(url)
    finally:
        server.kill()


def shoot(url: str) -> int:
    import httpx
    from PySide6.QtCore import QCoreApplication, QEventLoop
    from PySide6.QtWidgets import QApplication

    from app.main import create_window

    app = QApplication(sys.argv[:1])  # noqa: F841  (kept alive)

    def spin(pred=lambda: False, seconds=600.0):
        end = time.monotonic() + seconds
        while not pred() and time.monotonic() < end:
            QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
            time.sleep(0.005)

    def shot(name, widget=None):
        spin(seconds=0.8)
        out = HERE / f"{name}.png"
        subprocess.run(["import", "-window", "root", str(out)], check=True)
        if widget is not None:   # crop to the widget's frame
            g = widget.frameGeometry()
            subprocess.run(["convert", str(out), "-crop", f"{g.width()}x{g.height()}+{g.x()}+{g.y()}", "+repage",
                            str(out)], check=True)
        print("wrote", out)

    w = create_window()
    w.resize(1400, 900)
    w.move(0, 0)
    w.show()
    ready = []
    w.modelReady.connect(ready.append)
    spin(lambda: ready)
    spin(lambda: not w.client.busy)
    model = httpx.get(url + "/models").json()["data"][0]["id"]
    w.remote.use(url, "", model)
    spin(lambda: len(ready) > 1)
    spin(lambda: not w.client.busy)

    def ask(text, max_tokens):
        p = w.current_preset()
        p.sampling.update({"max_tokens": max_tokens, "temperature": 0.0})
        w.presets.update(p)
        w._show_sampling()
        done = []
        w.conversation.replyFinished.connect(done.append)
        w.messageInput.setPlainText(text)
        w.send()
        spin(lambda: done)
        w.conversation.replyFinished.disconnect(done.append)

    w.select_preset("assistant")
    w.new_chat()
    ask("Give me three tips for sleeping better.", 90)
    ask("Which of those matters most?", 60)
    w.messageView.scroll_to_bottom()
    shot("remote-server", w)
    dlg = w.remote.open_dialog(url)
    dlg.move(w.x() + 420, w.y() + 180)
    spin(lambda: dlg.modelList.count(), 30)
    shot("remote-dialog", dlg)
    dlg.reject()
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
