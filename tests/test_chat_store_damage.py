"""app/store/chat_store.py and app/store/chat_recovery.py against real damage: a disk that fills (a real small
tmpfs), a database with damaged pages, one from a newer Hearth, and two processes on one file."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hearth.app.store.chat_store import SCHEMA_VERSION, ChatStore, Message, StorageFullError

ROOT = Path(__file__).resolve().parent.parent


def filled_store(path: Path, n_chats: int = 6, n_messages: int = 20) -> dict[int, list[str]]:
    """A store with chats and messages, closed (so its WAL is checkpointed into the file)."""
    s = ChatStore(path)
    out = {}
    for i in range(n_chats):
        c = s.create_chat(f"chat {i}")
        out[c.id] = [f"message {i}.{j} " + "x" * 200 for j in range(n_messages)]
        for j, text in enumerate(out[c.id]):
            s.add_message(c.id, Message("user" if j % 2 == 0 else "assistant", text))
    s.close()
    return out


def damage_pages(path: Path, pages: list[int]) -> None:
    db = sqlite3.connect(path)
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(path, "r+b") as f:
        for p in pages:
            f.seek((p - 1) * size)
            f.write(b"\xa5" * size)


def root_page(path: Path, name: str) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    finally:
        db.close()


# -- a full disk ------------------------------------------------------------------------------------

def test_a_full_disk_is_a_storage_full_error_and_the_store_recovers(small_tmpfs, fill_disk):
    mnt = small_tmpfs(1 << 20)
    s = ChatStore(mnt / "chats.sqlite3")
    c = s.create_chat("kept")
    s.add_message(c.id, Message("user", "before the disk filled"))
    filler = fill_disk(mnt)
    with pytest.raises(StorageFullError, match="is full; nothing was written"):
        s.add_message(c.id, Message("assistant", "y" * 200_000))
    with pytest.raises(StorageFullError):
        s.create_chat("another")
    assert [m.content for m in s.messages(c.id)] == ["before the disk filled"]
    filler.unlink()                                        # space comes back: the same store writes again
    s.add_message(c.id, Message("assistant", "after"))
    assert [m.content for m in s.messages(c.id)] == ["before the disk filled", "after"]
    s.close()
    assert [m.content for m in ChatStore(mnt / "chats.sqlite3").messages(c.id)][-1] == "after"


# -- damage -----------------------------------------------------------------------------------------

def test_a_damaged_index_is_reported_and_every_chat_recovered(tmp_path):
    path = tmp_path / "chats.sqlite3"
    written = filled_store(path)
    damage_pages(path, [root_page(path, "messages_by_chat")])
    store, notice = ChatStore.open_or_move_aside(path)
    assert "Your chats database is damaged" in notice and f"{len(written)} chats with 120 messages" in notice
    aside = list(tmp_path.glob("chats.corrupt-*.sqlite3"))
    assert len(aside) == 1 and str(aside[0]) in notice
    assert store.check() == []
    assert {c.id: c.title for c in store.chats()} == {cid: f"chat {i}" for i, cid in enumerate(written)}
    for cid, texts in written.items():                     # every chat opens, in order
        assert [m.content for m in store.messages(cid)] == texts
    store.close()
    again, notice = ChatStore.open_or_move_aside(path)
    assert notice == "" and len(again.chats()) == len(written)


def test_a_damaged_table_page_keeps_what_can_be_read(tmp_path):
    path = tmp_path / "chats.sqlite3"
    written = filled_store(path)
    db = sqlite3.connect(path)
    n_pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()
    damage_pages(path, [n_pages // 2])                    # a page of message rows, in the middle
    store, notice = ChatStore.open_or_move_aside(path)
    assert "Your chats database is damaged" in notice and "could not be read" in notice
    kept = sum(len(store.messages(c.id)) for c in store.chats())
    assert 60 <= kept < 120                               # most messages, not the lost page's
    for c in store.chats():
        texts = [m.content for m in store.messages(c.id)]
        assert all(t in written.get(c.id, []) for t in texts) or c.title.startswith("Recovered chat")
    store.create_chat("usable")


def test_a_file_that_is_no_database_is_moved_aside_and_the_app_starts_empty(tmp_path):
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"\0garbage" * 1000)
    store, notice = ChatStore.open_or_move_aside(path)
    assert "could not be read" in notice and store.chats() == []


def test_two_damaged_files_in_one_second_get_two_names(tmp_path):
    path = tmp_path / "chats.sqlite3"
    for content in (b"first" * 500, b"second" * 500):
        path.write_bytes(content)
        store, _ = ChatStore.open_or_move_aside(path)
        store.close()
        path.unlink()
    kept = sorted(p.read_bytes()[:6] for p in tmp_path.glob("chats.corrupt-*.sqlite3"))
    assert kept == [b"firstf", b"second"]


# -- a newer database -------------------------------------------------------------------------------

def test_a_database_from_a_newer_hearth_is_left_untouched(tmp_path):
    path = tmp_path / "chats.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE future(x)")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    db.commit()
    db.close()
    before = path.read_bytes()
    store, notice = ChatStore.open_or_move_aside(path)
    assert f"version {SCHEMA_VERSION + 3}, from a newer Hearth" in notice and "not saved" in notice
    c = store.create_chat("meanwhile")                    # the app runs: in memory
    store.add_message(c.id, Message("user", "hi"))
    store.close()
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["chats.sqlite3"]


# -- two processes ----------------------------------------------------------------------------------

OTHER = textwrap.dedent("""
    import sys
    from hearth.app.store.chat_store import ChatStore
    s = ChatStore(sys.argv[1])
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "delete":
            s.delete_chat(int(arg))
        elif cmd == "undelete":
            s.undelete_chat(int(arg))
        elif cmd == "close":
            s.close()
        print("ok", flush=True)
