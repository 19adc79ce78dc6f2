"""The library's small JSON files (registry, per-model settings, download sidecars): written
through `engine.atomic_file` (a crash leaves the old or the new file, never half of one), read
with a version check."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..system.atomic_file import write_text_atomic


def write_json(file: Path, obj) -> None:
    write_text_atomic(file, json.dumps(obj, indent=1, sort_keys=True))


def read_versioned(file: Path, version: int) -> dict | None:
    """The file's object when it is a JSON object of `version`; None when there is no file.
    A file that cannot be read, or of another version, is set aside as `<name>.bad` (so nothing is
    lost and a later write cannot clobber it) and None is returned."""
    try:
        d = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(d, dict) or d.get("version") != version:
            raise ValueError(f"version {d.get('version') if isinstance(d, dict) else None!r}")
        return d
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        try:
            os.replace(file, file.with_name(file.name + ".bad"))
        except OSError:
            pass
        return None
