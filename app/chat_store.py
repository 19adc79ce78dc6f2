"""Chats in SQLite: Qt-free, transactional, schema versioned with migrations.

The database lives at `data_dir()/chats.sqlite3`. Its schema version is SQLite's `PRAGMA user_version`;
`MIGRATIONS[i]` takes a database from version i to i + 1, inside one transaction, so a crash during an
upgrade leaves the old version intact. Every write is its own transaction (`with self._db:`), and a
reply is written only once it is finished or stopped, so a crash or kill at any moment loses at most
the reply in progress.

Tables (version 2):
    chats(id, title, preset_id, created, updated, deleted)   deleted = 1 while an undo is possible;
                                                             such rows are purged at the next open
    messages(id, chat_id, seq, role, content, created, stats JSON, tool_calls JSON, model)
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path


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


class ChatStore:
    """All chats of one user. Methods are small transactions; nothing here knows about Qt."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we open transactions ourselves, so DDL in migrations is transactional too.
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._migrate()
        self._tx("DELETE FROM chats WHERE deleted = 1")

    @classmethod
    def open_or_move_aside(cls, path: str | Path) -> tuple["ChatStore", str]:
        """Open the store; a file that is not a readable SQLite database is moved aside (never
        deleted) and a fresh one started. Returns (store, a notice for the user or "")."""
        path = Path(path)
        try:
            store = cls(path)
            store._db.execute("PRAGMA quick_check").fetchone()
            return store, ""
        except sqlite3.DatabaseError as e:
            aside = path.with_name(f"{path.stem}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
            for suffix in ("", "-wal", "-shm"):
                src = Path(str(path) + suffix)
                if src.exists():
                    src.replace(Path(str(aside) + suffix))
            return cls(path), (f"Your chats database could not be read ({e}). It was moved to {aside} "
                               "and a new, empty one was started.")

    # -- schema ---------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        v = self.version
        if v > SCHEMA_VERSION:
            raise ChatStoreError(f"{self.path}: chat database version {v} is newer than this Hearth "
                                 f"understands ({SCHEMA_VERSION}); update Hearth")
        for i in range(v, SCHEMA_VERSION):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                MIGRATIONS[i](self._db)
                self._db.execute(f"PRAGMA user_version = {i + 1}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _tx(self, sql: str, args=()) -> sqlite3.Cursor:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            cur = self._db.execute(sql, args)
            self._db.execute("COMMIT")
            return cur
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
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
        """Soft delete: `undelete_chat` brings it back until the store is next opened."""
        self._tx("UPDATE chats SET deleted = 1 WHERE id = ?", (chat_id,))

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
        self._db.execute("BEGIN IMMEDIATE")
        try:
            seq = self._db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE chat_id = ?",
                                   (chat_id,)).fetchone()[0]
            cur = self._db.execute(
                "INSERT INTO messages(chat_id, seq, role, content, created, stats, tool_calls, model) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (chat_id, seq, msg.role, msg.content, now, json.dumps(msg.stats), json.dumps(msg.tool_calls),
                 msg.model))
            self._db.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        msg.id = cur.lastrowid
        return msg

    def truncate_from(self, chat_id: int, message_id: int) -> None:
        """Delete `message_id` and every later message of the chat (edit-and-resend, regenerate)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT seq FROM messages WHERE id = ? AND chat_id = ?",
                                   (message_id, chat_id)).fetchone()
            if row is not None:
                self._db.execute("DELETE FROM messages WHERE chat_id = ? AND seq >= ?", (chat_id, row[0]))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
