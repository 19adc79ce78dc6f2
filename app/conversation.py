"""The open chat: its MessageModel, sending, streaming, stop, regenerate, edit-and-resend.

GUI thread only. Streamed deltas from the worker are buffered and written into the model at most
every FLUSH_MS, so a fast model cannot flood the event loop with layout work. A reply is written to
the ChatStore when it ends (finished or stopped), in one transaction; while it streams it lives only
here, so a crash loses at most that reply.

Signals:
    generatingChanged(bool)
    replyFinished(dict stats)         a reply ended and was saved (stats has stop_reason)
    replyFailed(str message)          an engine error ended the reply; shown in its bubble
    chatCreated(object Chat), chatChanged(int id)   for the chat list
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from engine.preset_format import Preset

from .chat_store import Chat, ChatStore, Message
from .item_models import MessageModel
from .preset_store import PresetStore
from .remote_source import remote_tool_calls
from .tool_flow import ToolFlow, record_of, with_round
from .worker import EngineClient

FLUSH_MS = 30
TITLE_LEN = 48


class Conversation(QObject):
    generatingChanged = Signal(bool)
    replyFinished = Signal(dict)
    replyFailed = Signal(str)
    chatCreated = Signal(object)
    chatChanged = Signal(int)

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
        self._closing = False
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
        msgs = self.chats.messages(chat_id) if chat_id else []
        self.model.set_messages(msgs)
        g = self._gen
        if g is not None and g["chat"] == chat_id:
            self._flush_now()
            g["row"] = self.model.append(Message("assistant", g["text"]), streaming=True)
        elif g is not None:
            g["row"] = -1
        rm = self._round_msg
        if rm is not None:
            rm["row"] = self.model.append(rm["msg"]) if rm["chat"] == chat_id else -1

    def new_chat(self, preset_id: str) -> Chat:
        chat = self.chats.create_chat("New chat", preset_id)
        self.chatCreated.emit(chat)
        self.open_chat(chat.id)
        return chat

    # -- sending --------------------------------------------------------------------------------------
    def send(self, text: str, preset_id: str, edit_row: int | None = None) -> bool:
        """Add a user message (replacing `edit_row` and everything after it) and start a reply."""
        text = text.strip()
        if not text or self.generating:
            return False
        if self.chat_id is None:
            self.new_chat(preset_id)
        if edit_row is not None and 0 <= edit_row < self.model.rowCount():
            self._truncate(edit_row)
        msg = self.chats.add_message(self.chat_id, Message("user", text))
        self.model.append(msg)
        chat = self.chats.chat(self.chat_id)
        if chat and chat.title == "New chat":
            title = " ".join(text.split())
            self.chats.rename_chat(self.chat_id, title[:TITLE_LEN] + ("…" if len(title) > TITLE_LEN else ""))
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
        if rows:   # the whole reply goes, tool rounds included
            self._truncate(rows[0])
        if not self.model.rowCount() or self.model.message(self.model.rowCount() - 1).role != "user":
            return False
        self._start()
        return True

    def stop(self) -> None:
        if self._gen is not None:
            self._gen["user_stop"] = True
            self.client.stop()
        elif self._round_msg is not None:
            self._round_msg["stopped"] = True
            self.tools.stop()

    def _truncate(self, row: int) -> None:
        m = self.model.message(row)
        if m.id:
            self.chats.truncate_from(self.chat_id, m.id)
        self.model.truncate(row)

    def history(self) -> list[dict]:
        p = self.preset()
        msgs = [{"role": "system", "content": p.system_prompt}] if p.system_prompt else []
        for m in self.model.messages():
            if m.role == "assistant" and m.tool_calls:
                msgs = with_round(msgs, m.content, m.tool_calls)
            elif m.role in ("user", "assistant"):
                msgs.append({"role": m.role, "content": m.content})
        return msgs

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
        row = self.model.append(Message("assistant", ""), streaming=True)
        tools = self.tools_of(p)
        rid = self.client.generate(history, tools, dict(p.sampling), system=p.system_prompt,
                                   preset_id=p.id, label=p.name)
        self._gen = {"rid": rid, "chat": self.chat_id, "text": "", "row": row, "pending": "",
                     "parse": self.tools.parse_reply(self.tool_format, tools), "tools": list(tools),
                     "round": round_no}
        self.generatingChanged.emit(True)

    # -- worker signals -------------------------------------------------------------------------------
    def _on_delta(self, rid: int, text: str) -> None:
        g = self._gen
        if g is None or rid != g["rid"]:
            return
        text = g["parse"].feed(text)
        if g["parse"].ended and not g.get("tool_stop"):
            g["tool_stop"] = True   # the call is complete: what follows would be an invented result
            self.client.stop()
        g["text"] += text
        g["pending"] += text
        if not self._flush.isActive():
            self._flush.start()

    def _on_flush(self) -> None:
        self._flush_now()

    def _flush_now(self) -> None:
        g = self._gen
        if g is None or not g["pending"]:
            return
        if g["row"] >= 0:
            self.model.append_text(g["row"], g["pending"])
        g["pending"] = ""

    def _end(self, stats: dict, error: str = "") -> None:
        g = self._gen
        rest = g["parse"].finish()
        g["text"] += rest
        g["pending"] += rest
        self._flush_now()
        self._flush.stop()
        calls = g["parse"].calls or remote_tool_calls(stats.pop("tool_calls", None), g["tools"])
        if calls and not error:
            self._end_with_calls(g, stats, calls)
            return
        saved = None
        if g["text"] or not error:
            saved = self.chats.add_message(g["chat"], Message("assistant", g["text"], stats=dict(stats),
                                                              model=self.model_name))
            self.chatChanged.emit(g["chat"])
        if g["row"] >= 0:
            self.model.finish(g["row"], stats, error)
            if saved is not None:
                self.model.set_id(g["row"], saved.id)
        self._gen = None
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
        saved = self.chats.add_message(rm["chat"], rm["msg"])
        if rm["row"] >= 0:
            self.model.set_tool_calls(rm["row"], records)
            self.model.set_id(rm["row"], saved.id)
        self.chatChanged.emit(rm["chat"])
        self._round_msg = None
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
        """At quit: keep what was streamed of a reply in progress."""
        self._closing = True
        if self._gen is not None:
            self._gen["user_stop"] = True
            self._end({"stop_reason": "interrupted"})
        if self._round_msg is not None:
            self.stop()
