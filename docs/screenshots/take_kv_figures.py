"""Take the Models window's memory figures with a float16 KV cache: the real window switched to
float16 from its menu, its Models window against a local Hub on 127.0.0.1 (take_models.py's
repositories), the default model's file selected and its header read.

    Xvfb :98 -screen 0 1400x900x24 &  DISPLAY=:98 python docs/screenshots/take_kv_figures.py
"""

from __future__ import annotations

import sys

from shot_helpers import shot, spin
from take_models import hub_session, select_first_file


def main() -> int:
    with hub_session() as (_hub, main_window, ready):
        main_window.kvDtypeActions["f16"].trigger()
        spin(lambda: len(ready) > 1)
        spin(lambda: not main_window.client.busy)
        main_window.modelsButton.click()
        w = main_window.library.window
        w.resize(1100, 720)
        w.move(0, 0)
        select_first_file(w)
        spin(lambda: "float16" in w.hub.need.text(), 20)
        shot("models-kv-f16", w)
        main_window.set_theme("dark")
        w.resize(760, 560)
        spin(lambda: False, 0.5)
        shot("models-kv-f16-dark-small", w)
        main_window.set_theme("light")
        w.close()
        main_window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
