"""The remote chat client: any OpenAI-compatible server (vLLM, llama.cpp's llama-server, Ollama,
LM Studio, Hearth's own `python -m engine serve`), driven like the local Engine.

    client = RemoteClient("http://127.0.0.1:8080", api_key=None)
    models = client.models()                                  # GET /v1/models
    stream = client.chat(messages, model=models[0].id, tools=preset_tools,
                         sampling=Sampling(temperature=0), max_tokens=256, cancel=stop_event)
    for ev in stream:                                         # the same shape as Engine.generate
        ev.text                                               # a text delta (may be empty)
        if ev.final: ev.stop_reason, ev.stats, ev.tool_calls  # "eog" | "length" | "tool_calls" | "cancelled"
    stream.close()                                            # Stop, from any thread: closes the connection

Events are `RemoteEvent`s (a GenerationEvent plus `tool_calls`: engine.tools ToolCall or
MalformedToolCall objects, so `messages_with_tool_round` continues the chat as for the local engine);
`stats` is a `RemoteStats` (a GenerationStats plus the server's usage). Messages may be in the
template shapes engine.tools uses (a call's arguments as a dict); they are sent in the wire shapes.

Everything that goes wrong is a `RemoteError` (an EngineError) with a sentence for the user naming
the server: `RemoteConnectionError` (cannot connect, the connection dropped mid-reply),
`RemoteTimeout`, `RemoteHTTPError` (4xx/5xx with the server's own message; `RemoteAuthError` for
401/403), `RemoteProtocolError` (not JSON, not an event stream, a stream that ends early).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import httpx

from .errors import EngineError
from .generation import GenerationEvent, GenerationStats
from .sampling import Sampling
from .tools import MalformedToolCall, ToolCall, ToolSchemaError, validate_arguments, validate_tool_set

DEFAULT_TIMEOUT_S = 120.0      # longest silence while waiting for a reply or its next token
CONNECT_TIMEOUT_S = 10.0
MAX_ERROR_BODY = 64 << 10
# OpenAI finish_reason -> the engine's stop_reason vocabulary.
STOP_REASONS = {"stop": "eog", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls"}


class RemoteError(EngineError):
    """A remote server could not give a reply; the message says what happened and what to check."""

    def __init__(self, message: str, url: str | None = None):
        super().__init__(message)
        self.url = url


class RemoteConnectionError(RemoteError):
    """Cannot connect, or the connection broke before the reply was complete."""


class RemoteTimeout(RemoteError):
    """The server did not answer (or went silent mid-reply) within the timeout."""


class RemoteHTTPError(RemoteError):
    """The server answered with an error status (4xx/5xx) or sent an error event in the stream."""

    def __init__(self, message: str, url: str | None = None, status: int | None = None, code: str | None = None):
        super().__init__(message, url)
        self.status, self.code = status, code


class RemoteAuthError(RemoteHTTPError):
    """401/403: no API key, or the wrong one."""


class RemoteProtocolError(RemoteError):
    """The server answered something that is not the OpenAI API: not JSON, not an event stream ..."""


@dataclass
class RemoteModel:
    id: str
    owned_by: str = ""
    created: int = 0
    meta: dict = field(default_factory=dict)   # the server's whole entry


@dataclass
class RemoteStats(GenerationStats):
    prompt_tokens: int = 0        # usage.prompt_tokens (0 when the server sent no usage)
    completion_tokens: int = 0    # usage.completion_tokens, else the number of streamed deltas
    finish_reason: str = ""       # the server's own word
    model: str = ""
    speed_from: str = "client"    # "server": its timings (llama.cpp, Hearth); "client": measured here
    total_s: float = 0.0


@dataclass
class RemoteEvent(GenerationEvent):
    tool_calls: list = field(default_factory=list)   # final only: ToolCall | MalformedToolCall


def normalize_base_url(url: str) -> str:
    """"host:8080", "http://host:8080/" or "http://host:8080/v1" -> "http://host:8080/v1"."""
    url = url.strip().rstrip("/")
    if not url:
        raise RemoteError("the server address is empty; give one like http://127.0.0.1:8080")
    if "://" not in url:
        url = "http://" + url
    if not url.startswith(("http://", "https://")):
        raise RemoteError(f"{url}: the server address must start with http:// or https://")
    return url if re.search(r"/v\d+$", url) else url + "/v1"


class RemoteClient:
    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = DEFAULT_TIMEOUT_S,
                 connect_timeout: float = CONNECT_TIMEOUT_S, headers: dict | None = None):
        self.base_url = normalize_base_url(base_url)
        self.timeout = float(timeout)
        h = {"Accept": "application/json", **(headers or {})}
        if api_key:
            h["Authorization"] = f"Bearer {api_key}"
        t = httpx.Timeout(timeout, connect=connect_timeout, pool=connect_timeout)
        self._http = httpx.Client(base_url=self.base_url + "/", headers=h, follow_redirects=True, timeout=t)
        # Replies: one connection each, closed at the end (see ChatStream).
        self._streams = httpx.Client(base_url=self.base_url + "/", headers=h, follow_redirects=True, timeout=t,
                                     limits=httpx.Limits(max_keepalive_connections=0))

    def close(self) -> None:
        self._http.close()
        self._streams.close()

    def __enter__(self) -> "RemoteClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- models ----------------------------------------------------------------------------

    def models(self) -> list[RemoteModel]:
        """The server's models (GET /v1/models)."""
        url = f"{self.base_url}/models"
        with _mapped_errors(url, self.timeout):
            r = self._http.get("models")
            if r.status_code >= 400:
                raise http_error(url, r.status_code, r.reason_phrase, r.content[:MAX_ERROR_BODY])
            doc = _json_or_raise(url, r.content, r.headers.get("content-type", ""))
        data = doc.get("data") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
        if not isinstance(data, list):
            raise RemoteProtocolError(f"{url} did not list models (expected {{\"data\": [...]}}): {_snippet(doc)}",
                                      url)
        out = []
        for m in data:
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                out.append(RemoteModel(m["id"], str(m.get("owned_by") or ""), int(m.get("created") or 0), m))
        return out

    # --- chat ------------------------------------------------------------------------------

    def chat(self, messages: Sequence[dict], model: str, *, tools: Sequence[dict] | None = None,
             sampling: Sampling | dict | None = None, max_tokens: int | None = None, stop: Sequence[str] = (),
             cancel: threading.Event | Callable[[], bool] | None = None, extra: dict | None = None
             ) -> "ChatStream":
        """Stream a reply (POST /v1/chat/completions with stream=true). Nothing is sent until the
        first event is asked for. `extra` adds fields to the request body (server-specific options)."""
        body: dict = {"model": model, "messages": wire_messages(messages), "stream": True,
                      "stream_options": {"include_usage": True}}
        body.update(sampling_fields(sampling))
        if max_tokens is not None:
            body["max_tokens"] = int(max_tokens)
        if stop:
            body["stop"] = list(stop)
        if tools:
            body["tools"] = list(tools)
        body.update(extra or {})
        return ChatStream(self, body, tools or (), cancel)


