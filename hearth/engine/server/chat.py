"""`ChatService`: what the HTTP layer calls. It owns the engine worker, the model's public id, the
saved presets' prefixes and a short history of generations (served at GET /hearth/stats).

A chat job runs on the worker thread and puts, in order:
    ("start", {"prompt_tokens": n})             the prompt rendered and fits: the reply begins
    ("text", str)                               visible text
    ("tool_call", wire dict)                    a complete call (OpenAI shape, with its "index")
    ("done", ChatOutcome)                       last
A RequestError raised before "start" (the prompt does not fit, the template refused the messages)
becomes an HTTP error; one raised later ends the stream with an error event.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..chat.chat_turn import prefill_in_chunks, prompt_ids, tool_format_of, with_prefill
from ..errors import ContextFullError, TemplateError
from ..generation import GenerationStats
from ..tools import MalformedToolCall, TextDelta, ToolCall, ToolCallParser
from .presets import PresetPrefixes
from .protocol import FINISH_REASONS, ChatRequest, RequestError, tool_call_to_wire
from .worker import EngineWorker, Job

log = logging.getLogger("hearth.engine.server")
HISTORY = 100


@dataclass
class ChatOutcome:
    id: str
    content: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    stop_reason: str = ""          # the engine's: eog, stop, length, context_full, cancelled
    finish_reason: str = ""        # OpenAI's: stop, length, tool_calls
    prompt_tokens: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)
    prefix: dict | None = None     # what the preset prefix store did, when a preset matched
    restored_tokens: int = 0       # prompt positions read from saved chat segments
    root: object = None            # the chain's root (chat_images.Root) when segments are kept
    queued_s: float = 0.0          # waiting for the worker
    total_s: float = 0.0           # on the worker


class ChatService:
    def __init__(self, engine, model_id: str | None = None, presets: PresetPrefixes | None = None, worker=None,
                 chat_images=None):
        """`worker`: what runs the jobs, serially, on the thread that owns `engine` (default: a new
        EngineWorker). An app that already has an engine thread passes its own: any object with
        `submit(fn) -> Job` (make `Job(fn)`, call `job.run(engine)` on that thread), `queued` and
        `close()`. `chat_images` (engine.prefix.chat_images.ChatImages): conversations' contexts are
        saved after each reply and restored when a client sends the conversation again."""
        self.engine = engine
        self.model_id = model_id or default_model_id(engine)
        self.created = int(time.time())
        self.presets = presets
        self.worker = worker if worker is not None else EngineWorker(engine)
        self.history: collections.deque[dict] = collections.deque(maxlen=HISTORY)
        self.counts = collections.Counter()
        self._lock = threading.Lock()
        self.tool_format = tool_format_of(engine)
        self.chat_images = chat_images

    def submit(self, cid: str, req: ChatRequest) -> Job:
        submitted = time.perf_counter()
        with self._lock:
            self.counts["requests"] += 1
        job = self.worker.submit(lambda engine, job: self._run(engine, job, cid, req, submitted))
        return job

    def stats(self) -> dict:
        with self._lock:
            return {"model": self.model_id, "queued": self.worker.queued, "counts": dict(self.counts),
                    "generations": list(self.history)}

    def close(self) -> None:
        self.worker.close()

    # --- on the worker thread ----------------------------------------------------------------

    def _run(self, engine, job: Job, cid: str, req: ChatRequest, submitted: float) -> None:
        t0 = time.perf_counter()
        out = ChatOutcome(cid, queued_s=t0 - submitted)
        try:
            run_chat(engine, req, job, out, self.tool_format, self.presets, self.chat_images)
        finally:
            out.total_s = time.perf_counter() - t0
            self._record(out, job)
        job.put(("done", out))
        if self.chat_images is not None and out.root is not None:  # after the reply went out
            saved = self.chat_images.save(engine, out.root)
            if saved.error:
                log.warning("%s: the chat context was not saved: %s", out.id, saved.error)

    def _record(self, out: ChatOutcome, job: Job) -> None:
        entry = {"id": out.id, "stop_reason": out.stop_reason or "error", "finish_reason": out.finish_reason,
                 "prompt_tokens": out.prompt_tokens, "generated_tokens": out.stats.generated_tokens,
                 "reused_tokens": out.stats.reused_tokens, "restored_tokens": out.restored_tokens,
                 "computed_tokens": out.stats.computed_tokens, "client_left": job.cancel.is_set(),
                 "tool_calls": len(out.tool_calls), "prefix": out.prefix, "queued_s": round(out.queued_s, 4),
                 "total_s": round(out.total_s, 4), "engine_s": round(out.stats.ttft_s + out.stats.decode_s, 4),
                 "decode_tps": round(out.stats.decode_tps, 2)}
        with self._lock:
            self.history.append(entry)
            self.counts["generations"] += 1
            self.counts[f"stop_{entry['stop_reason']}"] += 1
            self.counts["restored_tokens"] += out.restored_tokens
            self.counts["computed_tokens"] += out.stats.computed_tokens
        log.info("%s: %s after %d tokens (prompt %d, reused %d)%s", out.id, entry["stop_reason"],
                 entry["generated_tokens"], out.prompt_tokens, out.stats.reused_tokens,
                 " - the client left" if entry["client_left"] else "")


def default_model_id(engine) -> str:
    """The GGUF file's name without '.gguf': what `GET /v1/models` lists and requests name."""
    path = getattr(getattr(engine, "gguf", None), "path", None)
    return Path(path).name.removesuffix(".gguf") if path else "hearth"


