"""Reading one streamed chat reply: server-sent events -> RemoteEvents.

An event stream is lines; `data:` lines (joined by newlines) make an event's data, a blank line ends
the event, lines starting with ':' are comments (keep-alives). Each data is a chat.completion.chunk
JSON object, or `[DONE]`. Tool calls arrive in pieces keyed by `index` (the id and name first, the
arguments as string fragments) and are assembled here. A reply is complete when a finish_reason or
[DONE] arrived; a stream that just ends before either is an error, never a silently short reply.
A server that ignores stream=true and answers one JSON completion is read as well. A reasoning
model's thinking, which servers send apart from the content, comes back inline in <think> tags.
"""

from __future__ import annotations

import json
import time
from typing import Callable, Iterator

import httpx

from .errors import (RemoteConnectionError, RemoteError, RemoteHTTPError, RemoteProtocolError, error_detail,
                     json_or_raise, mapped_errors, plain_text)
from .events import STOP_REASONS, RemoteEvent, RemoteStats, cancelled_event, tool_calls_from_wire


# Where servers put a reasoning model's thinking: vLLM and llama.cpp "reasoning_content", Ollama "reasoning".
REASONING_FIELDS = ("reasoning_content", "reasoning")
THINK_OPEN, THINK_CLOSE = "<think>\n", "\n</think>\n\n"


def sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data of each event in an event stream's lines."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:  # a last event without its blank line
        yield "\n".join(data)


