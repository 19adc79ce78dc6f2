"""Take docs/screenshots/model-picker-light.png and -dark.png: the model picker's open list, each local
model with its size and whether it fits this machine at the context it would load with.

The list holds the default model and whatever GGUF files are named on the command line (random-weight
files of real shapes from ../shared/tools/make_big_gguf.py serve: only their size and shape matter).

    Xvfb :99 -screen 0 1400x900x24 &
    DISPLAY=:99 python docs/screenshots/take_picker.py /path/a.gguf /path/b.gguf ...
"""

from __future__ import annotations

import sys

from shot_helpers import open_window, shot, spin, use_temp_dirs


def main(paths: list[str]) -> int:
    use_temp_dirs()
    w, _ready = open_window()
    w.resize(1100, 640)
    for p in paths:
        w.picker.add_model(p)
    for theme in ("light", "dark"):
        w.set_theme(theme)
        spin(seconds=0.5)
        w.picker.combo.showPopup()
        shot(f"model-picker-{theme}", w)
        w.picker.combo.hidePopup()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
