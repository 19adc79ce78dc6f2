"""Size and fit of a model on disk for the model picker: "742 MB · fits" (Qt-free).

The fit comes from engine.library.fit (whose thresholds are engine.memory's, the rule the engine's
load check applies), at the context length the model would load with. Each file's facts are read
once per (path, size, mtime): the picker refreshes often and a header read costs milliseconds.
"""

from __future__ import annotations

import os

from hearth.engine.errors import EngineError
from hearth.engine.library.fit import Fit, fit_for
from hearth.engine.library.model_facts import read_facts
from hearth.engine.paths import default_model_path

from ..chat_source import human_bytes

_facts: dict[tuple[str, int, int], object] = {}


def _facts_of(path: str):
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _facts:
        _facts[key] = read_facts(path)
    return _facts[key]


def fit_line(path: str, n_ctx: int | None, kv_dtype: str = "f32") -> tuple[str, str]:
    """(short line, fit value) for the model at `path` ("" = the default model): "742 MB · fits",
    "fits"; ("", "") for what is not a local file (a remote server's model) or cannot be read."""
    if path.startswith("remote:"):
        return "", ""
    try:
        real = path or str(default_model_path())
        facts = _facts_of(real)
    except (OSError, EngineError):
        return "", ""
    fit, _needed = fit_for(facts, int(n_ctx or facts.context_length or 4096), kv_dtype=kv_dtype)
    if fit is Fit.UNKNOWN:
        return human_bytes(facts.size), ""
    return f"{human_bytes(facts.size)} · {fit.value}", fit.value
