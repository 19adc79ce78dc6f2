"""engine/system/files.py: only regular files are opened, never blocking on a FIFO; links are reported;
set-aside names never collide."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hearth.engine.system.files import (NotRegularFile, file_kind, file_lock, link_target, lock_while_writing, move_aside,
                          open_regular, orphaned)


def opened_within(path, seconds: float = 10.0):
    """open_regular(path) on a thread: its result or exception, failing if it blocks."""
    out: list = []

    def go():
        try:
            with open_regular(path) as f:
                out.append(f.read())
        except OSError as e:
            out.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        with open(path, "wb"):                         # a writer unblocks it so the run can end
            pass
        pytest.fail(f"open_regular blocked on {path}")
    return out[0]


def test_a_regular_file_and_a_link_to_one_are_read(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"data")
    os.symlink(tmp_path / "a.bin", tmp_path / "link")
    assert opened_within(tmp_path / "a.bin") == b"data" == opened_within(tmp_path / "link")


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    e = opened_within(tmp_path / "pipe")
    assert isinstance(e, NotRegularFile) and e.kind == "a FIFO (named pipe)" and "not a regular file" in str(e)


def test_a_directory_a_device_and_a_socket_are_refused(tmp_path):
    (tmp_path / "dir").mkdir()
    assert opened_within(tmp_path / "dir").kind == "a directory"
    assert opened_within("/dev/null").kind == "a character device"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        e = opened_within(tmp_path / "sock")
        assert isinstance(e, OSError)                  # a socket cannot even be opened; never a read


def test_a_missing_file_is_the_usual_error(tmp_path):
    assert isinstance(opened_within(tmp_path / "gone"), FileNotFoundError)


def test_file_kind_names_what_the_path_is(tmp_path):
    os.mkfifo(tmp_path / "p")
    os.symlink(tmp_path / "p", tmp_path / "l")
    assert file_kind(tmp_path / "p") == "a FIFO (named pipe)" and file_kind(tmp_path / "l") == "a symbolic link"


def test_link_target_follows_links_anywhere_in_the_path(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.txt").write_text("x")
    os.symlink(tmp_path / "real" / "f.txt", tmp_path / "file-link")
    os.symlink(tmp_path / "real", tmp_path / "dir-link")
    real = (tmp_path / "real" / "f.txt").resolve()
    assert link_target(tmp_path / "file-link") == real
    assert link_target(tmp_path / "dir-link" / "f.txt") == real
    assert link_target(real) is None


def test_move_aside_names_never_collide_even_in_one_second(tmp_path):
    now = dt.datetime(2026, 12, 1, 9, 0, 0)
    names = set()
    for i in range(50):
        p = tmp_path / "chats.sqlite3"
        p.write_text(str(i))
        moved = move_aside(p, "corrupt", now=now)
        assert not p.exists() and moved.read_text() == str(i)
        assert moved.name.startswith("chats.corrupt-20261201-090000-") and moved.suffix == ".sqlite3"
        names.add(moved.name)
    assert len(names) == 50 and len(list(tmp_path.iterdir())) == 50


def test_file_lock_makes_another_process_wait(tmp_path):
    target = tmp_path / "presets.json"
    script = ("import sys, time; from hearth.engine.system.files import file_lock\n"
              "with file_lock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(1.0)\n")
    root = Path(__file__).resolve().parent.parent
    other = subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True,
                             env={"PYTHONPATH": str(root), "PATH": ""})
    try:
        assert other.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        with file_lock(target):
            waited = time.monotonic() - t0
        assert waited > 0.3                                # it waited for the other process's block
    finally:
        other.wait(10)
    import fcntl
    with open(str(target) + ".lock") as f:                 # free once the other has gone
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_orphaned_temporaries_are_those_no_live_writer_holds(tmp_path):
    old = time.time() - 120
    left = tmp_path / ".a.tmp"
    left.write_bytes(b"x" * 1000)                        # its writer crashed
    fresh = tmp_path / ".c.tmp"
    fresh.write_bytes(b"x")                              # just created: its writer may not hold it yet
    held = tmp_path / ".b.tmp"
    script = ("import os, sys, time; from hearth.engine.system.files import lock_while_writing\n"
              "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); lock_while_writing(fd)\n"
              "os.utime(sys.argv[1], (time.time() - 120, time.time() - 120)); print('writing', flush=True)\n"
              "sys.stdin.readline()\n")
    root = Path(__file__).resolve().parent.parent
    writer = subprocess.Popen([sys.executable, "-c", script, str(held)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(root), "PATH": ""})
    try:
        assert writer.stdout.readline().strip() == "writing"
        os.utime(left, (old, old))
        assert orphaned([left, held, fresh, tmp_path / "gone.tmp"]) == [left]
    finally:
        writer.kill()
        writer.wait(10)
    assert orphaned([held]) == [held]                    # its writer died: it is an orphan now
    with open(held, "rb") as f:
        lock_while_writing(f.fileno())
        assert orphaned([held]) == []                    # held by this process's own writer
