"""Chats in SQLite: Qt-free, transactional, schema versioned with migrations.

The database lives at `data_dir()/chats.sqlite3`. Its schema version is SQLite's `PRAGMA user_version`;
`MIGRATIONS[i]` takes a database from version i to i + 1, inside one transaction, so a crash during an
upgrade leaves the old version intact. Every write is its own transaction (`with self._db:`), and a
reply is written only once it is finished or stopped, so a crash or kill at any moment loses at most
the reply in progress.

Tables (version 2):
    chats(id, title, preset_id, created, updated, deleted)   deleted: 0, or the id of the process that
                                                             deleted it (undo is possible while it
                                                             runs); purged when that process closes
                                                             the store or is found gone at an open
    messages(id, chat_id, seq, role, content, created, stats JSON, tool_calls JSON, model)

What survives what: WAL with synchronous=NORMAL keeps every committed transaction through a crash or
kill of the process; a power cut may lose the last transactions committed before it (never a
half-written one, and the file stays consistent). A full disk makes the write fail as a whole
(StorageFullError) and the database stays as it was; the caller keeps what it could not write.

`open_or_move_aside` checks the file (`PRAGMA quick_check`): damage is reported, the readable chats
are copied into a new database (app/store/chat_recovery.py) and the damaged file is kept beside it; a
database from a newer Hearth is left untouched and the app runs on an in-memory store meanwhile.
Only SQLite's "malformed" and "not a database" are damage: a database that cannot be opened for
writing (permissions, a read-only folder or medium) keeps its name, its chats are shown from an
in-memory store, and the notice says that chats cannot be saved.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from hearth.engine.system.files import move_aside


@dataclass
class Chat:
    id: int
    title: str
    preset_id: str = ""
    created: float = 0.0
    updated: float = 0.0


@dataclass
class Message:
    role: str                      # "user" | "assistant" | "system" | "tool"
    content: str
    id: int = 0
    stats: dict = field(default_factory=dict)      # tokens/s, ttft, stop reason ... (assistant only)
    tool_calls: list = field(default_factory=list)
    model: str = ""


def _v1(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE chats (
        id INTEGER PRIMARY KEY, title TEXT NOT NULL, preset_id TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL, updated REAL NOT NULL)""")
    db.execute("""CREATE TABLE messages (
        id INTEGER PRIMARY KEY, chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, created REAL NOT NULL,
        stats TEXT NOT NULL DEFAULT '{}')""")
    db.execute("CREATE INDEX messages_by_chat ON messages(chat_id, seq)")


def _v2(db: sqlite3.Connection) -> None:
    # Soft delete (for undo), tool calls and the model that wrote each reply.
    db.execute("ALTER TABLE chats ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE messages ADD COLUMN tool_calls TEXT NOT NULL DEFAULT '[]'")
    db.execute("ALTER TABLE messages ADD COLUMN model TEXT NOT NULL DEFAULT ''")


MIGRATIONS = [_v1, _v2]
SCHEMA_VERSION = len(MIGRATIONS)


class ChatStoreError(Exception):
    pass


class StorageFullError(ChatStoreError):
    """A write failed because the disk is full; nothing of it was written."""


class NewerDatabaseError(ChatStoreError):
    """The database was written by a newer Hearth (its user_version is above SCHEMA_VERSION)."""


