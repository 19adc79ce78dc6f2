"""Chats out of and into files (Qt-free): Markdown to read, JSON to re-import.

JSON, `hearth-chats` version 1, holds everything a message has (its text, stats with the thinking
and the versions Regenerate kept, tool calls with their results, the model), so an import gives
back the same chat:
    {"format": "hearth-chats", "version": 1,
     "chats": [{"title", "preset_id", "created", "messages": [{"role", "content", "stats",
                                                             "tool_calls", "model"}]}]}
An import adds the chats as new ones (never replaces a chat); a file that is not such JSON is
refused whole with what is wrong, and nothing is added.
"""

from __future__ import annotations

import json

from hearth.engine.system.atomic_file import write_text_atomic

from .chat_store import Chat, ChatStore, Message

FORMAT = "hearth-chats"
VERSION = 1
ROLES = ("user", "assistant", "system", "tool")


class ChatImportError(ValueError):
    """The file cannot be imported; the message says why."""


def chat_json(chat: Chat, messages: list[Message]) -> dict:
    return {"title": chat.title, "preset_id": chat.preset_id, "created": chat.created,
            "messages": [{"role": m.role, "content": m.content, "stats": m.stats, "tool_calls": m.tool_calls,
                          "model": m.model} for m in messages]}


def dumps_json(chats: list[tuple[Chat, list[Message]]]) -> str:
    return json.dumps({"format": FORMAT, "version": VERSION, "chats": [chat_json(c, ms) for c, ms in chats]},
                      indent=2, ensure_ascii=False) + "\n"


def chat_markdown(chat: Chat, messages: list[Message]) -> str:
    out = [f"# {chat.title}", ""]
    for m in messages:
        who = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}.get(m.role, m.role)
        if m.role == "assistant" and m.model:
            who += f" ({m.model})"
        out += [f"### {who}", ""]
        thinking = (m.stats or {}).get("thinking") or {}
        if thinking.get("text"):
            out += ["<details><summary>Thinking</summary>", "", thinking["text"].strip(), "", "</details>", ""]
        if m.content:
            out += [m.content.rstrip(), ""]
        for c in m.tool_calls or []:
            call = {"name": c.get("name"), "arguments": c.get("arguments")}
            out += [f"Tool call `{c.get('name', '?')}`:", "", "```json", json.dumps(call, ensure_ascii=False, indent=2),
                    "```", "", "Result:", "", "```", str(c.get("result", "")), "```", ""]
        if (m.stats or {}).get("error"):
            out += [f"> Error: {m.stats['error']}", ""]
    return "\n".join(out).rstrip() + "\n"


def dumps_markdown(chats: list[tuple[Chat, list[Message]]]) -> str:
    return "\n---\n\n".join(chat_markdown(c, ms) for c, ms in chats)


def export(store: ChatStore, chat_ids: list[int], path: str, fmt: str) -> None:
    """Write the chats to `path` as "json" or "markdown", whole or not at all."""
    chats = [(store.chat(cid), store.messages(cid)) for cid in chat_ids]
    chats = [(c, ms) for c, ms in chats if c is not None]
    write_text_atomic(path, dumps_json(chats) if fmt == "json" else dumps_markdown(chats))


def parse_json(text: str, source: str = "file") -> list[dict]:
    """The chats of a `hearth-chats` file, checked; ChatImportError says what is wrong."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ChatImportError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ChatImportError(f"{source}: not a Hearth chats file (expected \"format\": \"{FORMAT}\")")
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise ChatImportError(f"{source}: version {doc.get('version')!r} is not one this Hearth reads ({VERSION})")
    chats = doc.get("chats")
    if not isinstance(chats, list):
        raise ChatImportError(f"{source}: \"chats\" must be a list")
    for i, c in enumerate(chats):
        where = f"{source}: chats[{i}]"
        if not isinstance(c, dict) or not isinstance(c.get("title"), str) or not isinstance(c.get("messages"), list):
            raise ChatImportError(f"{where}: needs a \"title\" and a list of \"messages\"")
        for j, m in enumerate(c["messages"]):
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise ChatImportError(f"{where}.messages[{j}]: needs a \"role\" ({', '.join(ROLES)}) and a "
                                   "\"content\" string")
            if not isinstance(m.get("stats", {}), dict) or not isinstance(m.get("tool_calls", []), list):
                raise ChatImportError(f"{where}.messages[{j}]: \"stats\" must be an object, \"tool_calls\" a list")
    return chats


def import_json(store: ChatStore, text: str, source: str = "file") -> list[Chat]:
    """Add the file's chats to `store` as new chats; all are checked before any is added."""
    added = []
    for c in parse_json(text, source):
        chat = store.create_chat(c["title"], str(c.get("preset_id") or ""))
        for m in c["messages"]:
            store.add_message(chat.id, Message(m["role"], m["content"], stats=dict(m.get("stats") or {}),
                                               tool_calls=list(m.get("tool_calls") or []),
                                               model=str(m.get("model") or "")))
        added.append(store.chat(chat.id))
    return added
