"""Take the README's remote-server screenshots: the real window chatting with a real server
(`python -m hearth.engine serve` on 127.0.0.1, the default model), and the "Remote server…" dialog.

Needs an X display with nothing else on it (`Xvfb :98 -screen 0 1400x900x24 &`, `DISPLAY=:98`) and
ImageMagick's `import`. Uses temporary data/cache folders.

    DISPLAY=:98 python docs/screenshots/take_remote.py
"""

from __future__ import annotations

import subprocess
import sys

from shot_helpers import ROOT, open_window, send_and_wait, shot, spin, use_temp_dirs


def main() -> int:
    use_temp_dirs()
    server = subprocess.Popen([sys.executable, "-m", "hearth.engine", "serve", "--port", "0", "--no-presets", "--ctx", "2048"],
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

    w, ready = open_window()
    model = httpx.get(url + "/models").json()["data"][0]["id"]
    w.remote.use(url, "", model)
    spin(lambda: len(ready) > 1)
    spin(lambda: not w.client.busy)

    def ask(text, max_tokens):
        p = w.current_preset()
        p.sampling.update({"max_tokens": max_tokens, "temperature": 0.0})
        w.presets.update(p)
        w._show_sampling()
        send_and_wait(w, text)

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
