"""Saved presets' prefix images for server requests.

When a request's system prompt and tools are exactly those of a saved preset, its prefix (the chat
template rendered up to the first user message) is made resident through the PrefixStore before
generating: restored from its image if there is one, else computed and saved. Requests that match no
preset still reuse whatever prefix the engine holds (the Engine's common-prefix reuse).

The presets file is the app's (`data_dir()/presets.json`, written by app/store/preset_store.py), in the
format engine/chat/preset_format.py parses. It is re-read when it changes, and a file that cannot be read
only turns the matching off (with a log line), never fails a request.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..chat.chat_turn import prefix_ids
from ..chat.preset_format import PresetError, parse
from ..tools import ToolSchemaError, validate_tool_set

log = logging.getLogger("hearth.engine.server")


@dataclass(frozen=True)
class SavedPreset:
    id: str
    name: str
    system_prompt: str
    tools_key: str   # canonical JSON of the normalized tool set


def tools_key(tools) -> str:
    """The same text for the same tool set, however its JSON was spelled."""
    try:
        norm = validate_tool_set(list(tools or []))
    except ToolSchemaError:
        norm = list(tools or [])
    return json.dumps(norm, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def read_presets(path: Path) -> list[SavedPreset]:
    """The presets of an app presets file. Raises ValueError naming the file when it is unusable;
    a preset that is not valid is skipped with a log line (the app moves such a file aside)."""
    try:
        presets, problems = parse(path.read_text(encoding="utf-8"), path.name)
    except (OSError, UnicodeDecodeError, PresetError) as e:
        raise ValueError(f"{path}: cannot read the presets file ({e})") from None
    for problem in problems:
        log.warning("%s: preset skipped: %s", path, problem)
    return [SavedPreset(p.id, p.name, p.system_prompt, tools_key(p.tools)) for p in presets]


class PresetPrefixes:
    """Matches requests to saved presets and keeps their prefix resident through a PrefixStore."""

    def __init__(self, presets_path: str | os.PathLike | None, store=None):
        self.path = Path(presets_path) if presets_path else None
        self._store = store
        self._presets: list[SavedPreset] = []
        self._stamp = None
        self.last_error: str | None = None

    def _store_or_default(self):
        if self._store is None:
            from ..prefix import PrefixStore  # noqa: PLC0415
            self._store = PrefixStore()
        return self._store

    def presets(self) -> list[SavedPreset]:
        """The saved presets, re-read when the file changed (its mtime and size)."""
        if self.path is None:
            return []
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            self._presets, self._stamp = [], None
            return []
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._presets, self.last_error = read_presets(self.path), None
            except ValueError as e:
                self._presets, self.last_error = [], str(e)
                log.warning("preset prefixes off: %s", e)
        return self._presets

    def match(self, system: str, tools: list) -> SavedPreset | None:
        key = tools_key(tools)
        return next((p for p in self.presets() if p.system_prompt == system and p.tools_key == key), None)

    def prepare(self, engine, preset: SavedPreset, system: str, tools: list, tool_format: str) -> dict | None:
        """Make the preset's prefix resident (restore or compute + save). Returns what was done:
        {"preset", "action", "tokens", "ms", "reason"}, or None when the template gives no prefix."""
        ids, text = prefix_ids(engine, system, tools, tool_format)
        if not text:
            return None
        t0 = time.perf_counter()
        res = self._store_or_default().ensure(engine, ids, label=preset.name)
        return {"preset": preset.name, "action": res.action, "tokens": res.n_tokens, "key": res.key,
                "ms": (time.perf_counter() - t0) * 1000, "reason": res.reason or ""}