def sampling_fields(sampling: Sampling | dict | None) -> dict:
    """The OpenAI request fields of a Sampling (or an app preset's sampling dict). Only standard
    fields are sent: strict servers refuse unknown ones; `extra` is for the rest."""
    if sampling is None:
        return {}
    s = sampling if isinstance(sampling, dict) else sampling.__dict__
    out = {}
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        if s.get(key) is not None:
            out[key] = float(s[key])
    if s.get("seed") is not None and int(s["seed"]) >= 0:
        out["seed"] = int(s["seed"])
    if isinstance(sampling, dict) and s.get("max_tokens"):
        out["max_tokens"] = int(s["max_tokens"])
    return out


def wire_messages(messages: Sequence[dict]) -> list[dict]:
    """Template-shaped messages -> OpenAI's: call arguments as JSON strings, only the fields the API
    defines (a strict server refuses others)."""
    out = []
    for m in messages:
        role = m.get("role")
        w: dict = {"role": role, "content": m.get("content") if m.get("content") is not None else ""}
        if role == "assistant" and m.get("tool_calls"):
            w["tool_calls"] = []
            for c in m["tool_calls"]:
                fn = c.get("function", c)
                args = fn.get("arguments", {})
                w["tool_calls"].append({"id": c.get("id"), "type": "function", "function": {
                    "name": fn.get("name"),
                    "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}})
            if not w["content"]:
                w["content"] = None
        if role == "tool":
            w["tool_call_id"] = m.get("tool_call_id")
        elif m.get("name") and role in ("user", "system"):
            w["name"] = m["name"]
        out.append(w)
    return out


class ChatStream:
    """Iterate for RemoteEvents; `close()` stops the reply from any thread (it shuts the connection
    down, so the server stops generating) and the iteration ends with a final "cancelled" event.
    A `cancel` Event or callable given to `chat()` is watched the same way, also while the server
    is silent (a long prompt being read): Stop never waits for the next token.

    Each reply has its own connection (no keep-alive), because closing it is how Stop reaches the
    server, and because a socket of our own can be shut down while another thread reads it."""

    WATCH_S = 0.1   # how often a `cancel` given to chat() is looked at while waiting

    def __init__(self, client: RemoteClient, body: dict, tools, cancel):
        self._client, self.body = client, body
        self._tools = tools
        self._cancel = _cancel_fn(cancel)
        self._watch = cancel is not None
        self._closed = threading.Event()
        self._finished = threading.Event()
        self._net = None                      # httpcore's network stream of this reply's connection
        self._lock = threading.Lock()
        self._events = self._run()

    def __iter__(self) -> Iterator[RemoteEvent]:
        return self

    def __next__(self) -> RemoteEvent:
        return next(self._events)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            net = self._net
        _shutdown(net)

    def _trace(self, event: str, info: dict) -> None:
        """httpcore's trace hook: keep the connection's stream as soon as it is connected."""
        if event == "connection.connect_tcp.complete":
            with self._lock:
                self._net = info.get("return_value")
            if self._closed.is_set():
                _shutdown(self._net)

    def _watch_cancel(self) -> None:
        while not self._finished.wait(self.WATCH_S):
            if self._cancel():
                self.close()
                return

    def _stopped(self) -> bool:
        return self._closed.is_set() or self._cancel()

    def _run(self) -> Iterator[RemoteEvent]:
        try:
            if self._watch:
                threading.Thread(target=self._watch_cancel, name="remote-cancel", daemon=True).start()
            yield from self._reply()
        finally:
            self._finished.set()

    def _reply(self) -> Iterator[RemoteEvent]:
        from .remote_stream import read_reply  # noqa: PLC0415
        client = self._client
        url = f"{client.base_url}/chat/completions"
        t0 = time.perf_counter()
        if self._stopped():
            yield _cancelled(RemoteStats())
            return
        try:
            with _mapped_errors(url, client.timeout):
                req = client._streams.build_request("POST", "chat/completions", json=self.body,
                                                    headers={"Accept": "text/event-stream"},
                                                    extensions={"trace": self._trace})
                r = client._streams.send(req, stream=True)
        except RemoteError:
            if self._stopped():
                yield _cancelled(RemoteStats())
                return
            raise
        try:
            if r.status_code >= 400:
                with _mapped_errors(url, client.timeout):
                    data = _read_capped(r)
                raise http_error(url, r.status_code, r.reason_phrase, data)
            yield from read_reply(r, url, client.timeout, t0, self._tools, self._stopped)
        finally:
            r.close()


def _shutdown(net) -> None:
    """Wake a thread blocked reading this connection: close() alone does not, shutdown() does."""
    sock = net.get_extra_info("socket") if net is not None else None
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _cancelled(stats: RemoteStats) -> RemoteEvent:
    return RemoteEvent("", None, final=True, stop_reason="cancelled", stats=stats)


def _cancel_fn(cancel) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    if callable(cancel):
        return lambda: bool(cancel())
    raise EngineError("cancel must be a threading.Event, a callable or None")


def _read_capped(r: httpx.Response) -> bytes:
    data = b""
    for part in r.iter_bytes():
        data += part
        if len(data) >= MAX_ERROR_BODY:
            break
    return data[:MAX_ERROR_BODY]


# --- errors ------------------------------------------------------------------------------------

class _mapped_errors:
    """httpx's exceptions -> RemoteErrors that say what happened, naming the URL."""

    def __init__(self, url: str, timeout: float):
        self.url, self.timeout = url, timeout

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if e is None or not isinstance(e, httpx.HTTPError):
            return False
        raise map_httpx_error(e, self.url, self.timeout) from e


def map_httpx_error(e: httpx.HTTPError, url: str, timeout: float) -> RemoteError:
    if isinstance(e, httpx.ConnectTimeout):
        return RemoteTimeout(f"{url}: no connection within the timeout; check the address and that the "
                             "server is reachable", url)
    if isinstance(e, httpx.TimeoutException):
        return RemoteTimeout(f"{url}: the server sent nothing for {timeout:g} s; it may be overloaded, or "
                             "the timeout too short for this model", url)
    if isinstance(e, httpx.ConnectError):
        why = _reason(e)
        return RemoteConnectionError(f"cannot connect to {url} ({why}); is the server running, and is the "
                                     "address right?", url)
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.CloseError)):
        return RemoteConnectionError(f"{url}: the connection broke before the reply was complete "
                                     f"({_reason(e)}); the server may have stopped or crashed", url)
    if isinstance(e, httpx.UnsupportedProtocol):
        return RemoteError(f"{url}: unsupported address ({e})", url)
    return RemoteError(f"{url}: {type(e).__name__}: {_reason(e)}", url)


def _reason(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    m = re.search(r"\[Errno -?\d+\] ([^\]')]+)", text)
    return m.group(1).strip() if m else text


HINTS = {401: "check the API key", 403: "check the API key and its permissions",
         404: "check the server address (it usually ends in /v1) and the model name",
         413: "the request is too large for this server", 429: "the server is rate-limiting; try again later"}


def http_error(url: str, status: int, reason: str, body: bytes) -> RemoteHTTPError:
    """A RemoteHTTPError from an error response: the server's own message when it sent one."""
    detail, code = error_detail(body)
    hint = HINTS.get(status) or ("the server failed; its log may say why" if status >= 500 else "")
    if code == "context_length_exceeded":
        hint = "the conversation is longer than the server's context; start a new chat or shorten it"
    msg = f"{url} answered {status} {reason or ''}".rstrip()
    msg += f": {detail}" if detail else ""
    msg += f" ({hint})" if hint else ""
    kind = RemoteAuthError if status in (401, 403) else RemoteHTTPError
    return kind(msg, url, status, code)


def error_detail(body: bytes | dict) -> tuple[str, str | None]:
    """(the message, the error code) of an error body: OpenAI's {"error": {...}}, {"error": "..."}
    (Ollama), {"detail": ...} (FastAPI), {"message": ...}, HTML (a proxy's page) or plain text."""
    doc = body
    if isinstance(body, (bytes, bytearray)):
        text = bytes(body).decode("utf-8", "replace")
        try:
            doc = json.loads(text)
        except ValueError:
            return _plain(text), None
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, str):
            return err[:300], None
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            if isinstance(msg, list):  # FastAPI validation errors
                msg = "; ".join(str(x.get("msg", x)) if isinstance(x, dict) else str(x) for x in msg)
            code = err.get("code")
            return (str(msg)[:300] if msg else _snippet(doc)), (str(code) if code is not None else None)
    return _snippet(doc), None


def _plain(text: str) -> str:
    if "<" in text and ">" in text:  # HTML: the title and text, no markup
        text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", text)
        text = re.sub(r"(?s)<[^>]+>", " ", text)
    return " ".join(text.split())[:200]


def _snippet(v) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)[:200]
    return s[:200]


