"""Take the README's screenshots of the real window with real replies from the default model.

Needs an X display with nothing else on it (for example `Xvfb :99 -screen 0 1400x900x24 &` and
`DISPLAY=:99`) and ImageMagick's `import`. Uses temporary data/cache folders.

    DISPLAY=:99 python docs/screenshots/take.py
"""

from __future__ import annotations

import sys

from shot_helpers import open_window, send_and_wait, shot, spin, use_temp_dirs


def main() -> int:
    use_temp_dirs()
    w, _ready = open_window()

    def ask(text, preset, max_tokens):
        w.select_preset(preset)
        p = w.current_preset()
        p.sampling.update({"max_tokens": max_tokens, "temperature": 0.0})
        w.presets.update(p)
        w._show_sampling()
        spin(lambda: not w.client.busy)
        send_and_wait(w, text)

    w.new_chat()
    ask("Give me three tips for sleeping better.", "assistant", 90)
    w.new_chat()
    ask("What is the boiling point of water at sea level?", "precise", 30)
    w.new_chat()
    ask("Write a Python function that checks whether a word is a palindrome, and explain it briefly.",
        "coder", 200)
    ask("How would I make it ignore upper and lower case?", "coder", 120)
    w.messageInput.setPlainText("")
    shot("main-light")
    w.set_theme("dark")
    shot("main-dark")
    w.set_theme("light")
    dlg = w.open_preset_manager()
    dlg.select("tools")
    dlg.resize(1100, 700)
    dlg.move(150, 100)
    shot("preset-manager", dlg)
    dlg.close()
    panel = w.open_cache_panel()
    listed = []
    panel.client.worker.cacheListed.connect(listed.append)
    spin(lambda: listed, 30)
    panel.resize(820, 420)
    panel.move(290, 240)
    shot("cache-panel", panel)
    panel.close()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