class ChatStore:
    """All chats of one user. Methods are small transactions; nothing here knows about Qt."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        memory = str(path) == ":memory:"
        if not memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we open transactions ourselves, so DDL in migrations is transactional too.
        self._db = sqlite3.connect(str(path) if memory else self.path, isolation_level=None)
        try:
            self._db.execute("PRAGMA foreign_keys = ON")
            self._refuse_newer()                  # before anything writes to a file that is not ours to change
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
            self._purge_deleted()
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def open_or_move_aside(cls, path: str | Path) -> tuple["ChatStore", str]:
        """Open the store, never stopping the app. A file that is not a sound SQLite database is
        moved aside (never deleted), a fresh one started, and whatever chats can still be read from
        the old file copied into it; a database from a newer Hearth is left alone and an in-memory
        store used. Returns (store, a notice for the user or "")."""
        from .chat_recovery import read_recoverable  # noqa: PLC0415
        path = Path(path)
        try:
            store = cls(path)
            try:
                problems = store.check()
            finally:
                if store.check_failed:
                    store.close()
            if not problems:
                return store, ""
            store.close()
        except NewerDatabaseError as e:
            return cls(":memory:"), (f"{e}. It was left untouched; chats you start now are not saved. "
                                     "Update Hearth to see your chats.")
        except sqlite3.DatabaseError as e:
            if not is_damage(e):
                return cls._unsaved(path, e)
            problems = [str(e)]
        except OSError as e:                      # the data folder cannot be made
            return cls._unsaved(path, e)
        aside = _move_db_aside(path, "corrupt")
        fresh = cls(path)
        chats, messages, lost = read_recoverable(aside)
        if not chats:
            return fresh, (f"Your chats database could not be read ({problems[0]}). It was moved to {aside} "
                           "and a new, empty one was started.")
        fresh.import_rows(chats, messages)
        lost_note = f" Some of it could not be read: {lost}." if lost else ""
        return fresh, (f"Your chats database is damaged ({problems[0]}). {len(chats)} chats with {len(messages)} "
                       f"messages were recovered into a new database.{lost_note} The damaged file was kept "
                       f"as {aside}.")

    @classmethod
    def _unsaved(cls, path: Path, error: BaseException) -> tuple["ChatStore", str]:
        """A database that is not damaged but cannot be opened for writing (permissions, read-only
        media): its chats, where they can be read, in an in-memory store; the file left as it is."""
        from .chat_recovery import read_recoverable  # noqa: PLC0415
        store = cls(":memory:")
        why = access_problem(path, error)
        chats, messages, _ = read_recoverable(path, allow_immutable=True) if path.exists() else ([], [], "")
        if chats:
            store.import_rows(chats, messages)
        if why.startswith("cannot be read"):
            return store, (f"Your chats {path} {why}. It was left untouched; chats you start now cannot be "
                           "saved. Give Hearth access to the file and restart it to see your chats.")
        shown = ("Your chats are shown, but what you change now is lost when Hearth closes." if chats else
                 "Chats you start now are lost when Hearth closes.")
        return store, f"Chats cannot be saved: {why}. {shown}"

    def check(self) -> list[str]:
        """What `PRAGMA quick_check` finds wrong (an empty list when the database is sound). An
        error that says nothing of the file's soundness (I/O, permissions) is raised."""
        self.check_failed = False
        try:
            rows = [r[0] for r in self._db.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as e:
            if not is_damage(e):           # an I/O or permission error is no verdict on the file
                self.check_failed = True
                raise
            return [str(e)]
        return [] if rows == ["ok"] else rows

    # -- schema ---------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        self._refuse_newer()
        for i in range(self.version, SCHEMA_VERSION):
            with self._transaction():
                MIGRATIONS[i](self._db)
                self._db.execute(f"PRAGMA user_version = {i + 1}")

    def _refuse_newer(self) -> None:
        v = self.version
        if v > SCHEMA_VERSION:
            raise NewerDatabaseError(f"{self.path}: this chats database is version {v}, from a newer Hearth "
                                     f"(this one reads up to version {SCHEMA_VERSION}); update Hearth")

    @contextlib.contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE ... COMMIT. On failure: ROLLBACK if SQLite has not already rolled back (it
        does itself after a full disk), and the real error raised, a full disk as StorageFullError."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(e):
                raise StorageFullError(f"the disk holding {self.path} is full; nothing was written") from e
            raise

    def _tx(self, sql: str, args=()) -> sqlite3.Cursor:
        with self._transaction():
            return self._db.execute(sql, args)

    def _purge_deleted(self, only_mine: bool = False) -> None:
        """Chats soft-deleted by this process (at close), or by processes that are gone (at open);
        never those another running Hearth may still undo."""
        rows = self._db.execute("SELECT DISTINCT deleted FROM chats WHERE deleted != 0").fetchall()
        owners = [o for (o,) in rows if o == os.getpid() or (not only_mine and not _process_alive(o))]
        for owner in owners:
            with contextlib.suppress(ChatStoreError):      # a full disk: purged another time
                self._tx("DELETE FROM chats WHERE deleted = ?", (owner,))

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._purge_deleted(only_mine=True)
        self._db.close()

    # -- chats ----------------------------------------------------------------------------------------
    def create_chat(self, title: str = "New chat", preset_id: str = "") -> Chat:
        now = time.time()
        cur = self._tx("INSERT INTO chats(title, preset_id, created, updated) VALUES (?, ?, ?, ?)",
                       (title, preset_id, now, now))
        return Chat(cur.lastrowid, title, preset_id, now, now)

    def chats(self) -> list[Chat]:
        """Live chats, most recently updated first."""
        rows = self._db.execute("SELECT id, title, preset_id, created, updated FROM chats "
                                "WHERE deleted = 0 ORDER BY updated DESC, id DESC").fetchall()
        return [Chat(*r) for r in rows]

    def chat(self, chat_id: int) -> Chat | None:
        r = self._db.execute("SELECT id, title, preset_id, created, updated FROM chats WHERE id = ?",
                             (chat_id,)).fetchone()
        return Chat(*r) if r else None

    def rename_chat(self, chat_id: int, title: str) -> None:
        self._tx("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def set_chat_preset(self, chat_id: int, preset_id: str) -> None:
        self._tx("UPDATE chats SET preset_id = ? WHERE id = ?", (preset_id, chat_id))

    def delete_chat(self, chat_id: int) -> None:
        """Soft delete: `undelete_chat` brings it back until this store is closed."""
        self._tx("UPDATE chats SET deleted = ? WHERE id = ?", (os.getpid(), chat_id))

    def undelete_chat(self, chat_id: int) -> None:
        self._tx("UPDATE chats SET deleted = 0 WHERE id = ?", (chat_id,))

    def empty_chat(self) -> int | None:
        """The most recent live chat without a message, if any ("New chat" reuses it)."""
        r = self._db.execute("SELECT id FROM chats WHERE deleted = 0 AND id NOT IN (SELECT chat_id FROM messages) "
                             "ORDER BY updated DESC, id DESC LIMIT 1").fetchone()
        return r[0] if r else None

    def search(self, text: str) -> list[int]:
        """Ids of live chats whose title or any message contains `text` (case-insensitive)."""
        like = f"%{text}%"
        rows = self._db.execute(
            "SELECT id FROM chats WHERE deleted = 0 AND (title LIKE ? OR id IN "
            "(SELECT chat_id FROM messages WHERE content LIKE ?))", (like, like)).fetchall()
        return [r[0] for r in rows]

    # -- messages -------------------------------------------------------------------------------------
    def messages(self, chat_id: int) -> list[Message]:
        rows = self._db.execute("SELECT id, role, content, stats, tool_calls, model FROM messages "
                                "WHERE chat_id = ? ORDER BY seq", (chat_id,)).fetchall()
        return [Message(role, content, mid, json.loads(stats), json.loads(tools), model)
                for mid, role, content, stats, tools, model in rows]

    def add_message(self, chat_id: int, msg: Message) -> Message:
        now = time.time()
        with self._transaction():
            seq = self._db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE chat_id = ?",
                                   (chat_id,)).fetchone()[0]
            cur = self._db.execute(
                "INSERT INTO messages(chat_id, seq, role, content, created, stats, tool_calls, model) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (chat_id, seq, msg.role, msg.content, now, json.dumps(msg.stats), json.dumps(msg.tool_calls),
                 msg.model))
            self._db.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
        msg.id = cur.lastrowid
        return msg

    def import_rows(self, chats: list[dict], messages: list[dict]) -> None:
        """Chats and messages read from another database (`chat_recovery`), ids kept, in one transaction."""
        with self._transaction():
            for c in chats:
                self._db.execute("INSERT INTO chats(id, title, preset_id, created, updated) VALUES (?, ?, ?, ?, ?)",
                                 (c["id"], c["title"], c["preset_id"], c["created"], c["updated"]))
            for m in messages:
                self._db.execute(
                    "INSERT INTO messages(id, chat_id, seq, role, content, created, stats, tool_calls, model) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (m["id"], m["chat_id"], m["seq"], m["role"], m["content"], m["created"], m["stats"],
                     m["tool_calls"], m["model"]))

    def truncate_from(self, chat_id: int, message_id: int) -> None:
        """Delete `message_id` and every later message of the chat (edit-and-resend, regenerate)."""
        with self._transaction():
            row = self._db.execute("SELECT seq FROM messages WHERE id = ? AND chat_id = ?",
                                   (message_id, chat_id)).fetchone()
            if row is not None:
                self._db.execute("DELETE FROM messages WHERE chat_id = ? AND seq >= ?", (chat_id, row[0]))


