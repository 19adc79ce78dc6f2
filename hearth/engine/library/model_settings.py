"""Per-model settings, remembered between runs: context length, backend and sampling.

One owner for both the model library and the context controls: the context length a model runs
at (bounded by its trained length), the backend it last ran on, and the sampling a chat starts
with, which is Hearth's defaults, then the GGUF's own `general.sampling.*` defaults, then what the
user changed for this model, each layer overriding the one before.

File `<data dir>/model_settings.json`, version 1:
    {"version": 1, "models": {"<absolute path>": {"n_ctx": 8192 | null, "backend": "cpu" | "gpu" |
     "auto" | null, "sampling": {"temperature": 0.6, ...}}}}
A model is known by its absolute path: moving a file forgets its settings (the library would not
find the file either). A file of another version, or unreadable, is set aside as `.bad` and
the settings start empty: nothing in it is needed to run a model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..errors import EngineError
from ..paths import data_dir
from ..sampling import Sampling
from .json_file import read_versioned, write_json

SETTINGS_VERSION = 1
BACKENDS = ("auto", "cpu", "gpu")
_SAMPLING_FIELDS = {f.name: f.type for f in fields(Sampling)}


@dataclass(frozen=True)
class ModelSettings:
    n_ctx: int | None = None                      # None: the app's default context length
    backend: str | None = None                    # None: the app's default backend
    sampling: dict = field(default_factory=dict)  # Sampling field -> value the user set


def _key(path: str | Path) -> str:
    return str(Path(path).expanduser().resolve())


def check_n_ctx(n_ctx: int, trained: int | None) -> int:
    if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx < 16:
        raise EngineError(f"context length {n_ctx!r} must be a whole number of at least 16 tokens")
    if trained and n_ctx > trained:
        raise EngineError(f"context length {n_ctx} is more than the model was trained for ({trained})")
    return n_ctx


def _clean_sampling(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if k not in _SAMPLING_FIELDS or k == "seed" or isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[k] = int(v) if k in ("top_k", "repeat_last_n") else float(v)
    return out


class ModelSettingsStore:
    def __init__(self, file: Path | None = None):
        self.file = Path(file) if file else data_dir() / "model_settings.json"
        self._lock = threading.Lock()
        self._models: dict[str, ModelSettings] = self._load()

    def _load(self) -> dict[str, ModelSettings]:
        d = read_versioned(self.file, SETTINGS_VERSION)
        out = {}
        for path, m in ((d or {}).get("models") or {}).items():
            if not isinstance(m, dict):
                continue
            n_ctx, backend = m.get("n_ctx"), m.get("backend")
            out[path] = ModelSettings(
                n_ctx=n_ctx if isinstance(n_ctx, int) and n_ctx >= 16 else None,
                backend=backend if backend in BACKENDS else None,
                sampling=_clean_sampling(m.get("sampling") or {}))
        return out

    def _save(self) -> None:
        write_json(self.file, {"version": SETTINGS_VERSION, "models": {
            p: {"n_ctx": s.n_ctx, "backend": s.backend, "sampling": s.sampling} for p, s in self._models.items()}})

    def get(self, path: str | Path) -> ModelSettings:
        with self._lock:
            return self._models.get(_key(path), ModelSettings())

    def _update(self, path, **changes) -> ModelSettings:
        with self._lock:
            k = _key(path)
            s = replace(self._models.get(k, ModelSettings()), **changes)
            self._models[k] = s
            self._save()
            return s

    def set_n_ctx(self, path, n_ctx: int | None, trained: int | None = None) -> ModelSettings:
        return self._update(path, n_ctx=None if n_ctx is None else check_n_ctx(n_ctx, trained))

    def set_backend(self, path, backend: str | None) -> ModelSettings:
        if backend is not None and backend not in BACKENDS:
            raise EngineError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
        return self._update(path, backend=backend)

    def set_sampling(self, path, sampling: Sampling | dict, gguf_defaults: dict | None = None) -> ModelSettings:
        """Remember what differs from Hearth's defaults overlaid with the GGUF's own."""
        values = sampling if isinstance(sampling, dict) else {f: getattr(sampling, f) for f in _SAMPLING_FIELDS}
        base = self._base(gguf_defaults)
        changed = {k: v for k, v in _clean_sampling(values).items() if getattr(base, k) != v}
        return self._update(path, sampling=changed)

    def forget(self, path) -> None:
        with self._lock:
            if self._models.pop(_key(path), None) is not None:
                self._save()

    @staticmethod
    def _base(gguf_defaults: dict | None) -> Sampling:
        return replace(Sampling(), **_clean_sampling(gguf_defaults or {}))

    def sampling_for(self, path, gguf_defaults: dict | None = None) -> Sampling:
        """Hearth's defaults <- the GGUF's general.sampling.* (`ModelFacts.sampling`) <- the user's."""
        return replace(self._base(gguf_defaults), **self.get(path).sampling)
