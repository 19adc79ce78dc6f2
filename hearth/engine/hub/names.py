"""What a repository id and a file path from the Hub, or from a sidecar on disk, may be before
Hearth writes under them. A download goes to `<models>/<owner>/<name>/<path>`, so a repository id
or path with `..`, a leading `/`, a backslash or an empty part could name a place outside the
models folder; such names are refused wherever they come in (the listing, a sidecar, a job), and
`inside` checks the joined path once more after links are followed.

    repo_id_problem(repo_id) -> str | None     why it is refused, or None
    path_problem(path) -> str | None
    inside(folder, path) -> Path                folder / path, or HubError when it leads out
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import HubError

_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
MAX_PATH_CHARS = 1024
MAX_PATH_PARTS = 16
MAX_PART_BYTES = 255


def repo_id_problem(repo_id) -> str | None:
    if not isinstance(repo_id, str) or not repo_id:
        return "it is empty"
    parts = repo_id.split("/")
    if len(parts) > 2:
        return "it has more than one '/'"
    for part in parts:
        if not _REPO_PART.fullmatch(part) or ".." in part:
            return f"{part!r} is not a repository or owner name (letters, digits, '-', '_', '.'; no '..')"
    return None


def path_problem(path) -> str | None:
    if not isinstance(path, str) or not path:
        return "it is empty"
    if len(path) > MAX_PATH_CHARS:
        return f"it is longer than {MAX_PATH_CHARS} characters"
    if any(c == "\\" or ord(c) < 32 or ord(c) == 127 for c in path):
        return "it holds a backslash or a control character"
    if _BIDI.search(path):
        return "it holds a right-to-left override or isolate (a name that reads as another)"
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        return "it is absolute"
    parts = path.split("/")
    if len(parts) > MAX_PATH_PARTS:
        return f"it has more than {MAX_PATH_PARTS} folders"
    if any(p in ("", ".", "..") for p in parts):
        return "it has an empty, '.' or '..' part"
    if any(len(p.encode("utf-8", "surrogatepass")) > MAX_PART_BYTES for p in parts):
        return f"a part of it is longer than {MAX_PART_BYTES} bytes"
    return None


def check_job_names(repo_id: str, paths, name: str) -> None:
    """HubError naming the first repository id, path or model file name (one part) that is refused."""
    why = repo_id_problem(repo_id)
    if why is not None:
        raise HubError("bad_response", f"{repo_id!r} is not a usable repository id ({why}): it could lead "
                                       "outside the models folder; nothing was written")
    for p in [*paths, name]:
        why = path_problem(p) or ("it is not one file name" if p is name and "/" in p else None)
        if why is not None:
            raise HubError("bad_response", f"{p!r} is not a usable path ({why}): it could lead outside the "
                                           "models folder; nothing was written")


def inside(folder: Path, path: str) -> Path:
    """`folder / path`, checked after following links (a folder on the way that is a link out)."""
    final = Path(folder) / path
    real_folder = os.path.realpath(folder)
    if os.path.commonpath([real_folder, os.path.realpath(final)]) != real_folder:
        raise HubError("bad_response", f"{path!r} leads outside the models folder ({folder}) through a link; "
                                       "nothing was written")
    return final