def _json_or_raise(url: str, content: bytes, content_type: str):
    try:
        return json.loads(content)
    except ValueError:
        raise RemoteProtocolError(f"{url} did not answer JSON ({content_type or 'no content type'}): "
                                  f"{_plain(content[:2000].decode('utf-8', 'replace'))!r}; is this an "
                                  "OpenAI-compatible server?", url) from None


def tool_calls_from_wire(calls: Sequence[dict], tools) -> list:
    """Complete OpenAI tool calls -> engine.tools ToolCall (valid) or MalformedToolCall (arguments
    that are not a JSON object, an unknown tool, arguments failing the tool's schema)."""
    try:
        params = {d["function"]["name"]: d["function"]["parameters"] for d in validate_tool_set(list(tools or []))}
    except ToolSchemaError:
        params = {}
    out = []
    for i, c in enumerate(calls):
        cid = c.get("id") or f"call_{i + 1}"
        name, raw_args = c.get("name"), c.get("arguments", "")
        raw = json.dumps({"name": name, "arguments": raw_args}, ensure_ascii=False)
        try:
            args = json.loads(raw_args) if raw_args.strip() else {}
        except ValueError:
            out.append(MalformedToolCall(cid, raw, f"the arguments of {name} are not valid JSON", name))
            continue
        if not isinstance(args, dict):
            out.append(MalformedToolCall(cid, raw, f"the arguments of {name} must be a JSON object", name))
            continue
        if params and name not in params:
            out.append(MalformedToolCall(cid, raw, f"there is no tool named {name!r}", name))
            continue
        errors = validate_arguments(args, params[name]) if name in params else []
        if errors:
            out.append(MalformedToolCall(cid, raw, f"wrong arguments for {name}: " + "; ".join(errors), name))
            continue
        out.append(ToolCall(cid, name, args, raw))
    return out
