"""The open chat: its MessageModel, sending, streaming, stop, regenerate, edit-and-resend.

GUI thread only. Streamed deltas from the worker are buffered and written into the model at most
every FLUSH_MS, so a fast model cannot flood the event loop with layout work. A reply is written to
the ChatStore when it ends (finished or stopped), in one transaction; while it streams it lives only
here, so a crash loses at most that reply.

A message the store cannot write (the disk is full) is kept here, shown as usual, and written, in
order with any later ones, as soon as a retry every RETRY_MS succeeds; the chat goes on meanwhile.

Signals:
    generatingChanged(bool)
    replyFinished(dict stats)         a reply ended (stats has stop_reason)
    replyFailed(str message)          an engine error ended the reply; shown in its bubble
    chatCreated(object Chat), chatChanged(int id)   for the chat list
    storageFailed(str message)        a write failed: what is kept and what the user can do
    storageRecovered(str message)     every kept message is saved now
"""

from __future__ import annotations

import sqlite3
import time

from PySide6.QtCore import QObject, QTimer, Signal

from hearth.engine.chat.preset_format import Preset
from hearth.engine.chat.reasoning import ThinkingSplitter

from ..store.chat_store import Chat, ChatStore, ChatStoreError, Message
from ..store.item_models import MessageModel
from .reply_versions import count as version_count
from .reply_versions import kept_for_regenerate, showing, with_versions
from ..store.preset_store import PresetStore
from ..servers.remote_source import remote_tool_calls
from ..tools.tool_flow import ToolFlow, record_of, with_round
from ..worker import EngineClient

FLUSH_MS = 30
TITLE_LEN = 48
RETRY_MS = 5000