def _move_db_aside(path: Path, label: str) -> Path:
    """The database file and its -wal and -shm companions, renamed together to one unique name."""
    aside = move_aside(path, label)
    for suffix in ("-wal", "-shm"):
        src = Path(str(path) + suffix)
        if src.exists():
            src.replace(Path(str(aside) + suffix))
    return aside


def is_damage(e: sqlite3.DatabaseError) -> bool:
    """Whether SQLite's error says the file is damaged or no database: only these move it aside.
    Permissions, read-only media, a locked or missing folder are not damage."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    text = str(e)
    return "malformed" in text or "not a database" in text


def access_problem(path: Path, error: BaseException) -> str:
    """Why the database cannot be opened for writing, in words, naming the file or folder."""
    folder = path.parent
    try:
        if os.statvfs(folder if folder.exists() else folder.parent).f_flag & os.ST_RDONLY:
            return f"{path} is on a read-only file system"
    except OSError:
        pass
    if path.is_dir():
        return f"{path} is a folder, not a database file"
    if path.exists() and not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    if not folder.exists():
        return f"the folder {folder} cannot be made ({getattr(error, 'strerror', None) or error})"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} is read-only"
    if not os.access(folder, os.W_OK):
        return f"the folder {folder} is read-only, so {path} cannot be written"
    return f"{path} cannot be opened ({error})"


def _process_alive(pid: int) -> bool:
    """Whether a process with this id runs (1: a deletion whose process is not known, never alive)."""
    if not isinstance(pid, int) or pid <= 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # another user's process
        return True
    return True
