"""Presets: Qt-free storage in one JSON file with a version field, written atomically.

File format (`data_dir()/presets.json`, also the export/import format):

    {
      "format": "hearth-presets",
      "version": 1,
      "presets": [
        {
          "id": "assistant",                      # stable, unique; images and chats refer to it
          "name": "Assistant",
          "system_prompt": "You are ...",
          "tools": [ {"type": "function", "function": {"name", "description", "parameters"}} ],
          "sampling": {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
                       "repeat_penalty": 1.1, "seed": -1, "max_tokens": 1024},   # seed -1: random
          "model": ""                             # preferred model path, "" = any
        }
      ]
    }

The order of `presets` is the order in the picker. A file that cannot be read (bad JSON, another
format, a newer version, an invalid preset) is never silently dropped: it is moved aside to
`presets.corrupt-<time>.json`, every preset in it that is still valid is kept, and `notice` says what
happened so the window can show it.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .tool_schema import ToolError, validate_tools

FORMAT = "hearth-presets"
VERSION = 1
RESOURCES = Path(__file__).resolve().parent.parent / "resources"

DEFAULT_SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
                    "repeat_penalty": 1.1, "seed": -1, "max_tokens": 1024}
_SAMPLING_TYPES = {"temperature": float, "top_p": float, "top_k": int, "min_p": float,
                   "repeat_penalty": float, "seed": int, "max_tokens": int}
_SAMPLING_RANGES = {"temperature": (0, 5), "top_p": (0, 1), "top_k": (0, 100000), "min_p": (0, 1),
                    "repeat_penalty": (0.5, 3), "seed": (-1, 2**31 - 1), "max_tokens": (1, 1 << 20)}


class PresetError(ValueError):
    """A preset or presets file that cannot be used; the message says which field and why."""


@dataclass
class Preset:
    id: str
    name: str
    system_prompt: str = ""
    tools: list = field(default_factory=list)
    sampling: dict = field(default_factory=lambda: dict(DEFAULT_SAMPLING))
    model: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d, where: str = "preset") -> "Preset":
        if not isinstance(d, dict):
            raise PresetError(f"{where}: expected an object")
        name = d.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PresetError(f"{where}.name: a preset needs a non-empty name")
        pid = d.get("id") or new_id()
        if not isinstance(pid, str):
            raise PresetError(f"{where}.id: must be a string")
        system = d.get("system_prompt", "")
        if not isinstance(system, str):
            raise PresetError(f"{where}.system_prompt: must be a string")
        try:
            tools = validate_tools(d.get("tools", []))
        except ToolError as e:
            raise PresetError(f"{where}.{e}") from None
        sampling = check_sampling(d.get("sampling", {}), f"{where}.sampling")
        model = d.get("model", "") or ""
        if not isinstance(model, str):
            raise PresetError(f"{where}.model: must be a path string")
        return cls(pid, name.strip(), system, tools, sampling, model)

    def copy(self) -> "Preset":
        return copy.deepcopy(self)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def check_sampling(s, where: str = "sampling") -> dict:
    if not isinstance(s, dict):
        raise PresetError(f"{where}: expected an object")
    out = dict(DEFAULT_SAMPLING)
    for k, v in s.items():
        if k not in _SAMPLING_TYPES:
            raise PresetError(f"{where}.{k}: unknown setting (known: {', '.join(_SAMPLING_TYPES)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise PresetError(f"{where}.{k}: must be a number")
        if _SAMPLING_TYPES[k] is int and v != int(v):
            raise PresetError(f"{where}.{k}: must be a whole number")
        lo, hi = _SAMPLING_RANGES[k]
        if not lo <= v <= hi:
            raise PresetError(f"{where}.{k}: {v} is outside {lo}..{hi}")
        out[k] = _SAMPLING_TYPES[k](v)
    return out


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder, fsync, rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass  # some platforms cannot fsync a directory


def dumps(presets: list[Preset]) -> str:
    return json.dumps({"format": FORMAT, "version": VERSION, "presets": [p.to_json() for p in presets]},
                      indent=2, ensure_ascii=False) + "\n"


def parse(text: str, source: str) -> tuple[list[Preset], list[str]]:
    """Presets of a file's text and the problems met. Raises PresetError when nothing is usable."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PresetError(f"{source}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PresetError(f"{source}: not a Hearth presets file (expected \"format\": \"{FORMAT}\")")
    v = doc.get("version")
    if not isinstance(v, int) or v < 1:
        raise PresetError(f"{source}: missing or invalid \"version\"")
    if v > VERSION:
        raise PresetError(f"{source}: version {v} is newer than this Hearth reads ({VERSION}); update Hearth")
    items = doc.get("presets")
    if not isinstance(items, list):
        raise PresetError(f"{source}: \"presets\" must be a list")
    out, problems, ids = [], [], set()
    for i, d in enumerate(items):
        try:
            p = Preset.from_json(d, f"presets[{i}]")
        except PresetError as e:
            problems.append(str(e))
            continue
        if p.id in ids:
            p.id = new_id()
        ids.add(p.id)
        out.append(p)
    return out, problems


