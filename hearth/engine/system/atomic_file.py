"""Files replaced atomically: a temporary file in the same folder, fsync, rename over the real name,
fsync of the folder. A crash or a full disk mid-write leaves at most a `.tmp` file, never a half
written file under the real name, and never touches the previous file of that name. The writer holds
a lock on its `.tmp` file while it writes, so a sweeper can tell a live writer's file from an orphan.

One rule for every file Hearth writes whole: prefix images and their metadata, the presets file.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from .files import lock_while_writing


def write_atomic(final: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(f)` on an unbuffered binary temporary file next to `final`, then put it in place.
    Whatever `write` raises (OSError for a full disk) leaves nothing behind and `final` as it was."""
    final = Path(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        lock_while_writing(fd)    # a sweeper (engine.files.orphaned) leaves it alone while this runs
        with open(fd, "wb", buffering=0) as f:
            write(f)
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(final.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """`text` as UTF-8 in `path` (its folder made if need be), replaced atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = memoryview(text.encode("utf-8"))
    write_atomic(path, lambda f: _write_all(f, data))


def fsync_dir(d: Path) -> None:
    """Make a rename in `d` durable. A folder that cannot be opened or fsynced (some filesystems,
    some platforms) is left as it is."""
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EBADF):  # some filesystems cannot fsync a folder
            raise
    finally:
        os.close(fd)


def _write_all(f: BinaryIO, data: memoryview) -> None:
    while data:
        n = f.write(data)
        data = data[n:]
