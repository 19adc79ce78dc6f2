"""The status bar after an edit of an earlier message (#29): how many tokens the resend recomputed, from
where, and why; at the minimum size and at 1400 px, light and dark, on the default model.

    Xvfb :99 -screen 0 1400x900x24 &
    DISPLAY=:99 python docs/screenshots/take_recompute.py
"""

from __future__ import annotations

import sys

from shot_helpers import open_window, send_and_wait, shot, spin, use_temp_dirs


def main() -> int:
    use_temp_dirs()
    w, _ready = open_window()
    from hearth.app.window import MIN_SIZE

    p = w.current_preset()
    p.sampling.update({"max_tokens": 40, "temperature": 0.0})
    w.presets.update(p)
    spin(lambda: not w.client.busy)

    def send(text):
        send_and_wait(w, text)
        spin(lambda: not w.client.busy)

    w.new_chat()
    send("Give me three tips for sleeping better.")
    send("And one for waking up?")
    w.edit_message(0)                     # what the message's Edit button does
    w.messageInput.setPlainText("Give me three tips for sleeping better on a plane.")
    send_text = w.messageInput.toPlainText()
    send(send_text)
    print("status:", w.statusPrefix.text())
    for size, tag in (((1400, 900), "1400"), ((MIN_SIZE.width(), MIN_SIZE.height()), "min")):
        w.resize(*size)
        w.move(0, 0)
        spin(seconds=0.5)
        for theme in ("light", "dark"):
            w.set_theme(theme)
            shot(f"recompute-{tag}-{theme}", w)
    w.set_theme("light")
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
