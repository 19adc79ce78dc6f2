"""Tool calls in the open chat: parse the streaming reply, confirm and run each call, continue.

GUI thread, except the tools themselves, which run on a short-lived helper thread (fetch_url may
take seconds; the calculator is instant) and answer by a queued signal.

A tool round, as the Conversation drives it:
    parse = flow.parse_reply(fmt, preset_tools)   # per generation; feed() returns the visible text,
                                                  # parse.ended: text after the calls (stop now)
    flow.start_round(chat_id, parse.calls, round_no)   # -> confirmRequested / roundDone(list records)

A call's record (what is stored in the message's `tool_calls` column and shown as a block):
    {"id", "name", "arguments", "raw", "error",        # error: why a malformed call is malformed
     "status": pending | allowed | denied | malformed | limit | stopped,
     "result": str, "is_error": bool}

Signals:
    confirmRequested(dict record, str kind)   kind: "run" (Allow/Deny), "file" (read_file: pick a
                                              file), "type" (a custom tool: the user types the result)
    confirmCleared()                          nothing waits for the user any more
    recordsChanged(list records)              a record got its status/result (update the block)
    roundDone(list records)                   every call of the round has its result
"""

from __future__ import annotations

import threading
import uuid

from PySide6.QtCore import QObject, Signal

from hearth.engine.tools import (
    MalformedToolCall,
    TextDelta,
    ToolCall,
    ToolCallParser,
    ToolContext,
    ToolRegistry,
    ToolResult,
    error_result,
    messages_with_tool_round,
)

MAX_ROUNDS = 5


class ReplyParse:
    """One generation's text through the tool-call parser. Text after a call ends the reply: small
    models go on to invent the tool's result."""

    def __init__(self, fmt: str, registry: ToolRegistry | None):
        self.parser = ToolCallParser(fmt, registry, id_prefix=f"call_{uuid.uuid4().hex[:6]}_") \
            if registry is not None and len(registry) else None
        self.calls: list = []
        self.ended = False

    def feed(self, text: str) -> str:
        if self.ended:
            return ""
        if self.parser is None:
            return text
        return self._take(self.parser.feed(text))

    def finish(self) -> str:
        if self.parser is None or self.ended:
            return ""
        return self._take(self.parser.finish())

    def _take(self, events) -> str:
        out = []
        for e in events:
            if isinstance(e, (ToolCall, MalformedToolCall)):
                self.calls.append(e)
            elif isinstance(e, TextDelta):
                if self.calls and e.text.strip():
                    self.ended = True
                    break
                out.append(e.text)
        return "".join(out)


def record_of(call) -> dict:
    if isinstance(call, MalformedToolCall):
        return {"id": call.id, "name": call.name or "", "arguments": {}, "raw": call.raw, "error": call.error,
                "status": "malformed", "result": error_result(call).content, "is_error": True}
    return {"id": call.id, "name": call.name, "arguments": dict(call.arguments), "raw": call.raw, "error": "",
            "status": "pending", "result": "", "is_error": False}


def call_of(rec: dict):
    if rec.get("status") == "malformed":
        return MalformedToolCall(rec["id"], rec.get("raw", ""), rec.get("error", ""), rec.get("name") or None)
    return ToolCall(rec["id"], rec["name"], dict(rec.get("arguments") or {}), rec.get("raw", ""))


def with_round(messages: list[dict], content: str, records: list[dict]) -> list[dict]:
    """`messages` plus a stored tool round: the assistant's turn with its calls and the results."""
    return messages_with_tool_round(messages, content, [call_of(r) for r in records],
                                    [ToolResult(r.get("result", ""), bool(r.get("is_error"))) for r in records],
                                    format="hermes")   # the backend rewrites calls for generic templates


def registry_for(tools: list, runs: dict | None = None) -> ToolRegistry | None:
    if not tools:
        return None
    try:
        return ToolRegistry.for_tool_set(tools, runs)
    except Exception:  # noqa: BLE001  an invalid tool set (checked when saved) means no tools
        return None