class Conversation(QObject):
    generatingChanged = Signal(bool)
    replyFinished = Signal(dict)
    replyFailed = Signal(str)
    chatCreated = Signal(object)
    chatChanged = Signal(int)
    storageFailed = Signal(str)
    storageRecovered = Signal(str)

    def __init__(self, chats: ChatStore, presets: PresetStore, client: EngineClient, parent=None):
        super().__init__(parent)
        self.chats = chats
        self.presets = presets
        self.client = client
        self.model = MessageModel(self)
        self.chat_id: int | None = None
        self.model_name = ""
        self._gen: dict | None = None        # {"rid", "chat", "text", "row", "pending"}
        self._flush = QTimer(self, singleShot=True, interval=FLUSH_MS)
        self._flush.timeout.connect(self._on_flush)
        # Tool calls: the flow confirms and runs them; `reply_prefixes` are texts the next
        # replies start with ("continue from this text"; tests use it to script a call).
        self.tools = ToolFlow(self)
        self.tools.roundDone.connect(self._on_round_done)
        self.tools.recordsChanged.connect(self._on_records)
        self.tool_format = "generic"
        self.tools_of = lambda preset: preset.tools    # a preset's tools; the window adds its MCP tools
        self.reply_prefixes: list[str] = []
        self.template_vars: dict = {}        # extra chat-template variables: enable_thinking
        self._closing = False
        self._unsaved: list[dict] = []        # {"chat", "msg", "row_msg"}: to write, in this order
        self._retry = QTimer(self, interval=RETRY_MS)
        self._retry.timeout.connect(self.save_unsaved)
        self._round_msg: dict | None = None   # {"chat", "row", "msg", "stopped"} while a round runs
        client.worker.modelLoaded.connect(lambda info: setattr(self, "tool_format", info.get("tool_format", "generic")))
        w = client.worker
        w.delta.connect(self._on_delta)
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)

    # -- chats ----------------------------------------------------------------------------------------
    @property
    def generating(self) -> bool:
        return self._gen is not None or self._round_msg is not None

    def replying_chat(self) -> int | None:
        """The chat whose reply is in progress (streaming or in a tool round), if any."""
        g = self._gen or self._round_msg
        return g["chat"] if g is not None else None

    def preset(self) -> Preset:
        chat = self.chats.chat(self.chat_id) if self.chat_id else None
        p = self.presets.get(chat.preset_id) if chat else None
        return p or self.presets.presets[0]

    def open_chat(self, chat_id: int | None) -> None:
        self.chat_id = chat_id
        try:
            msgs = self.chats.messages(chat_id) if chat_id else []
        except sqlite3.DatabaseError as e:     # damaged since the check at start
            msgs = []
            self.storageFailed.emit(f"This chat could not be read ({e}). Restart Hearth: it checks the chats "
                                    "database at start and recovers what can be read.")
        self.model.set_messages(msgs)
        for u in self._unsaved:               # kept in memory until the disk has room: shown too
            if u["chat"] == chat_id:
                u["row_msg"] = self.model.message(self.model.append(u["msg"]))
        g = self._gen
        if g is not None and g["chat"] == chat_id:
            self._flush_now()
            g["row"] = self.model.append(Message("assistant", g["text"]), streaming=True)
        elif g is not None:
            g["row"] = -1
        rm = self._round_msg
        if rm is not None:
            rm["row"] = self.model.append(rm["msg"]) if rm["chat"] == chat_id else -1
        self.open_context()

    def open_context(self) -> None:
        """Ask the worker to bring the open chat's context back (restored from disk if saved)."""
        if self.chat_id and self.replying_chat() != self.chat_id:
            p = self.preset()
            has = self.model.rowCount() > 0
            self.client.open_chat(self._chat_ref(), self.history() if has else [], p.tools,
                                  system=p.system_prompt, preset_id=p.id, label=p.name)

    def _chat_ref(self) -> dict:
        """The open chat as the worker names its saved context."""
        chat = self.chats.chat(self.chat_id) if self.chat_id else None
        return {"id": str(self.chat_id), "title": chat.title if chat else ""}

    def new_chat(self, preset_id: str) -> Chat | None:
        try:
            chat = self.chats.create_chat("New chat", preset_id)
        except ChatStoreError as e:
            self.storageFailed.emit(f"Could not start a chat: {e}. Free some space and try again.")
            return None
        self.chatCreated.emit(chat)
        self.open_chat(chat.id)
        return chat

    # -- sending --------------------------------------------------------------------------------------
    def send(self, text: str, preset_id: str, edit_row: int | None = None) -> bool:
        """Add a user message (replacing `edit_row` and everything after it) and start a reply."""
        text = text.strip()
        if not text or self.generating:
            return False
        if self.chat_id is None and self.new_chat(preset_id) is None:
            return False
        if edit_row is not None and 0 <= edit_row < self.model.rowCount() and not self._truncate(edit_row):
            return False
        msg = Message("user", text)
        self._save(self.chat_id, msg, msg)     # saved (or kept) first, so the row appears with its id
        self.model.append(msg)
        chat = self.chats.chat(self.chat_id)
        if chat and chat.title == "New chat":
            title = " ".join(text.split())
            try:
                self.chats.rename_chat(self.chat_id, title[:TITLE_LEN] + ("…" if len(title) > TITLE_LEN else ""))
            except ChatStoreError:
                pass                          # the title stays "New chat"; the message itself is kept
        self.chatChanged.emit(self.chat_id)
        self._start()
        return True

    def regenerate(self) -> bool:
        """Replace the last reply with a new one."""
        if self.generating or self.chat_id is None:
            return False
        msgs = self.model.messages()
        last_user = max((i for i, m in enumerate(msgs) if m.role == "user"), default=-1)
        rows = [i for i, m in enumerate(msgs) if m.role == "assistant" and i > last_user]
        kept = kept_for_regenerate(msgs[rows[0]]) if len(rows) == 1 else []
        if rows and not self._truncate(rows[0]):   # the whole reply goes, tool rounds included
            return False                           # (a plain reply stays as a version)
        if not self.model.rowCount() or self.model.message(self.model.rowCount() - 1).role != "user":
            return False
        self._start()
        self._gen["versions"] = kept
        return True

    def switch_version(self, row: int, step: int) -> bool:
        """Show the previous (step -1) or next (+1) version of the last reply; the chat goes on
        from the one shown."""
        if self.generating or self.chat_id is None or row != self.model.rowCount() - 1:
            return False
        m = self.model.message(row)
        shown, n = version_count(m.stats)
        k = shown - 1 + step
        if m.role != "assistant" or not 0 <= k < n:
            return False
        new = showing(m, k)
        self._truncate(row)
        saved = self.chats.add_message(self.chat_id, new)
        self.model.append(saved)
        self.chatChanged.emit(self.chat_id)
        return True

    def stop(self) -> None:
        if self._gen is not None:
            self._gen["user_stop"] = True
            self.client.stop()
        elif self._round_msg is not None:
            self._round_msg["stopped"] = True
            self.tools.stop()

    def _truncate(self, row: int) -> bool:
        """Drop `row` and all after it, stored and kept; False (and nothing dropped) when the store
        cannot write."""
        m = self.model.message(row)
        if m.id:
            try:
                self.chats.truncate_from(self.chat_id, m.id)
            except ChatStoreError as e:
                self.storageFailed.emit(f"Could not change the chat: {e}. Free some space and try again.")
                return False
        gone = {id(x) for x in self.model.messages()[row:]}
        self._unsaved = [u for u in self._unsaved if id(u["row_msg"]) not in gone]
        self.model.truncate(row)
        return True

    # -- writing --------------------------------------------------------------------------------------
    def _save(self, chat_id: int, msg: Message, row_msg: Message | None) -> None:
        """Write `msg` (shown as `row_msg`, which gets its id), after any messages still kept; when
        the store cannot write, keep it and say so once."""
        self._unsaved.append({"chat": chat_id, "msg": msg, "row_msg": row_msg})
        error = self._write_unsaved()
        if error is None:
            return
        if not self._retry.isActive():
            self._retry.start()
            self.storageFailed.emit(f"Could not save the chat: {error}. What you see is kept and will be saved "
                                    "as soon as there is room; free some space (you can also copy the reply).")

    def save_unsaved(self) -> bool:
        """Try again to write what is kept; True when nothing is left."""
        had = bool(self._unsaved)
        if self._write_unsaved() is not None:
            return False
        self._retry.stop()
        if had:
            self.storageRecovered.emit("There is room again: every message is saved.")
        return True

    def _write_unsaved(self) -> ChatStoreError | None:
        while self._unsaved:
            u = self._unsaved[0]
            try:
                saved = self.chats.add_message(u["chat"], u["msg"])
            except ChatStoreError as e:
                return e
            except sqlite3.IntegrityError:    # its chat was deleted meanwhile: nothing to keep it in
                saved = None
            self._unsaved.pop(0)
            if saved is not None and u["row_msg"] is not None:
                u["row_msg"].id = saved.id
                for row, m in enumerate(self.model.messages()):
                    if m is u["row_msg"]:
                        self.model.set_id(row, saved.id)
            if saved is not None:
                self.chatChanged.emit(u["chat"])
        return None

    def history(self, upto: int | None = None) -> list[dict]:
        """The chat as template messages (the messages before row `upto`, all by default)."""
        p = self.preset()
        msgs = [{"role": "system", "content": p.system_prompt}] if p.system_prompt else []
        for m in self.model.messages()[:upto]:
            if m.role == "assistant" and not m.content and (m.stats or {}).get("error"):
                continue   # a failed reply: the model never wrote it
            if m.role == "assistant" and m.tool_calls:
                msgs = with_round(msgs, m.content, m.tool_calls)
            elif m.role == "assistant" and (m.stats or {}).get("thinking"):
                # the template decides whether earlier thinking goes back into the prompt
                msgs.append({"role": "assistant", "content": m.content,
                             "reasoning_content": m.stats["thinking"].get("text", "")})
            elif m.role == "user" and msgs and msgs[-1]["role"] == "user":
                # after a failed reply: templates want user and assistant turns to alternate
                msgs[-1] = {"role": "user", "content": f"{msgs[-1]['content']}\n\n{m.content}"}
            elif m.role in ("user", "assistant"):
                msgs.append({"role": m.role, "content": m.content})
        return msgs

    def _template_vars(self, p) -> dict:
        """The chat template's extra variables: the window's (enable_thinking) and the preset's
        reasoning effort (gpt-oss's template reads it; others ignore it)."""
        out = dict(self.template_vars)
        if p.reasoning_effort:
            out["reasoning_effort"] = p.reasoning_effort
        return out

    def _tool_round_no(self) -> int:
        """1 + the tool rounds since the last user message."""
        n = 0
        for m in reversed(self.model.messages()):
            if m.role != "assistant" or not m.tool_calls:
                break
            n += 1
        return n + 1

    def _start(self) -> None:
        p = self.preset()
        history = self.history()          # before the reply's own (empty) row is added
        if self.reply_prefixes:
            history.append({"role": "assistant", "content": self.reply_prefixes.pop(0)})
        round_no = self._tool_round_no()
        row = self.model.append(Message("assistant", "", model=self.model_name), streaming=True)
        tools = self.tools_of(p)
        rid = self.client.generate(history, tools, dict(p.sampling), system=p.system_prompt,
                                   preset_id=p.id, label=p.name, context_policy=p.context_policy,
                                   template_vars=self._template_vars(p), chat=self._chat_ref())
        self._gen = {"rid": rid, "chat": self.chat_id, "text": "", "row": row, "pending": "",
                     "parse": self.tools.parse_reply(self.tool_format, tools), "tools": list(tools),
                     "round": round_no, "think": ThinkingSplitter(),
                     "thinking": {"text": "", "tokens": 0, "seconds": 0.0, "done": False}, "think_t0": None}
        self.generatingChanged.emit(True)

    # -- worker signals -------------------------------------------------------------------------------
    def _on_delta(self, rid: int, text: str) -> None:
        g = self._gen
        if g is None or rid != g["rid"]:
            return
        thought, text = g["think"].feed(text)
        self._add_thinking(g, thought)
        if not text:
            return
        text = g["parse"].feed(text)
        if g["parse"].ended and not g.get("tool_stop"):
            g["tool_stop"] = True   # the call is complete: what follows would be an invented result
            self.client.stop()
        g["text"] += text
        g["pending"] += text
        if not self._flush.isActive():
            self._flush.start()

    def _add_thinking(self, g: dict, thought: str) -> None:
        """Count and time the thinking (a delta is a token) and show it as it streams."""
        th = g["thinking"]
        if thought or g["think"].state == "thinking":
            th["tokens"] += 1
            g["think_t0"] = g["think_t0"] or time.monotonic()
        th["text"] += thought
        if g["think_t0"] is not None and not th["done"]:
            th["seconds"] = time.monotonic() - g["think_t0"]
            th["done"] = g["think"].thinking_done
            g["think_dirty"] = True
            if not self._flush.isActive():
                self._flush.start()

    def _on_flush(self) -> None:
        self._flush_now()

    def _flush_now(self) -> None:
        g = self._gen
        if g is not None and g.get("think_dirty") and g["row"] >= 0:
            g["think_dirty"] = False
            self.model.set_thinking(g["row"], g["thinking"])
        if g is None or not g["pending"]:
            return
        if g["row"] >= 0:
            self.model.append_text(g["row"], g["pending"])
        g["pending"] = ""

    def _end(self, stats: dict, error: str = "") -> None:
        g = self._gen
        thought, rest = g["think"].finish()
        self._add_thinking(g, thought)
        if g["thinking"]["text"].strip():
            stats = {**stats, "thinking": {**g["thinking"], "done": True}}
        rest = g["parse"].feed(rest) + g["parse"].finish()
        g["text"] += rest
        g["pending"] += rest
        self._flush_now()
        self._flush.stop()
        calls = g["parse"].calls or remote_tool_calls(stats.pop("tool_calls", None), g["tools"])
        if calls and not error:
            self._end_with_calls(g, stats, calls)
            return
        # A failed reply is kept too, with its error: after a restart the chat still ends with a
        # reply that says what went wrong and can be regenerated, never with an unanswered message.
        if error:
            stats = {**stats, "error": error}
        stats = with_versions(stats, g.get("versions") or [])
        if g["row"] >= 0:
            self.model.finish(g["row"], stats, error)
        self._gen = None
        self._save(g["chat"], Message("assistant", g["text"], stats=dict(stats), model=self.model_name),
                   self.model.message(g["row"]) if g["row"] >= 0 else None)
        self.generatingChanged.emit(False)

    def _end_with_calls(self, g: dict, stats: dict, calls: list) -> None:
        """The reply called tools: show its calls, then confirm and run them (or, when the user
        pressed Stop, keep them as not run)."""
        stats = dict(stats)
        records = [record_of(c) for c in calls]
        stopped = bool(g.get("user_stop"))
        if stopped:
            for r in records:
                if r["status"] == "pending":
                    r.update(status="stopped", is_error=True, result="Error: stopped by the user")
        else:
            stats["stop_reason"] = "tool_calls"
        msg = Message("assistant", g["text"].strip(), stats=stats, tool_calls=records, model=self.model_name)
        if g["row"] >= 0:
            m = self.model.message(g["row"])
            m.content = msg.content
            self.model.set_tool_calls(g["row"], records)
            self.model.finish(g["row"], stats)
        self._gen = None
        self._round_msg = {"chat": g["chat"], "row": g["row"], "msg": msg, "stopped": stopped,
                           "round": g["round"]}
        if stopped:
            self._on_round_done(records)
        else:
            self.tools.start_round(g["chat"], calls, g["tools"], g["round"])

    def _on_records(self, records: list) -> None:
        rm = self._round_msg
        if rm is not None and rm["row"] >= 0:
            self.model.set_tool_calls(rm["row"], records)

    def _on_round_done(self, records: list) -> None:
        """Every call has its result: save the reply with its calls and continue the reply."""
        rm = self._round_msg
        if rm is None:
            return
        rm["msg"].tool_calls = records
        if rm["row"] >= 0:
            self.model.set_tool_calls(rm["row"], records)
        self._round_msg = None
        self._save(rm["chat"], rm["msg"], self.model.message(rm["row"]) if rm["row"] >= 0 else None)
        go_on = (not rm["stopped"] and rm["chat"] == self.chat_id and not self._closing
                 and rm["round"] <= self.tools.max_rounds)
        if go_on:
            self._start()
        else:
            self.generatingChanged.emit(False)

    def _on_finished(self, rid: int, stats: dict) -> None:
        if self._gen is None or rid != self._gen["rid"]:
            return
        self._end(stats)
        self.replyFinished.emit(stats)

    def _on_failed(self, rid: int, message: str) -> None:
        if self._gen is None or rid != self._gen["rid"]:
            return
        self._end({"stop_reason": "error"}, message)
        self.replyFailed.emit(message)

    def close(self) -> None:
        """At quit: keep what was streamed of a reply in progress (and a last try at what is kept)."""
        self._closing = True
        if self._gen is not None:
            self._gen["user_stop"] = True
            self._end({"stop_reason": "interrupted"})
        if self._round_msg is not None:
            self.stop()
        self.save_unsaved()