""")


def other_process(path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", OTHER, str(path)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})


def tell(p: subprocess.Popen, line: str) -> None:
    p.stdin.write(line + "\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "ok"


def test_a_second_process_never_purges_what_the_first_may_undo(tmp_path):
    path = tmp_path / "chats.sqlite3"
    s = ChatStore(path)
    a, b = s.create_chat("a"), s.create_chat("b")
    s.close()
    first = other_process(path)
    try:
        tell(first, f"delete {a.id}")
        second = ChatStore(path)                           # opening purges only deletions of gone processes
        assert [c.title for c in second.chats()] == ["b"] and second.chat(a.id) is not None
        second.close()
        tell(first, f"undelete {a.id}")                    # Undo still works
        assert {c.title for c in ChatStore(path).chats()} == {"a", "b"}
        tell(first, f"delete {a.id}")
        tell(first, "close")                               # its own deletions go when it closes
        assert ChatStore(path).chat(a.id) is None
    finally:
        first.kill()
        first.wait(10)


def test_deletions_of_a_process_that_died_are_purged_at_the_next_open(tmp_path):
    path = tmp_path / "chats.sqlite3"
    s = ChatStore(path)
    a, b, legacy = s.create_chat("a"), s.create_chat("b"), s.create_chat("legacy")
    s._tx("UPDATE chats SET deleted = 1 WHERE id = ?", (legacy.id,))    # deleted, owner unknown
    s.close()
    first = other_process(path)
    tell(first, f"delete {a.id}")
    first.kill()                                           # killed: it never closed its store
    first.wait(10)
    s = ChatStore(path)
    assert s.chat(a.id) is None and s.chat(legacy.id) is None and [c.title for c in s.chats()] == ["b"]


def test_damage_after_the_start_check_is_reported_when_a_chat_opens(qtbot, tmp_path):
    """The conversation's side: a chat that cannot be read gives a message, not an exception in a slot."""
    from PySide6.QtCore import QObject, Signal

    from hearth.app.chat.conversation import Conversation
    from hearth.app.store.preset_store import PresetStore

    class Worker(QObject):
        delta, finished, failed, modelLoaded = Signal(int, str), Signal(int, dict), Signal(int, str), Signal(dict)

    class Client:
        worker = Worker()

        def open_chat(self, *args, **kwargs):   # the chat-context request a real EngineClient queues
            pass

    path = tmp_path / "chats.sqlite3"
    written = filled_store(path)
    store = ChatStore(path)
    damage_pages(path, [root_page(path, "messages_by_chat")])
    conv = Conversation(store, PresetStore(tmp_path / "presets.json"), Client())
    said = []
    conv.storageFailed.connect(said.append)
    conv.open_chat(next(iter(written)))
    assert said and "could not be read" in said[0] and conv.model.rowCount() == 0
