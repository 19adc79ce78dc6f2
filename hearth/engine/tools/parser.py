"""Tool calls parsed from a model's output as it streams, in the formats real chat templates use.

Formats (`detect_format` picks one from the model's chat template text):

- "hermes" (Hermes, Qwen 2.5/3): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any
  number of them, text around them.
- "llama3" (Llama 3.1-3.3): `{"name": ..., "parameters": {...}}` as the whole message, or after
  `<|python_tag|>`; several calls may be separated by ';'. (`<|python_tag|>` is a control token: a
  decoder that skips special tokens drops it, and what is left is the whole-message form.)
- "generic" (templates with no tool support; the tools and this format are stated in the system
  prompt by `fallback_system_prompt`): `<tool_call>` tags as in hermes, a whole-message JSON call,
  or one in a ```json fence. Small models given the prompt (see prompt.py) produce all three.

Every format also accepts the shapes real models drift to (llama.cpp's and LM Studio's parsers
accept them for the same reason): a reply that is a bare JSON call `{"name": ..., "arguments": ...}`,
a list of calls `[{...}, {...}]`, either inside a ```json fence, and `<tool_call>` around any of them.
Untagged JSON is a call only when the reply consists of calls (whitespace, ';' and closing fences
between them) and every call names a known tool with arguments passing its schema; anything else
(ordinary JSON in an answer, a call followed by prose, an unknown tool) is passed through as text.
Inside `<tool_call>` tags (and after `<|python_tag|>`) the model has said it is calling, so a bad
call there is reported as a MalformedToolCall.

`ToolCallParser.feed(chunk)` takes text in arbitrary pieces, down to one character, and returns
events: `TextDelta` for visible text (never part of a tag: a possible tag prefix at the end of a
chunk is held back until the next chunk decides it), `ToolCall` for a complete, valid call,
`MalformedToolCall` for a call that is bad JSON, names an unknown tool, or has arguments failing
the tool's schema. `finish()` flushes what is held. The result never depends on where the chunks
were split (tested at every split point). Nothing here raises on model output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Union

from .call_text import FENCE, BraceScanner, cannot_be_call_json, held_back, is_call_shaped, unfenced
from .schema import validate_arguments, validate_tool_set

FORMATS = ("hermes", "llama3", "generic")
TAG_OPEN, TAG_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True)
class TextDelta:
    """Visible text outside tool calls."""
    text: str


@dataclass(frozen=True)
class ToolCall:
    """A complete call to a known tool whose arguments pass the tool's schema."""
    id: str
    name: str
    arguments: dict = field(hash=False)
    raw: str          # the model's text for this call, as it was written


@dataclass(frozen=True)
class MalformedToolCall:
    """A call the model attempted but got wrong; `error` says what, for the user and the model."""
    id: str
    raw: str
    error: str
    name: str | None = None     # the tool it named, when it named one


Event = Union[TextDelta, ToolCall, MalformedToolCall]


def detect_format(chat_template_source: str | None) -> str:
    """The tool-call format a chat template teaches: 'hermes', 'llama3' or 'generic'."""
    src = chat_template_source or ""
    # gpt-oss's harmony template renders tools itself; engine/chat/harmony.py passes its calls on as
    # hermes tags.
    if TAG_OPEN in src or "<|channel|>" in src:
        return "hermes"
    if PYTHON_TAG in src or ('"parameters"' in src and "tools" in src):
        return "llama3"
    return "generic"


def definitions_of(tools: Any) -> Iterable[dict]:
    """Tool definitions from a list of them or a ToolRegistry."""
    if tools is None:
        return []
    if hasattr(tools, "definitions"):           # a ToolRegistry
        return tools.definitions()
    return tools


