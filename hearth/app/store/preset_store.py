"""The user's presets: `data_dir()/presets.json` (also the export/import format), Qt-free.

The format (parse, validate, dump) is engine/chat/preset_format.py's; this module owns the file: written
atomically, and a file that cannot be read (bad JSON, another format, a newer version, an invalid
preset) is never silently dropped: it is moved aside to `presets.corrupt-<time>-<pid>-<random>.json`
(a name no other process picks), every preset in it that is still valid is kept, and `notice` says
what happened so the window can show it.

Another process may save the file too (a second Hearth on the same data folder, which the app's
single-instance guard normally prevents, or a script): every save takes a lock on `presets.json.lock`,
reads the file again and merges what changed there since this store last read or wrote it
(app/store/preset_merge.py) before writing, so neither side's new, edited or deleted presets are lost.
Temporary files left by a writer that died are removed at load.
"""

from __future__ import annotations

from pathlib import Path

from hearth.engine.system.atomic_file import write_text_atomic
from hearth.engine.system.files import file_lock, move_aside, orphaned
from hearth.engine.chat.preset_format import Preset, PresetError, dumps, new_id, parse

from .preset_merge import merge

RESOURCES = Path(__file__).resolve().parent.parent.parent / "resources"


class PresetStore:
    """The user's presets, in order. Every change is saved at once, atomically.

    `notice` is a sentence for the user when the file had to be moved aside at load, else "".
    """

    def __init__(self, path: str | Path, shipped: str | Path | None = None):
        self.path = Path(path)
        self.shipped = Path(shipped) if shipped else RESOURCES / "presets.json"
        self.notice = ""
        self.presets: list[Preset] = []
        self._base: dict[str, dict] = {}     # the file's presets as last read or written, by id
        try:
            with file_lock(self.path):
                self._load()
        except OSError as e:                  # a read-only data folder: no lock file, nothing written
            self._load_unsaved(e)

    def _load_unsaved(self, error: OSError) -> None:
        """The presets as they can be read, kept in memory: the folder takes no writes."""
        presets = None
        try:
            presets, problems = parse(self.path.read_text(encoding="utf-8"), self.path.name)
        except (PresetError, UnicodeDecodeError, OSError):
            problems = ["unreadable"]
        self.presets = presets if presets and not problems else self._shipped()
        self._base = {p.id: p.to_json() for p in self.presets}
        self.notice = (f"Your presets cannot be saved: {self.path.parent} cannot be written "
                       f"({error.strerror or error}). Changes last until Hearth closes.")

    def _load(self) -> None:
        for tmp in orphaned(self.path.parent.glob(f".{self.path.name}.*.tmp")):
            tmp.unlink(missing_ok=True)
        if not self.path.exists():
            self.presets = self._shipped()
            self._write()
            return
        try:
            presets, problems = parse(self.path.read_text(encoding="utf-8"), self.path.name)
        except (PresetError, UnicodeDecodeError, OSError) as e:
            presets, problems = [], [str(e)]
        if problems:
            aside = move_aside(self.path, "corrupt")
            kept = f"kept {len(presets)} preset(s) that were valid" if presets else "loaded the shipped presets"
            self.notice = (f"Your presets file could not be read fully ({problems[0]}). It was moved to "
                           f"{aside} and Hearth {kept}.")
            if not presets:
                presets = self._shipped()
            self.presets = presets
            self._write()
            return
        self.presets = presets or self._shipped()
        self._base = {p.id: p.to_json() for p in presets}

    def _shipped(self) -> list[Preset]:
        try:
            return parse(self.shipped.read_text(encoding="utf-8"), self.shipped.name)[0]
        except (OSError, PresetError):
            return [Preset("assistant", "Assistant", "You are a helpful assistant.")]

    def save(self) -> None:
        """Write the presets, merged with what another process saved since this store last did.
        A folder that takes no writes is a PresetError saying so (the change stays in memory)."""
        try:
            with file_lock(self.path):
                theirs = self._read_current()
                if theirs is not None:
                    self.presets = merge(self._base, self.presets, theirs, key=lambda p: p.id,
                                         same=lambda base, p: base == p.to_json())
                self._write()
        except OSError as e:
            raise PresetError(f"the presets cannot be saved to {self.path} ({e.strerror or e})") from e

    def _read_current(self) -> list[Preset] | None:
        """The file as it is now, or None when it is missing or unreadable (then ours is written)."""
        try:
            presets, problems = parse(self.path.read_text(encoding="utf-8"), self.path.name)
        except (PresetError, UnicodeDecodeError, OSError):
            return None
        return None if problems else presets

    def _write(self) -> None:
        write_text_atomic(self.path, dumps(self.presets))
        self._base = {p.id: p.to_json() for p in self.presets}

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
        write_text_atomic(Path(path), dumps([p for p in self.presets if p.id in pids]))

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
