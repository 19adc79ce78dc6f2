"""The local models: every GGUF in the models folder and every file opened from disk, with their
facts and last use; remove from the list, delete from disk.

File `<data dir>/models.json`, version 1:
    {"version": 1, "models_dir": "<path>" | null,
     "entries": {"<absolute path>": {"source": "folder" | "opened" | "downloaded", "repo": "owner/name" | null,
                                     "last_used": <unix time> | null}},
     "hidden": ["<absolute path>", ...],       # removed from the list, still on disk
     "facts": {"<absolute path>": {"mtime_ns": int, "size": int, "facts": {...ModelFacts}}}}
Facts are cached by (size, mtime) so listing does not open every file each time. A registry file
that cannot be read is set aside as `.bad` and rebuilt by scanning: the models are the files.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import EngineError, GGUFError
from ..paths import data_dir
from .file_names import split_part
from .json_file import read_versioned, write_json
from .model_facts import ModelFacts, read_facts, unreadable_facts
from .split_gguf import part_paths

log = logging.getLogger(__name__)

REGISTRY_VERSION = 1
MAX_SCAN = 5_000  # files looked at in the models folder; a folder with more is not a models folder
SOURCES = ("folder", "opened", "downloaded")


def default_models_dir() -> Path:
    return data_dir() / "models"


@dataclass(frozen=True)
class LocalModel:
    path: Path
    facts: ModelFacts
    source: str
    repo_id: str | None
    last_used: float | None

    @property
    def in_models_dir(self) -> bool:
        return self.source != "opened"


def _key(path: str | Path) -> str:
    return str(Path(path).expanduser().resolve())


class ModelRegistry:
    def __init__(self, file: Path | None = None):
        self.file = Path(file) if file else data_dir() / "models.json"
        self._lock = threading.RLock()
        self._unsaved = False
        d = self._load()
        self._models_dir: str | None = d.get("models_dir")
        self._entries: dict[str, dict] = d.get("entries", {})
        self._hidden: set[str] = set(d.get("hidden", []))
        self._facts: dict[str, dict] = d.get("facts", {})

    # --- the file
    def _load(self) -> dict:
        d = read_versioned(self.file, REGISTRY_VERSION) or {}
        return d if isinstance(d.get("entries", {}), dict) else {}

    def _save(self) -> None:
        """Write the file; a data folder that takes no writes (read-only) keeps the registry in memory."""
        try:
            write_json(self.file, {"version": REGISTRY_VERSION, "models_dir": self._models_dir,
                                   "entries": self._entries, "hidden": sorted(self._hidden), "facts": self._facts})
        except OSError as e:
            if not self._unsaved:
                log.warning("%s cannot be written (%s): the model list is kept until Hearth closes",
                            self.file, e.strerror or e)
            self._unsaved = True

    # --- the models folder
    @property
    def models_dir(self) -> Path:
        return Path(self._models_dir) if self._models_dir else default_models_dir()

    def set_models_dir(self, folder: Path | None) -> Path:
        """Use `folder` for downloads and listing (None: the default in the data directory)."""
        with self._lock:
            if folder is not None:
                folder = Path(folder).expanduser().resolve()
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise EngineError(f"{folder}: cannot be the models folder ({e.strerror or e})") from e
                if not os.access(folder, os.W_OK):
                    raise EngineError(f"{folder}: cannot be the models folder (not writable)")
            self._models_dir = str(folder) if folder else None
            self._save()
            return self.models_dir

    def _folder_files(self) -> list[Path]:
        root = self.models_dir
        if not root.is_dir():
            return []
        out = []
        for i, p in enumerate(root.rglob("*.gguf")):
            if i >= MAX_SCAN:
                break
            part = split_part(p.name)
            if part is not None and part.number != 1:
                continue  # a split model is listed once, by its first part
            if p.is_file():
                out.append(p)
        return sorted(out)

    # --- facts
    def facts(self, path: Path) -> ModelFacts:
        k = _key(path)
        try:
            st = path.stat()
        except OSError as e:
            return unreadable_facts(path, e)
        cached = self._facts.get(k)
        if cached and cached.get("mtime_ns") == st.st_mtime_ns and cached.get("size") == st.st_size:
            try:
                return ModelFacts.from_json(cached["facts"])
            except (TypeError, KeyError):
                pass
        try:
            facts = read_facts(path)
        except GGUFError as e:
            facts = unreadable_facts(path, e)
        self._facts[k] = {"mtime_ns": st.st_mtime_ns, "size": st.st_size, "facts": facts.to_json()}
        return facts

    # --- the list
    def models(self) -> list[LocalModel]:
        """Every listed model: the models folder's (less those removed from the list) and the
        opened ones still on disk, most recently used first."""
        with self._lock:
            seen: dict[str, LocalModel] = {}
            for p in self._folder_files():
                k = _key(p)
                if k in self._hidden:
                    continue
                e = self._entries.get(k, {})
                src = e.get("source") if e.get("source") in ("folder", "downloaded") else "folder"
                seen[k] = LocalModel(Path(k), self.facts(Path(k)), src, e.get("repo"), e.get("last_used"))
            for k, e in self._entries.items():
                if k in seen or k in self._hidden or e.get("source") != "opened" or not Path(k).is_file():
                    continue
                seen[k] = LocalModel(Path(k), self.facts(Path(k)), "opened", e.get("repo"), e.get("last_used"))
            live = set(seen) | set(self._entries)
            self._facts = {k: v for k, v in self._facts.items() if k in live}
            self._save()
            return sorted(seen.values(), key=lambda m: (-(m.last_used or 0), m.path.name.lower()))

    def add_opened(self, path: Path) -> LocalModel:
        """A file the user opened from disk joins the list (and leaves the removed ones)."""
        return self._add(path, "opened", None)

    def add_downloaded(self, path: Path, repo_id: str) -> LocalModel:
        return self._add(path, "downloaded", repo_id)

    def _add(self, path: Path, source: str, repo_id: str | None) -> LocalModel:
        with self._lock:
            k = _key(path)
            if not Path(k).is_file():
                raise EngineError(f"{Path(path).name}: no such file")
            e = self._entries.setdefault(k, {"source": source, "repo": repo_id, "last_used": None})
            if source != "opened" or e.get("source") not in ("folder", "downloaded"):
                e["source"] = source
            e["repo"] = repo_id or e.get("repo")
            self._hidden.discard(k)
            facts = self.facts(Path(k))
            self._save()
            return LocalModel(Path(k), facts, e["source"], e["repo"], e.get("last_used"))

    def mark_used(self, path: Path, when: float | None = None) -> None:
        with self._lock:
            k = _key(path)
            e = self._entries.setdefault(k, {"source": "opened", "repo": None, "last_used": None})
            e["last_used"] = time.time() if when is None else when
            self._hidden.discard(k)
            self._save()

    def remove(self, path: Path) -> None:
        """Off the list; the file stays on disk (a models-folder file stays hidden until opened again)."""
        with self._lock:
            k = _key(path)
            self._entries.pop(k, None)
            if Path(k).is_file() and Path(k).is_relative_to(self.models_dir.resolve()):
                self._hidden.add(k)
            self._facts.pop(k, None)
            self._save()

    def delete(self, path: Path) -> None:
        """Delete the model file (all parts of a split one) and take it off the list. Empty
        folders it leaves inside the models folder go too."""
        with self._lock:
            p = Path(_key(path))
            files = [p]
            part = split_part(p.name)
            if part is not None:
                files = part_paths(p)
            try:
                for f in files:
                    f.unlink(missing_ok=True)
            except OSError as e:
                raise EngineError(f"{p.name}: cannot delete ({e.strerror or e})") from e
            self._entries.pop(str(p), None)
            self._hidden.discard(str(p))
            self._facts.pop(str(p), None)
            root = self.models_dir.resolve()
            parent = p.parent
            while parent != root and parent.is_relative_to(root):
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    break
                parent = parent.parent
            self._save()
