"""app/store/chat_store.py on a data folder or database it may not write or read: a read-only folder, a
database whose permissions were lost (mode 000), a read-only bind mount. None of these is damage:
the file keeps its name, the app gets a store and a notice that says chats cannot be saved.

Permissions do not hold for root, so those cases run in a child process as an ordinary user
(`setpriv` to nobody when the tests run as root); the mount case needs root and mount(8)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hearth.app.store.chat_store import ChatStore, Message

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
CHILD = """
import json, sys
from hearth.app.store.chat_store import ChatStore
store, notice = ChatStore.open_or_move_aside(sys.argv[1])
chats = [(c.title, [m.content for m in store.messages(c.id)]) for c in store.chats()]
c = store.create_chat("meanwhile")           # the app goes on: writing must not raise
print(json.dumps({"notice": notice, "chats": chats}))
"""


@pytest.fixture
def shared_dir():
    """A folder an ordinary user can reach (pytest's tmp_path is root's own)."""
    d = Path(tempfile.mkdtemp(prefix="hearth-access-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        os.chmod(p, 0o700, follow_symlinks=False) if not p.is_symlink() else None
    shutil.rmtree(d, ignore_errors=True)


def as_user(path: Path) -> None:
    """Hand `path` to the user the child runs as."""
    if os.geteuid() == 0:
        for p in [path, *path.rglob("*")]:
            os.chown(p, NOBODY, NOBODY)


def as_ordinary_user(cmd: list[str]) -> list[str]:
    """`cmd` run as an ordinary user: itself when the tests do not run as root, else through
    setpriv as nobody (skipped, saying why, where nobody cannot run Hearth from this checkout)."""
    if os.geteuid() != 0:
        return cmd
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("the tests run as root and setpriv is missing: permissions cannot be tested")
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import hearth.app.store.chat_store"], capture_output=True,
                           text=True, timeout=120, cwd="/", env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if probe.returncode:
        pytest.skip(f"the user nobody cannot run Hearth from {ROOT} (its folders are root's own): "
                    "permissions cannot be tested here")
    return [*prefix, *cmd]


def open_as_user(db: Path) -> dict:
    cmd = as_ordinary_user([sys.executable, "-c", CHILD, str(db)])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/",
                       env=dict(os.environ, PYTHONPATH=str(ROOT), HOME="/tmp"))
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def healthy_db(path: Path) -> None:
    s = ChatStore(path)
    c = s.create_chat("kept")
    s.add_message(c.id, Message("user", "hello"))
    s.add_message(c.id, Message("assistant", "hi there"))
    s.close()


def test_a_read_only_data_folder_shows_the_chats_and_says_they_cannot_be_saved(shared_dir):
    data = shared_dir / "data"
    data.mkdir()
    healthy_db(data / "chats.sqlite3")
    as_user(data)
    (data / "chats.sqlite3").chmod(0o444)
    data.chmod(0o555)
    got = open_as_user(data / "chats.sqlite3")
    assert "cannot be saved" in got["notice"] and "read-only" in got["notice"], got
    assert str(data / "chats.sqlite3") in got["notice"]
    assert got["chats"] == [["kept", ["hello", "hi there"]]]
    assert sorted(p.name for p in data.iterdir()) == ["chats.sqlite3"]     # nothing moved, nothing added


def test_a_database_that_cannot_be_read_keeps_its_name_and_its_chats(shared_dir):
    data = shared_dir / "data"
    data.mkdir()
    db = data / "chats.sqlite3"
    healthy_db(db)
    as_user(data)
    db.chmod(0o000)
    got = open_as_user(db)
    assert "cannot be read" in got["notice"] and "permission" in got["notice"].lower(), got
    assert got["chats"] == []
    assert sorted(p.name for p in data.iterdir()) == ["chats.sqlite3"]     # no chats.corrupt-*, no empty db
    db.chmod(0o644)                                                        # permissions fixed: all is back
    store, notice = ChatStore.open_or_move_aside(db)
    assert notice == "" and [c.title for c in store.chats()] == ["kept"]
    store.close()


def test_a_missing_database_in_a_read_only_folder(shared_dir):
    data = shared_dir / "data"
    data.mkdir()
    as_user(data)
    data.chmod(0o555)
    got = open_as_user(data / "chats.sqlite3")
    assert "cannot be saved" in got["notice"] and got["chats"] == []
    assert list(data.iterdir()) == []


def test_a_read_only_bind_mount(shared_dir):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a bind mount needs root and mount(8)")
    src, mnt = shared_dir / "src", shared_dir / "mnt"
    src.mkdir()
    mnt.mkdir()
    healthy_db(src / "chats.sqlite3")
    r = subprocess.run(["mount", "--bind", "-o", "ro", str(src), str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot make a read-only bind mount here ({r.stderr.strip() or r.returncode})")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], capture_output=True)
        store, notice = ChatStore.open_or_move_aside(mnt / "chats.sqlite3")
        assert "cannot be saved" in notice and "read-only" in notice, notice
        assert [c.title for c in store.chats()] == ["kept"]
        store.create_chat("meanwhile")
        store.close()
        assert sorted(p.name for p in src.iterdir()) == ["chats.sqlite3"]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


WINDOW = """
import os, sys
from PySide6.QtWidgets import QApplication
app = QApplication([])
from hearth.app.main import create_window
from hearth.app.single_instance import SingleInstance
from hearth.engine.paths import data_dir
guard = SingleInstance(data_dir())
claimed = guard.claim()
w = create_window()
print("RESULT", claimed, w.banner.isVisible() or not w.banner.isHidden(), "|", w.bannerLabel.text(), flush=True)
os._exit(0)
"""


def test_the_window_opens_on_a_read_only_data_folder(shared_dir):
    """The report's case whole: the window opens, says chats cannot be saved, and this is the one
    instance (its lock file cannot be made there)."""
    data, cache = shared_dir / "data", shared_dir / "cache"
    data.mkdir()
    cache.mkdir()
    healthy_db(data / "chats.sqlite3")
    as_user(shared_dir)
    data.chmod(0o555)
    before = sorted(p.name for p in data.iterdir())
    cmd = as_ordinary_user([sys.executable, "-c", WINDOW])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd="/",
                       env=dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(shared_dir), QT_QPA_PLATFORM="offscreen",
                                HEARTH_DATA_DIR=str(data), HEARTH_CACHE_DIR=str(cache),
                                XDG_RUNTIME_DIR=str(cache)))
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, r.stderr[-3000:]
    assert line.startswith("RESULT True True |") and "Chats cannot be saved" in line, line
    assert "presets cannot be saved" in line.lower(), line
    assert sorted(p.name for p in data.iterdir()) == before


def test_a_folder_in_the_databases_place_is_left_alone(tmp_path):
    """Not damage either: nothing to move aside, nothing to recover."""
    (tmp_path / "chats.sqlite3").mkdir()
    store, notice = ChatStore.open_or_move_aside(tmp_path / "chats.sqlite3")
    assert "is a folder, not a database file" in notice and "Chats you start now are lost" in notice
    store.create_chat("meanwhile")
    assert (tmp_path / "chats.sqlite3").is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["chats.sqlite3"]