class _Reply:
    """What has arrived of one reply."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.t_first: float | None = None
        self.t_last = t0
        self.deltas = 0
        self.calls: dict[int, dict] = {}
        self.finish_reason: str | None = None
        self.usage: dict | None = None
        self.timings: dict | None = None
        self.model = ""
        self.done = False
        self.thinking = False        # inside reasoning text (<think> sent, </think> not yet)

    def tick(self) -> None:
        self.t_last = time.perf_counter()
        if self.t_first is None:
            self.t_first = self.t_last

    def add_call_delta(self, d: dict, position: int) -> None:
        i = d.get("index", position)
        c = self.calls.setdefault(i if isinstance(i, int) else position, {"id": None, "name": None, "arguments": ""})
        c["id"] = d.get("id") or c["id"]
        fn = d.get("function") or {}
        c["name"] = fn.get("name") or c["name"]
        args = fn.get("arguments")
        if isinstance(args, str):
            c["arguments"] += args
        elif isinstance(args, dict):  # a server that sends an object, not a string
            c["arguments"] += json.dumps(args, ensure_ascii=False)

    def stats(self) -> RemoteStats:
        s = RemoteStats(finish_reason=self.finish_reason or "", model=self.model)
        s.total_s = time.perf_counter() - self.t0
        u = self.usage or {}
        s.prompt_tokens = int(u.get("prompt_tokens") or 0)
        s.completion_tokens = int(u.get("completion_tokens") or 0) or self.deltas
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        t = self.timings or {}
        if cached is None:
            cached = t.get("cache_n")
        s.reused_tokens = int(cached or 0)
        s.computed_tokens = max(0, s.prompt_tokens - s.reused_tokens) or int(t.get("prompt_n") or 0)
        s.generated_tokens = s.completion_tokens
        if self.t_first is not None:
            s.ttft_s = self.t_first - self.t0
            s.decode_s = self.t_last - self.t_first
            if s.completion_tokens > 1 and s.decode_s > 0:
                s.decode_tps = (s.completion_tokens - 1) / s.decode_s
        if t.get("predicted_per_second"):
            s.speed_from = "server"
            s.decode_tps = float(t["predicted_per_second"])
            s.prefill_tps = float(t.get("prompt_per_second") or 0.0)
            s.prefill_s = float(t.get("prompt_ms") or 0.0) / 1000
        return s


def read_reply(r: httpx.Response, url: str, timeout: float, t0: float, tools,
               stopped: Callable[[], bool]) -> Iterator[RemoteEvent]:
    ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
    reply = _Reply(t0)
    if ctype == "application/json":
        with mapped_errors(url, timeout):
            data = r.read()
        yield from _whole_reply(json_or_raise(url, data, ctype), url, reply, tools)
        return
    if ctype != "text/event-stream":
        with mapped_errors(url, timeout):
            head = r.read()[:2000].decode("utf-8", "replace")
        raise RemoteProtocolError(f"{url} answered {ctype or 'no content type'}, not an event stream: "
                                  f"{plain_text(head)!r}; is this an OpenAI-compatible server?", url)
    try:
        with mapped_errors(url, timeout):
            for data in sse_data(r.iter_lines()):
                if data.strip() == "[DONE]":
                    reply.done = True
                    break
                ev = _chunk(data, url, reply)
                if ev is not None:
                    yield ev
                if stopped():
                    break
    except RemoteError:
        if not stopped():
            raise
    if stopped() and not reply.done:
        yield cancelled_event(reply.stats())
        return
    if not reply.done and reply.finish_reason is None:
        raise RemoteConnectionError(f"{url}: the reply stopped in the middle (the stream ended with no "
                                    "finish_reason and no [DONE]); the server may have stopped or crashed", url)
    yield _final(reply, tools)


def _chunk(data: str, url: str, reply: _Reply) -> RemoteEvent | None:
    try:
        obj = json.loads(data)
    except ValueError:
        raise RemoteProtocolError(f"{url} sent an event that is not JSON: {data[:120]!r}", url) from None
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"{url} sent an event that is not a JSON object: {data[:120]!r}", url)
    if "error" in obj:
        msg, code = error_detail(obj)
        raise RemoteHTTPError(f"{url} reported an error during the reply: {msg}", url, None, code)
    reply.model = obj.get("model") or reply.model
    if isinstance(obj.get("usage"), dict):
        reply.usage = obj["usage"]
    if isinstance(obj.get("timings"), dict):
        reply.timings = obj["timings"]
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise RemoteProtocolError(f"{url} sent a chunk without 'choices': {data[:120]!r}", url)
    if not choices:
        return None  # the usage chunk
    ch = choices[0] if isinstance(choices[0], dict) else {}
    delta = ch.get("delta") or {}
    text = delta.get("content") if isinstance(delta.get("content"), str) else ""
    for j, d in enumerate(delta.get("tool_calls") or []):
        if isinstance(d, dict):
            reply.add_call_delta(d, j)
            reply.tick()
    if ch.get("finish_reason"):
        reply.finish_reason = str(ch["finish_reason"])
    thought = next((delta[k] for k in REASONING_FIELDS if isinstance(delta.get(k), str) and delta[k]), "")
    if thought or text:
        reply.tick()
        reply.deltas += 1
        return RemoteEvent(_think_tags(reply, thought) + text, reasoning=thought)
    return None


def _think_tags(reply: _Reply, thought: str) -> str:
    """Reasoning servers send the thinking apart from the content; the local engine shows a model's
    <think> block inline, so it is put back inline here (with `reasoning` for styling it)."""
    if thought and not reply.thinking:
        reply.thinking = True
        return THINK_OPEN + thought
    if thought:
        return thought
    if reply.thinking:
        reply.thinking = False
        return THINK_CLOSE
    return ""


def _final(reply: _Reply, tools) -> RemoteEvent:
    tail = _think_tags(reply, "") if reply.thinking else ""
    calls = [dict(c, id=c["id"] or f"call_{i + 1}") for i, c in sorted(reply.calls.items())]
    reason = STOP_REASONS.get(reply.finish_reason or "stop", reply.finish_reason)
    if calls:
        reason = "tool_calls"
    return RemoteEvent(tail, None, final=True, stop_reason=reason, stats=reply.stats(),
                       tool_calls=tool_calls_from_wire(calls, tools))


def _whole_reply(doc, url: str, reply: _Reply, tools) -> Iterator[RemoteEvent]:
    """A complete chat.completion (a server that ignored stream=true)."""
    try:
        ch = doc["choices"][0]
        msg = ch["message"]
    except (KeyError, IndexError, TypeError):
        raise RemoteProtocolError(f"{url} answered JSON that is not a chat completion: "
                                  f"{json.dumps(doc)[:120]}", url) from None
    reply.model = doc.get("model") or ""
    reply.usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else None
    reply.timings = doc.get("timings") if isinstance(doc.get("timings"), dict) else None
    reply.finish_reason = ch.get("finish_reason") or "stop"
    for j, c in enumerate(msg.get("tool_calls") or []):
        reply.add_call_delta(c, j)
    text = msg.get("content") or ""
    thought = next((msg[k] for k in REASONING_FIELDS if isinstance(msg.get(k), str) and msg[k]), "")
    reply.tick()
    if text or thought:
        reply.deltas = 1
        yield RemoteEvent((THINK_OPEN + thought + THINK_CLOSE if thought else "") + text, reasoning=thought)
    yield _final(reply, tools)
