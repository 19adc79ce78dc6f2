"""Files Hearth reads and sets aside, treated with suspicion: a name may be a FIFO, a device, a
directory or a link, and several Hearth processes may share a folder.

    open_regular(path)          a read-only binary file object, or NotRegularFile, never blocking:
                                opened with O_NONBLOCK (a FIFO with no writer opens at once instead
                                of waiting for one), then checked with fstat on the descriptor
                                itself, so nothing can be swapped in between the check and the read
    file_kind(path)             "a regular file", "a directory", "a FIFO" ... (what lstat says)
    link_target(path)           where a symbolic link (in any component of the path) leads, or None
    move_aside(path, label)     renamed to a name no other process picks: <stem>.<label>-<time>-<pid>-<rand>
    file_lock(path)             a context holding an exclusive lock on `<path>.lock` (other processes
                                wait for it), for read-modify-write of a file several processes share
    lock_while_writing(fd)      a writer marks its temporary file as in use (a lock on the file itself)
    orphaned(paths)             those temporary files no live writer holds: left by a crash or a full
                                disk, safe to delete
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import secrets
import stat
import time
from pathlib import Path
from typing import BinaryIO, Iterator

try:
    import fcntl
except ImportError:       # Windows: no advisory locks through this module; one process is the rule there
    fcntl = None

_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISLNK, "a symbolic link"))


class NotRegularFile(OSError):
    """The path names something other than a regular file; `kind` says what."""

    def __init__(self, path: str | os.PathLike, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path, self.kind = Path(path), kind


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def file_kind(path: str | os.PathLike) -> str:
    """What `path` itself is (links not followed); OSError when it does not exist."""
    return kind_of(os.lstat(path).st_mode)


def open_regular(path: str | os.PathLike, buffering: int = -1) -> BinaryIO:
    """`path` opened for reading, if it is (or links to) a regular file; NotRegularFile otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, kind_of(mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def link_target(path: str | os.PathLike) -> Path | None:
    """The real path `path` leads to when it, or a folder on the way, is a symbolic link; else None."""
    absolute = Path(os.path.abspath(os.path.expanduser(path)))
    real = Path(os.path.realpath(absolute))
    return real if real != absolute else None


def move_aside(path: str | os.PathLike, label: str, now: dt.datetime | None = None) -> Path:
    """Rename `path` to `<stem>.<label>-<time>-<pid>-<random><suffix>` beside it and return the new
    path. The process id and random part keep two processes (or two calls in one second) from ever
    choosing the same name, so no set-aside copy overwrites another."""
    path = Path(path)
    stamp = (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    while True:
        target = path.with_name(f"{path.stem}.{label}-{stamp}-{os.getpid()}-{secrets.token_hex(3)}{path.suffix}")
        if not os.path.lexists(target):
            os.rename(path, target)
            return target


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock on `<path>.lock` for the block; other processes taking the
    same lock wait. The lock goes with the process, so one that dies never leaves it held."""
    lock = Path(str(path) + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)          # closing releases the lock


def lock_while_writing(fd: int) -> None:
    """Mark the temporary file open on `fd` as being written: `orphaned` skips it until the
    descriptor is closed (or its process dies)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


def orphaned(paths, min_age_s: float = 10.0) -> list[Path]:
    """The temporary files among `paths` that no writer holds (its process crashed, or gave up and
    could not delete it), older than `min_age_s` (a writer locks its file just after creating it).
    Without advisory locks, only those older than an hour."""
    out = []
    now = time.time()
    for p in map(Path, paths):
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < min_age_s:
            continue
        if fcntl is None:
            if now - st.st_mtime > 3600:
                out.append(p)
            continue
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            out.append(p)
        except OSError:
            pass                # a live writer holds it
        finally:
            os.close(fd)
    return out