class ToolFlow(QObject):
    confirmRequested = Signal(dict, str)
    confirmCleared = Signal()
    recordsChanged = Signal(list)
    roundDone = Signal(list)
    _executed = Signal(int, object)      # (round serial, ToolResult) from the helper thread

    def __init__(self, parent=None):
        super().__init__(parent)
        self.max_rounds = MAX_ROUNDS
        self.allow_fetch = False
        self.runs = dict          # () -> {tool name: run} for tools run outside the app (MCP servers)
        self.origin = lambda name: ""   # where such a tool runs, in words ("MCP server files")
        self.fetch_allowed_hosts: frozenset = frozenset()
        self._always: dict[int, set[str]] = {}      # chat id -> tools always allowed in it
        self._round: dict | None = None
        self._serial = 0
        self._executed.connect(self._on_executed)

    @property
    def active(self) -> bool:
        return self._round is not None

    @property
    def waiting(self) -> dict | None:
        """The record waiting for the user, if one is."""
        r = self._round
        return r["records"][r["i"]] if r is not None and r.get("asking") else None

    def use_settings(self, settings) -> None:
        def read(name: str = "") -> None:
            if name in ("", "tools/allow_fetch", "tools/fetch_allowed_hosts", "tools/max_rounds"):
                self.allow_fetch = bool(settings.get("tools/allow_fetch"))
                self.fetch_allowed_hosts = frozenset(str(h).strip() for h in settings.get("tools/fetch_allowed_hosts")
                                                     if str(h).strip())
                self.max_rounds = max(1, int(settings.get("tools/max_rounds")))
        read()
        settings.changed.connect(read)

    def always_allowed(self, chat_id: int) -> set[str]:
        return set(self._always.get(chat_id, ()))

    def parse_reply(self, fmt: str, tools: list) -> ReplyParse:
        return ReplyParse(fmt, registry_for(tools, self.runs()))

    # -- a round --------------------------------------------------------------------------------------
    def start_round(self, chat_id: int, calls: list, tools: list, round_no: int) -> None:
        """Confirm and run `calls` one after the other; roundDone(records) when all have results.
        Past the round cap nothing runs: the calls are recorded with status "limit"."""
        records = [record_of(c) for c in calls]
        self._serial += 1
        self._round = {"chat": chat_id, "records": records, "i": -1, "registry": registry_for(tools, self.runs()),
                       "serial": self._serial, "asking": False}
        if round_no > self.max_rounds:     # malformed calls stay shown as such; none is run
            for r in records:
                if r["status"] == "pending":
                    r.update(status="limit", is_error=True,
                             result=f"Error: not run: the limit of {self.max_rounds} tool rounds per reply "
                                    "was reached")
        self._next()

    def _next(self) -> None:
        r = self._round
        r["i"] += 1
        r["asking"] = False
        recs = r["records"]
        while r["i"] < len(recs) and recs[r["i"]]["status"] != "pending":
            r["i"] += 1
        self.recordsChanged.emit(recs)
        if r["i"] >= len(recs):
            self._round = None
            self.confirmCleared.emit()
            self.roundDone.emit(recs)
            return
        rec = recs[r["i"]]
        if rec["name"] in self._always.get(r["chat"], ()) and rec["name"] != "read_file" \
                and not r["registry"].needs_user_result(rec["name"]):
            self._run(rec, dict(rec["arguments"]), self._context())
            return
        kind = "file" if rec["name"] == "read_file" else "type" if r["registry"].needs_user_result(rec["name"]) \
            else "run"
        r["asking"] = True
        self.confirmRequested.emit(rec, kind)

    def allow(self, always: bool = False) -> None:
        """Run the waiting call (a built-in). `always`: run this tool without asking in this chat."""
        rec = self._take_waiting()
        if rec is None:
            return
        if always:
            self._always.setdefault(self._round["chat"], set()).add(rec["name"])
        self._run(rec, dict(rec["arguments"]), self._context())

    def allow_file(self, path: str) -> None:
        """read_file with the file the user picked: only that file can be read."""
        rec = self._take_waiting()
        if rec is None:
            return
        args = dict(rec["arguments"], path=path)
        self._run(rec, args, self._context(allowed_files=frozenset({path})))

    def give_result(self, text: str) -> None:
        """A custom tool's result, typed by the user."""
        rec = self._take_waiting()
        if rec is None:
            return
        self._run(rec, dict(rec["arguments"]), ToolContext(ask_user=lambda call: text))

    def deny(self) -> None:
        rec = self._take_waiting()
        if rec is None:
            return
        rec.update(status="denied", is_error=True, result=f"Error: the user did not allow this call to {rec['name']}")
        self._next()

    def stop(self) -> None:
        """Stop pressed during a round: calls not run yet are not run; the round ends now."""
        r = self._round
        if r is None:
            return
        self._serial += 1          # a result still on its way is dropped
        for rec in r["records"]:
            if rec["status"] in ("pending", "running"):
                rec.update(status="stopped", is_error=True, result="Error: stopped by the user")
        r["i"] = len(r["records"]) - 1
        r["stopped"] = True
        self._next()

    def _context(self, **kw) -> ToolContext:
        return ToolContext(allow_fetch=self.allow_fetch, fetch_allowed_hosts=self.fetch_allowed_hosts, **kw)

    def _take_waiting(self) -> dict | None:
        r = self._round
        if r is None or not r["asking"]:
            return None
        r["asking"] = False
        self.confirmCleared.emit()
        return r["records"][r["i"]]

    def _run(self, rec: dict, args: dict, ctx: ToolContext) -> None:
        r = self._round
        rec["status"] = "running"
        self.recordsChanged.emit(r["records"])
        call = ToolCall(rec["id"], rec["name"], args, rec["raw"])
        registry, serial = r["registry"], r["serial"]

        def work() -> None:
            self._executed.emit(serial, registry.execute(call, ctx))   # never raises
        threading.Thread(target=work, name="hearth-tool", daemon=True).start()

    def _on_executed(self, serial: int, result: ToolResult) -> None:
        r = self._round
        if r is None or serial != r["serial"]:
            return
        rec = r["records"][r["i"]]
        rec.update(status="allowed", result=result.content, is_error=result.is_error)
        self._next()
