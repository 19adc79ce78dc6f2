"""The main window at its minimum size (760×520), at 1280 px and at 1920×1080, light and dark, with a
reply (a poem: its line breaks) and keyboard focus on a message's Copy button (README: "At any size").

    DISPLAY=:99 python docs/screenshots/take_sizes.py
"""

from __future__ import annotations

import sys

from shot_helpers import open_window, send_and_wait, shot, spin, use_temp_dirs


def main() -> int:
    use_temp_dirs()
    w, _ready = open_window()
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QWidget

    from hearth.app.window import MIN_SIZE

    def ask(text, max_tokens):
        p = w.current_preset()
        p.sampling.update({"max_tokens": max_tokens, "temperature": 0.0})
        w.presets.update(p)
        spin(lambda: not w.client.busy)
        send_and_wait(w, text)

    w.new_chat()
    ask("Give me three tips for sleeping better.", 60)
    ask("Write a short poem about the sea, one line per verse.", 60)
    w.messageInput.setPlainText("")
    for size, tag in (((1280, 820), "1280"), ((1920, 1080), "1920"), ((MIN_SIZE.width(), MIN_SIZE.height()), "min")):
        w.resize(*size)
        w.move(0, 0)
        spin(seconds=0.5)
        w.activateWindow()
        w.messageView.findChildren(QWidget, "copyMessageButton")[-1].setFocus(Qt.FocusReason.TabFocusReason)
        for theme in ("light", "dark"):
            w.set_theme(theme)
            shot(f"window-{tag}-{theme}", w)
    w.set_theme("light")
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