class PresetStore:
    """The user's presets, in order. Every change is saved at once, atomically.

    `notice` is a sentence for the user when the file had to be moved aside at load, else "".
    """

    def __init__(self, path: str | Path, shipped: str | Path | None = None):
        self.path = Path(path)
        self.shipped = Path(shipped) if shipped else RESOURCES / "presets.json"
        self.notice = ""
        self.presets: list[Preset] = []
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            self.presets = self._shipped()
            self.save()
            return
        try:
            presets, problems = parse(self.path.read_text(encoding="utf-8"), self.path.name)
        except (PresetError, UnicodeDecodeError, OSError) as e:
            presets, problems = [], [str(e)]
        if problems:
            aside = self.path.with_name(f"presets.corrupt-{time.strftime('%Y%m%d-%H%M%S')}.json")
            os.replace(self.path, aside)
            kept = f"kept {len(presets)} preset(s) that were valid" if presets else "loaded the shipped presets"
            self.notice = (f"Your presets file could not be read fully ({problems[0]}). It was moved to "
                           f"{aside} and Hearth {kept}.")
            if not presets:
                presets = self._shipped()
            self.presets = presets
            self.save()
            return
        self.presets = presets or self._shipped()

    def _shipped(self) -> list[Preset]:
        try:
            return parse(self.shipped.read_text(encoding="utf-8"), self.shipped.name)[0]
        except (OSError, PresetError):
            return [Preset("assistant", "Assistant", "You are a helpful assistant.")]

    def save(self) -> None:
        atomic_write_text(self.path, dumps(self.presets))

    # -- queries --------------------------------------------------------------------------------------
    def get(self, pid: str) -> Preset | None:
        return next((p for p in self.presets if p.id == pid), None)

    def index(self, pid: str) -> int:
        return next((i for i, p in enumerate(self.presets) if p.id == pid), -1)

    # -- changes (each saved) -------------------------------------------------------------------------
    def add(self, preset: Preset, at: int | None = None) -> Preset:
        preset = Preset.from_json(preset.to_json())  # validates
        if self.get(preset.id):
            preset.id = new_id()
        self.presets.insert(len(self.presets) if at is None else at, preset)
        self.save()
        return preset

    def update(self, preset: Preset) -> Preset:
        checked = Preset.from_json(preset.to_json())
        i = self.index(preset.id)
        if i < 0:
            raise PresetError(f"no preset with id {preset.id}")
        self.presets[i] = checked
        self.save()
        return checked

    def duplicate(self, pid: str) -> Preset:
        src = self.get(pid)
        p = src.copy()
        p.id, p.name = new_id(), f"{src.name} (copy)"
        return self.add(p, self.index(pid) + 1)

    def remove(self, pid: str) -> None:
        self.presets = [p for p in self.presets if p.id != pid]
        self.save()

    def move(self, pid: str, to: int) -> None:
        i = self.index(pid)
        p = self.presets.pop(i)
        self.presets.insert(max(0, min(to, len(self.presets))), p)
        self.save()

    def export(self, pids: list[str], path: str | Path) -> None:
        atomic_write_text(Path(path), dumps([p for p in self.presets if p.id in pids]))

    def import_file(self, path: str | Path) -> list[Preset]:
        """Add every preset of an exported file; raises PresetError if any is invalid (none added)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PresetError(f"{path.name}: cannot read ({e})") from None
        presets, problems = parse(text, path.name)
        if problems:
            raise PresetError(problems[0])
        added = []
        for p in presets:
            if self.get(p.id):
                p.id = new_id()
            self.presets.append(p)
            added.append(p)
        self.save()
        return added
