"""What can still be read from a damaged chats database, row by row (Qt-free).

SQLite keeps each table's rows in a b-tree of their own, apart from the indexes, so a damaged index or
a damaged page of one table leaves most rows readable by a scan in rowid order. The scan goes on past
an unreadable stretch by skipping ahead in growing steps; rows that break the schema (a NULL content,
a message of no chat) are dropped or given a placeholder chat. `ChatStore.open_or_move_aside` calls
this on the moved-aside file and imports the rows into a fresh database.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

CHAT_COLUMNS = {"id": None, "title": "Recovered chat", "preset_id": "", "created": 0.0, "updated": 0.0,
                "deleted": 0}
MESSAGE_COLUMNS = {"id": None, "chat_id": None, "seq": None, "role": None, "content": None, "created": 0.0,
                   "stats": "{}", "tool_calls": "[]", "model": ""}
ROLES = ("user", "assistant", "system", "tool")
MAX_SKIPS = 40


def read_recoverable(path: str | Path, allow_immutable: bool = False) -> tuple[list[dict], list[dict], str]:
    """(chats, messages, what could not be read: "" when nothing was lost). Chats soft-deleted in
    the old file are left out; messages keep their ids, chats and order. `allow_immutable`: a file
    in a read-only folder (where SQLite cannot make the WAL index a read needs) is read as a file
    that nothing changes."""
    src = None
    for query in ("mode=ro", "immutable=1") if allow_immutable else ("mode=ro",):
        try:
            src = sqlite3.connect(f"{Path(path).absolute().as_uri()}?{query}", uri=True)
            src.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            break
        except sqlite3.Error:
            if src is not None:
                src.close()
            src = None
    if src is None:
        return [], [], "the file is not a database"
    losses: list[str] = []
    try:
        chats = [c for c in _rows(src, "chats", CHAT_COLUMNS, losses) if _chat_ok(c)]
        messages = [m for m in _rows(src, "messages", MESSAGE_COLUMNS, losses) if _message_ok(m)]
    finally:
        src.close()
    deleted = {c["id"] for c in chats if c["deleted"]}
    chats = [c for c in chats if not c["deleted"]]
    messages = [m for m in messages if m["chat_id"] not in deleted]
    known = {c["id"] for c in chats}
    for chat_id in sorted({m["chat_id"] for m in messages} - known):
        chats.append({**CHAT_COLUMNS, "id": chat_id, "title": f"Recovered chat {chat_id}",
                      "created": time.time(), "updated": time.time()})
    messages.sort(key=lambda m: (m["chat_id"], m["seq"], m["id"]))
    return chats, messages, "; ".join(losses)


def _rows(src: sqlite3.Connection, table: str, columns: dict, losses: list[str]):
    """The table's readable rows as dicts of `columns` (defaults for columns the file lacks)."""
    try:
        present = [r[1] for r in src.execute(f"PRAGMA table_info({table})").fetchall()]
    except sqlite3.Error:
        losses.append(f"the {table} table")
        return
    if not present:
        losses.append(f"the {table} table")
        return
    names = [c for c in columns if c in present]
    sql = f"SELECT rowid, {', '.join(names)} FROM {table} NOT INDEXED WHERE rowid > ? ORDER BY rowid"
    last, step, skips = 0, 1, 0
    while True:
        try:
            for row in src.execute(sql, (last,)):
                last = row[0]
                step = 1
                yield {**columns, **dict(zip(names, row[1:]))}
            return
        except sqlite3.DatabaseError:
            skips += 1
            if skips == 1:
                losses.append(f"some {table} after row {last}")
            if skips > MAX_SKIPS:
                return
            last += step
            step *= 2


def _chat_ok(c: dict) -> bool:
    return isinstance(c["id"], int) and isinstance(c["title"], str)


def _message_ok(m: dict) -> bool:
    if not (isinstance(m["id"], int) and isinstance(m["chat_id"], int) and isinstance(m["seq"], int)):
        return False
    if m["role"] not in ROLES or not isinstance(m["content"], str):
        return False
    for key, empty in (("stats", "{}"), ("tool_calls", "[]")):
        try:
            json.loads(m[key])
        except (TypeError, ValueError):
            m[key] = empty
    return True