class ToolCallParser:
    """Streaming tool-call parser for one assistant message. See the module docstring."""

    def __init__(self, format: str, tools: Any = (), *, id_prefix: str = "call_"):
        if format not in FORMATS:
            raise ValueError(f"unknown tool-call format {format!r}; use one of {', '.join(FORMATS)}")
        self.format = format
        defs = validate_tool_set(list(definitions_of(tools)))
        self._params = {d["function"]["name"]: d["function"]["parameters"] for d in defs}
        self._id_prefix = id_prefix
        self._markers = [PYTHON_TAG] if format == "llama3" else [TAG_OPEN]
        self._buf = ""
        self._state = "start"      # start | text | tag | pytag | pytag_raw | json | after_json | done
        self._origin = ""          # where the current JSON value began: message | fence | python_tag
        self._lead = ""            # text before a whole-message JSON value (shown if it is not a call)
        self._pending: list[Event] = []   # untagged calls, emitted once the reply is only calls
        self._pending_raw = ""     # their text as written, shown instead if prose follows
        self._scanner = BraceScanner()
        self._after_call = False   # whitespace right after a call is dropped if only calls follow
        self._fence_open = False
        self._n = 0

    # -- public ---------------------------------------------------------------------------------

    def feed(self, chunk: str) -> list[Event]:
        if self._state == "done":
            raise RuntimeError("ToolCallParser.feed after finish()")
        self._buf += chunk
        return self._run(final=False)

    def finish(self) -> list[Event]:
        if self._state == "done":
            return []
        events = self._run(final=True)
        self._state = "done"
        return events

    # -- the state machine ----------------------------------------------------------------------

    def _run(self, final: bool) -> list[Event]:
        out: list[Event] = []
        while getattr(self, f"_step_{self._state}")(out, final):
            pass
        merged: list[Event] = []
        for e in out:
            if isinstance(e, TextDelta):
                if not e.text:
                    continue
                if merged and isinstance(merged[-1], TextDelta):
                    merged[-1] = TextDelta(merged[-1].text + e.text)
                    continue
            merged.append(e)
        return merged

    def _step_done(self, out, final) -> bool:
        return False

    def _step_start(self, out, final) -> bool:
        """At the start of the message, or after untagged calls: is an untagged call next?"""
        s = self._buf.lstrip(" \t\r\n;") if self._pending else self._buf.lstrip()
        if not s:
            if final:
                if self._pending:
                    self._buf = ""
                    self._flush_pending(out)
                self._state = "text"
                return True
            return False
        lead = self._buf[:len(self._buf) - len(s)]
        if s[0] in "{[":
            return self._begin_json(lead, s, "message")
        if s[0] == "`":
            nl = s.find("\n")
            head = s if nl < 0 else s[:nl]
            if FENCE.startswith(head) or (head.startswith(FENCE)
                                          and "json".startswith(head[3:].strip().lower())):
                if nl < 0 and not final:
                    return False                        # ``` or ```json, its newline not here yet
                body = s[nl + 1:].lstrip() if nl >= 0 else ""
                if nl >= 0 and not body and not final:
                    return False
                if head.startswith(FENCE) and body[:1] in ("{", "["):
                    self._fence_open = True
                    return self._begin_json(self._buf[:len(self._buf) - len(body)], body, "fence")
        if self._pending:
            if not final and any(m.startswith(s) for m in self._markers):
                return False                            # maybe a tag: calls may go on in tags
            if any(s.startswith(m) for m in self._markers):
                self._buf = s
                self._flush_pending(out)
            else:
                self._revert_pending()                  # prose after the calls: it was all text
        self._state = "text"
        return True

    def _step_text(self, out, final) -> bool:
        if self._after_call:
            s = self._buf.lstrip()
            if not s or (not final and any(m.startswith(s) for m in self._markers)):
                if final:
                    self._buf = ""
                return False
            if any(s.startswith(m) for m in self._markers):
                self._buf = s                           # whitespace between calls is not text
            self._after_call = False
        found = [(self._buf.find(m), m) for m in self._markers]
        found = [(i, m) for i, m in found if i >= 0]
        if found:
            i, m = min(found)
            out.append(TextDelta(self._buf[:i]))
            self._buf = self._buf[i + len(m):]
            self._state = "tag" if m == TAG_OPEN else "pytag"
            return True
        keep = 0 if final else held_back(self._buf, self._markers)
        out.append(TextDelta(self._buf[:len(self._buf) - keep]))
        self._buf = self._buf[len(self._buf) - keep:]
        return False

    def _step_tag(self, out, final) -> bool:
        i = self._buf.find(TAG_CLOSE)
        if i < 0:
            if not final:
                return False
            payload, raw = self._buf, TAG_OPEN + self._buf
            self._buf = ""
            out.extend(self._calls_from_payload(payload, raw, unterminated=True))
            self._state = "text"
            return False
        payload = self._buf[:i]
        self._buf = self._buf[i + len(TAG_CLOSE):]
        out.extend(self._calls_from_payload(payload, TAG_OPEN + payload + TAG_CLOSE))
        self._after_call = True
        self._state = "text"
        return True

    def _step_pytag(self, out, final) -> bool:
        s = self._buf.lstrip()
        if s.startswith("{"):
            return self._begin_json("", s, "python_tag")
        if s or final:
            self._state = "pytag_raw"
            return True
        return False

    def _step_pytag_raw(self, out, final) -> bool:
        """Llama 3.1's built-in tools (`brave_search.call(query=...)`) are not JSON: not supported."""
        if final:
            out.append(self._malformed(PYTHON_TAG + self._buf, "only JSON tool calls are supported: "
                                       'write {"name": ..., "parameters": {...}}'))
            self._buf = ""
        return False

    def _begin_json(self, lead: str, rest: str, origin: str) -> bool:
        self._lead, self._buf, self._origin = lead, rest, origin
        self._scanner = BraceScanner()
        self._state = "json"
        return True

    def _step_json(self, out, final) -> bool:
        untagged = self._origin in ("message", "fence")
        if untagged and cannot_be_call_json(self._buf):
            return self._json_is_text()        # "{hello}", "[1, 2]": decided at once, shown as it streams
        end = self._scanner.scan(self._buf)
        if end < 0:
            if not final:
                return False
            text, self._buf = self._buf, ""
            if untagged:
                return self._json_is_text(text)
            out.append(self._malformed(PYTHON_TAG + text, "the reply ended inside the call's JSON (it is incomplete)"))
            self._state = "text"
            return False
        text = self._buf[:end + 1]
        self._buf = self._buf[end + 1:]
        try:
            value = json.loads(text)
        except ValueError as e:
            if untagged:
                return self._json_is_text(text)
            out.append(self._malformed(PYTHON_TAG + text, f"the call is not valid JSON ({e})"))
        else:
            if untagged:
                calls = self._untagged_calls(value, text)
                if calls is None:
                    return self._json_is_text(text)
                self._pending += calls
                self._pending_raw += self._lead + text
            elif not is_call_shaped(value):
                out.append(self._malformed(PYTHON_TAG + text, 'a tool call is a JSON object '
                                           'with "name" and "arguments"'))
            else:
                out.append(self._call_from_value(value, PYTHON_TAG + text))
        self._lead = ""
        self._state = "after_json"
        return True

    def _json_is_text(self, text: str = "") -> bool:
        """An untagged JSON candidate turned out not to be a call: it, and any untagged calls
        before it, are plain text. `text` is the part already cut off the buffer (the value),
        `self._buf` still holds what follows."""
        self._buf = self._lead + text + self._buf
        self._lead = ""
        self._fence_open = False
        self._revert_pending()
        self._state = "text"
        return True

    def _flush_pending(self, out) -> None:
        out.extend(self._pending)
        self._pending, self._pending_raw = [], ""
        self._after_call = True

    def _revert_pending(self) -> None:
        if self._pending:
            self._n -= len(self._pending)               # their ids are free again
            self._buf = self._pending_raw + self._buf
            self._pending, self._pending_raw = [], ""

    def _step_after_json(self, out, final) -> bool:
        s = self._buf.lstrip(" \t\r\n;")
        if self._fence_open:
            if not final and FENCE.startswith(s):
                return False                            # the closing ``` may be arriving
            self._fence_open = False
            if s.startswith(FENCE):
                if self._origin != "python_tag":
                    self._pending_raw += self._buf[:len(self._buf) - len(s) + len(FENCE)]
                self._buf = s[len(FENCE):]
        if self._origin != "python_tag":
            self._state = "start"                       # more calls, the end, or prose
            return True
        if not s:
            if final:
                self._buf = ""
            return False
        if s.startswith("{"):
            return self._begin_json("", s, "python_tag")
        self._buf = s
        self._after_call = True
        self._state = "text"
        return True

    # -- calls ----------------------------------------------------------------------------------

    def _untagged_calls(self, value: Any, raw: str) -> list[ToolCall] | None:
        """The calls an untagged JSON value makes, or None when it is not a call to a known tool
        with valid arguments (then it is the answer's JSON, not a call)."""
        items = value if isinstance(value, list) else [value]
        if not items:
            return None
        checked = [self._check(v) for v in items if is_call_shaped(v)]
        if len(checked) != len(items) or any(isinstance(c, str) for c in checked):
            return None
        return [ToolCall(self._next_id(), name, args, raw) for name, args in checked]

    def _calls_from_payload(self, payload: str, raw: str, unterminated: bool = False) -> list[Event]:
        body = unfenced(payload.strip())
        ending = " and the reply ended before </tool_call>" if unterminated else ""
        if not body:
            return [self._malformed(raw, f"the <tool_call> tag is empty{ending}")]
        try:
            value, end = json.JSONDecoder().raw_decode(body)
        except ValueError as e:
            return [self._malformed(raw, f"the call is not valid JSON ({e}){ending}")]
        if body[end:].strip():
            return [self._malformed(raw, "unexpected text after the call's JSON object: "
                                    f"{body[end:].strip()[:40]!r}{ending}")]
        items = value if isinstance(value, list) and value else [value]
        events: list[Event] = []
        for item in items:
            if not is_call_shaped(item, lenient=True):
                events.append(self._malformed(raw, 'a tool call is a JSON object with "name" and '
                                              '"arguments"'))
            else:
                events.append(self._call_from_value(item, raw))
        return events

    def _call_from_value(self, value: dict, raw: str) -> Event:
        checked = self._check(value)
        if isinstance(checked, str):
            name = value.get("name") if isinstance(value.get("name"), str) else None
            if isinstance(value.get("function"), dict) and "name" not in value:
                name = value["function"].get("name") if isinstance(value["function"].get("name"), str) else None
            return self._malformed(raw, checked, name)
        return ToolCall(self._next_id(), checked[0], checked[1], raw)

    def _check(self, value: dict) -> tuple[str, dict] | str:
        """(name, arguments) of a call-shaped value, or what is wrong with it."""
        if isinstance(value.get("function"), dict) and "name" not in value:
            value = value["function"]                    # OpenAI's {"type": "function", "function": {...}}
        name = value.get("name")
        if not isinstance(name, str):
            return "the tool name must be a string"
        args = value["arguments"] if "arguments" in value else value.get("parameters", {})
        if isinstance(args, str):                        # OpenAI style: arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                return f"the arguments of {name} are a string that is not JSON"
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return f"the arguments of {name} must be a JSON object"
        if name not in self._params:
            known = ", ".join(self._params) or "none"
            return f"there is no tool named {name!r}; the tools are: {known}"
        errors = validate_arguments(args, self._params[name])
        if errors:
            return f"wrong arguments for {name}: " + "; ".join(errors)
        return name, args

    def _malformed(self, raw: str, error: str, name: str | None = None) -> MalformedToolCall:
        return MalformedToolCall(self._next_id(), raw, error, name)

    def _next_id(self) -> str:
        self._n += 1
        return f"{self._id_prefix}{self._n}"