def run_chat(engine, req: ChatRequest, job: Job, out: ChatOutcome, tool_format: str,
             presets: PresetPrefixes | None = None, chat_images=None) -> None:
    try:
        ids, _, messages, head = prompt_ids(engine, req, tool_format)
    except TemplateError as e:
        raise RequestError(f"the model's chat template refused these messages: {e}",
                           code="invalid_messages") from None
    out.prompt_tokens = len(ids)
    if len(ids) >= engine.n_ctx:
        raise RequestError(f"the prompt is {len(ids)} tokens, and this server's context holds {engine.n_ctx} "
                           "(with room for at least one reply token); shorten the messages",
                           code="context_length_exceeded", param="messages")
    if presets is not None:
        system = req.messages[0]["content"] if req.messages[0]["role"] == "system" else ""
        preset = presets.match(system, req.tools)
        if preset is not None:
            out.prefix = presets.prepare(engine, preset, system, req.tools, tool_format)
    if chat_images is not None:
        from ..prefix.chat_images import Root  # noqa: PLC0415
        key = (out.prefix or {}).get("key")
        out.root = Root(bytes.fromhex(key), int(out.prefix["tokens"])) if key else Root.none()
        out.restored_tokens = chat_images.restore(engine, ids, out.root).restored
    job.put(("start", {"prompt_tokens": len(ids), "prefix": out.prefix}))
    room = engine.n_ctx - len(ids)
    max_tokens = room if req.max_tokens is None else min(req.max_tokens, room)
    pre = prefill_in_chunks(engine, ids, job.cancel.is_set)
    if pre is None:
        out.stop_reason = "cancelled"
        return
    reply = ReplyAssembler(tool_format, req.tools, head)
    try:
        events = engine.generate(ids, max_tokens=max_tokens, sampling=req.sampling, stop=req.stop,
                                 cancel=lambda: job.cancel.is_set() or reply.ended)
    except ContextFullError as e:
        raise RequestError(str(e), code="context_length_exceeded", param="messages") from None
    for ev in events:
        items = reply.feed(ev.text) if ev.text else []
        if ev.final:
            items += reply.finish()
            out.stop_reason, out.stats = ev.stop_reason, with_prefill(ev.stats, *pre)
            if reply.ended and not job.cancel.is_set():
                out.stop_reason = "tool_calls"
        for item in items:
            job.put(item)
    out.content, out.tool_calls = reply.content, reply.tool_calls
    out.finish_reason = "tool_calls" if out.tool_calls else FINISH_REASONS.get(out.stop_reason, "stop")


class ReplyAssembler:
    """The model's text deltas -> ("text", str) and ("tool_call", OpenAI call) items. With tools, the
    text goes through engine.tools' streaming parser (calls are never shown as text); a malformed
    call cannot be an OpenAI tool call, so the client sees what the model wrote instead.

    `ended` turns true when the model writes text after its calls: the reply is over (the caller
    runs the tools and comes back); small models go on to invent the tools' results, which must
    neither be shown nor waste time. `head` is the reply's beginning written by the client
    (an assistant prefill): parsed, so a call it opens is completed, but not sent back."""

    def __init__(self, tool_format: str, tools: list, head: str = ""):
        self.parser = ToolCallParser(tool_format, tools) if tools else None
        self.tool_calls: list[dict] = []
        self.ended = False
        self._text: list[str] = []
        if head and self.parser:
            self._items(self.parser.feed(head), echo=False)

    @property
    def content(self) -> str:
        return "".join(self._text)

    def feed(self, text: str) -> list[tuple]:
        if self.ended:
            return []
        return self._items(self.parser.feed(text) if self.parser else [TextDelta(text)])

    def finish(self) -> list[tuple]:
        return self._items(self.parser.finish()) if self.parser and not self.ended else []

    def _items(self, events, echo: bool = True) -> list[tuple]:
        items = []
        for e in events:
            if isinstance(e, ToolCall):
                call = tool_call_to_wire(e, len(self.tool_calls))
                self.tool_calls.append(call)
                items.append(("tool_call", call))
                continue
            t = e.raw if isinstance(e, MalformedToolCall) else e.text
            if self.tool_calls and t.strip():
                self.ended = True
                break
            if t and echo:
                self._text.append(t)
                items.append(("text", t))
        return items
