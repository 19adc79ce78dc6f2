"""`RemoteClient` and `ChatStream`: the HTTP side of the remote chat client (httpx)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from typing import Callable, Iterator, Sequence

import httpx

from ..generation import cancel_check
from ..sampling import Sampling
from .errors import MAX_ERROR_BODY, RemoteError, RemoteProtocolError, http_error, json_or_raise, mapped_errors, snippet
from .events import RemoteEvent, RemoteModel, RemoteStats, cancelled_event
from .stream import read_reply

DEFAULT_TIMEOUT_S = 120.0      # longest silence while waiting for a reply or its next token
CONNECT_TIMEOUT_S = 10.0


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
        with mapped_errors(url, self.timeout):
            r = self._http.get("models")
            if r.status_code >= 400:
                raise http_error(url, r.status_code, r.reason_phrase, r.content[:MAX_ERROR_BODY])
            doc = json_or_raise(url, r.content, r.headers.get("content-type", ""))
        data = doc.get("data") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
        if not isinstance(data, list):
            raise RemoteProtocolError(f"{url} did not list models (expected {{\"data\": [...]}}): {snippet(doc)}",
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
        self._cancel = cancel_check(cancel)
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
        client = self._client
        url = f"{client.base_url}/chat/completions"
        t0 = time.perf_counter()
        if self._stopped():
            yield cancelled_event(RemoteStats())
            return
        try:
            with mapped_errors(url, client.timeout):
                req = client._streams.build_request("POST", "chat/completions", json=self.body,
                                                    headers={"Accept": "text/event-stream"},
                                                    extensions={"trace": self._trace})
                r = client._streams.send(req, stream=True)
        except RemoteError:
            if self._stopped():
                yield cancelled_event(RemoteStats())
                return
            raise
        try:
            if r.status_code >= 400:
                with mapped_errors(url, client.timeout):
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


def _read_capped(r: httpx.Response) -> bytes:
    data = b""
    for part in r.iter_bytes():
        data += part
        if len(data) >= MAX_ERROR_BODY:
            break
    return data[:MAX_ERROR_BODY]


# --- errors ------------------------------------------------------------------------------------
