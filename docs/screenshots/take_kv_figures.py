"""Take the Models window's memory figures with a float16 KV cache: the real window switched to
float16 from its menu, its Models window against a local Hub on 127.0.0.1 (take_models.py's
repositories), the default model's file selected and its header read.

    Xvfb :98 -screen 0 1400x900x24 &  DISPLAY=:98 python docs/screenshots/take_kv_figures.py
"""

from __future__ import annotations

import os
import sys
import tempfile

from shot_helpers import open_window, shot, spin, use_temp_dirs
from take_models import repos


def main() -> int:
    use_temp_dirs()
    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hearth-shots-hf-")
    os.environ.pop("HF_TOKEN", None)
    from hub_server import LocalHub

    with LocalHub(repos()) as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint
        main_window, ready = open_window()
        main_window.kvDtypeActions["f16"].trigger()
        spin(lambda: len(ready) > 1)
        spin(lambda: not main_window.client.busy)
        main_window.modelsButton.click()
        w = main_window.library.window
        w.resize(1100, 720)
        w.move(0, 0)
        w.hub.query.setText("GGUF")
        w.hub.search()
        spin(lambda: w.hub.repos.rowCount() > 0, 20)
        w.hub.repos.selectRow(0)
        spin(lambda: w.hub.files.rowCount() > 0, 20)
        w.hub.files.selectRow(0)
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
