"""The HTTP front of the server: the standard library's ThreadingHTTPServer speaking HTTP/1.1.

Routes (each also without the /v1 prefix, as llama.cpp's server accepts):
    GET  /v1/models                 the one loaded model
    GET  /v1/models/<id>
    POST /v1/chat/completions       stream false: one JSON body; stream true: server-sent events
    GET  /health                    {"status": "ok"} (no token needed)
    GET  /hearth/stats              the service's counters and recent generations

A stream is `data: {chunk}\n\n` events in chunked transfer encoding, ended by `data: [DONE]\n\n`
and the zero-length chunk. While a reply is queued or generating, the handler polls its socket: a
client that closed the connection cancels the job (the engine stops at the next token), so a stopped
chat in a client frees the engine at once. Errors are OpenAI error bodies with their status codes.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import json
import logging
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..system.net import is_loopback_host
from .chat import ChatOutcome, ChatService
from .limits import RETRY_AFTER_S, DeadlineReader, PerAddress, refuse_busy
from .protocol import (RequestError, chunk_body, completion_body, error_body, models_body, new_completion_id,
                       now, parse_chat_request, timings, usage, usage_chunk_body)
from .worker import JobFailed

log = logging.getLogger("hearth.engine.server")
MAX_BODY = 8 << 20
LISTEN_BACKLOG = 512   # connection attempts the kernel holds before accept(); past it they are dropped
MAX_PENDING = 64       # chat requests queued or generating; more are answered 503 with Retry-After
MAX_CONNECTIONS = 256  # open connections (one thread each); more are answered 503 and closed
MAX_REFUSING = 64      # connections being answered 503 at once; past even that, they are closed unanswered
MAX_PER_ADDRESS = 64   # open connections from one client address; more are answered 503 and closed
HEAD_DEADLINE_S = 10.0 # a request head (line and headers) must arrive whole within this, however it drips
BODY_DEADLINE_S = 60.0 # and its body within this after the head


def is_loopback(host: str) -> bool:
    """Whether listening on `host` keeps the server to this machine: judged by what the name resolves
    to (`127.evil.example` is just a name), so a token is required for anything else."""
    return is_loopback_host(host)


class HearthServer(ThreadingHTTPServer):
    """Serves `service` on (host, port); port 0 picks a free one (see `.port`). `token`, when set,
    must come as `Authorization: Bearer <token>` on every route but /health."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, service: ChatService, host: str = "127.0.0.1", port: int = 8080, token: str | None = None,
                 max_body: int = MAX_BODY, max_pending: int = MAX_PENDING, max_connections: int = MAX_CONNECTIONS,
                 max_per_address: int = MAX_PER_ADDRESS, head_deadline_s: float = HEAD_DEADLINE_S,
                 body_deadline_s: float = BODY_DEADLINE_S):
        """`max_pending` chat requests wait or generate at once (the engine serves them one by one);
        past it, past `max_connections` open connections and past `max_per_address` from one client
        address, a request gets 503 with Retry-After. A request head that has not arrived whole
        `head_deadline_s` after the connection opened (or, kept alive, after its first byte), or a
        body `body_deadline_s` after its head, closes the connection: a client that drips bytes
        cannot hold a thread for ever."""
        if not is_loopback(host) and not token:
            raise ValueError(f"refusing to listen on {host} without a token: anyone who can reach this "
                             "machine could use it. Pass --token (or listen on 127.0.0.1)")
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.service, self.token, self.max_body = service, token, max_body
        self.max_pending, self.max_connections = max_pending, max_connections
        self.max_per_address, self.head_deadline_s, self.body_deadline_s = max_per_address, head_deadline_s, body_deadline_s
        self._per_address = PerAddress(max_per_address)
        self._pending = threading.BoundedSemaphore(max_pending)
        self._connections = threading.BoundedSemaphore(max_connections)
        self._refusing = threading.BoundedSemaphore(MAX_REFUSING)
        super().__init__((host, port), _Handler)

    def process_request(self, request, client_address) -> None:
        """One thread per connection, up to `max_connections` and `max_per_address`; beyond, a
        short-lived thread answers 503 (see `refuse_busy`)."""
        address = _address(client_address)
        if not self._per_address.take(address):
            return self._refuse_soon(request, f"too many open connections from {address}")
        if not self._connections.acquire(blocking=False):
            self._per_address.give_back(address)
            return self._refuse_soon(request, "too many open connections")
        super().process_request(request, client_address)

    def _refuse_soon(self, request, why: str) -> None:
        if self._refusing.acquire(blocking=False):
            threading.Thread(target=self._refuse, args=(request, why), daemon=True).start()
        else:
            self.shutdown_request(request)

    def _refuse(self, request, why: str) -> None:
        try:
            refuse_busy(request, why, min(2.0, self.head_deadline_s))
        finally:
            self._refusing.release()

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()
            self._per_address.give_back(_address(client_address))

    @contextlib.contextmanager
    def pending_slot(self):
        """A place among the `max_pending` chat requests for the duration of the block, or a 503."""
        if not self._pending.acquire(blocking=False):
            raise RequestError(f"the server is busy: {self.max_pending} requests are already waiting for the "
                               f"model; retry in {RETRY_AFTER_S} s", status=503, type="server_error",
                               code="server_busy", retry_after=RETRY_AFTER_S)
        try:
            yield
        finally:
            self._pending.release()

    def handle_error(self, request, client_address) -> None:
        """A client that drops its kept-alive connection is normal, not a traceback on stderr."""
        import sys  # noqa: PLC0415
        e = sys.exc_info()[1]
        if isinstance(e, (ConnectionError, TimeoutError)):
            log.debug("%s: %s", client_address, e)
            return
        log.error("error serving %s", client_address, exc_info=e)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = self.server_address[0]
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}/v1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Hearth"
    timeout = 120          # an idle kept-alive connection is closed after this (waiting replies never read)
    server: HearthServer

    def log_message(self, fmt, *args) -> None:  # the standard library prints to stderr
        log.debug("%s %s", self.address_string(), fmt % args)

    def setup(self) -> None:
        super().setup()
        self._reader = DeadlineReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self._reader)
        self._requests = 0

    def handle_one_request(self) -> None:
        # A fresh connection brings its first head within the deadline; a kept-alive one may first
        # idle for `timeout`, then its head must arrive within the deadline of its first byte.
        self._reader.expect_head(self.server.head_deadline_s, from_now=self._requests == 0)
        self._requests += 1
        super().handle_one_request()

    # --- routing ---------------------------------------------------------------------------

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path[3:] if path.startswith("/v1/") else path

    def do_GET(self) -> None:
        self._guard(self._get)

    def do_POST(self) -> None:
        self._guard(self._post)

    def _guard(self, handler) -> None:
        self._body_read = self.command != "POST"
        try:
            route = self._route()
            if route != "/health":
                self._check_token()
            handler(route)
        except RequestError as e:
            # An unread request body would be taken for the next request: close instead.
            headers = {"Retry-After": str(e.retry_after)} if e.retry_after is not None else {}
            self._send_json(e.status, e.body(), close=not self._body_read, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001  a bug must not take the server down: report it
            log.exception("error serving %s", self.path)
            self._send_json(500, error_body(f"internal server error: {e}", "server_error"), close=True)

    def _check_token(self) -> None:
        if not self.server.token:
            return
        got = self.headers.get("Authorization", "")
        scheme, _, value = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.server.token.encode()):
            raise RequestError("a valid API key is needed: send 'Authorization: Bearer <token>' with the "
                               "token this server was started with", status=401, code="invalid_api_key")

    def _get(self, route: str) -> None:
        svc = self.server.service
        if route == "/health":
            return self._send_json(200, {"status": "ok"})
        if route == "/models":
            return self._send_json(200, models_body(svc.model_id, svc.created, **_model_meta(svc)))
        if route.startswith("/models/"):
            if route[len("/models/"):] != svc.model_id:
                raise RequestError(f"no model {route[len('/models/'):]!r} here; this server has {svc.model_id!r}",
                                   status=404, code="model_not_found")
            return self._send_json(200, models_body(svc.model_id, svc.created)["data"][0])
        if route == "/hearth/stats":
            return self._send_json(200, svc.stats())
        raise RequestError(f"no route GET {self.path}", status=404, code="not_found")

    def _post(self, route: str) -> None:
        if route != "/chat/completions":
            self._read_body()
            raise RequestError(f"no route POST {self.path} (this server has /v1/chat/completions)",
                               status=404, code="not_found")
        req = parse_chat_request(self._read_body())
        svc = self.server.service
        if req.model and req.model != svc.model_id:
            raise RequestError(f"no model {req.model!r} here; this server has {svc.model_id!r} (GET /v1/models)",
                               status=404, code="model_not_found", param="model")
        with self.server.pending_slot():
            cid = new_completion_id()
            job = svc.submit(cid, req)
            try:
                items = job.items(gone=self._client_gone)
                if req.stream:
                    self._stream(cid, req, job, items)
                else:
                    self._complete(cid, job, items)
            finally:
                if not job.done.is_set():   # the client left, or the answer failed: free the engine
                    job.cancel.set()

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise RequestError("send the request with a Content-Length, not chunked", status=411)
        length = self.headers.get("Content-Length", "0").strip()
        if not (length.isascii() and length.isdigit()):   # a sign would let the body be read as the next request
            raise RequestError(f"Content-Length must be a whole number of bytes, not {length[:20]!r}",
                               param="Content-Length")
        n = int(length)
        if n > self.server.max_body:
            raise RequestError(f"the request body is {n} bytes; this server takes at most {self.server.max_body}",
                               status=413, code="request_too_large")
        self._reader.expect_body(self.server.body_deadline_s)
        try:
            body = self.rfile.read(n) if n > 0 else b""
        except TimeoutError:
            raise RequestError(f"the request body did not arrive within {self.server.body_deadline_s:g} s",
                               status=408, code="request_timeout") from None
        finally:
            self._reader.expect_nothing()
        self._body_read = True
        return body

    # --- replies ---------------------------------------------------------------------------

    def _complete(self, cid: str, job, items) -> None:
        out = None
        try:
            for kind, value in items:
                if kind == "done":
                    out = value
        except JobFailed as e:
            raise _as_request_error(e.error) from None
        if out is None:  # the client left: nobody to answer
            self.close_connection = True
            return
        self._send_json(200, _completion(out, self.server.service.model_id))

    def _stream(self, cid: str, req, job, items) -> None:
        model, created = self.server.service.model_id, now()
        started = False
        try:
            for kind, value in items:
                if not started:
                    self._start_stream()
                    started = True
                    self._event(chunk_body(cid, created, model, {"role": "assistant", "content": ""}))
                if kind == "text":
                    self._event(chunk_body(cid, created, model, {"content": value}))
                elif kind == "tool_call":
                    self._event(chunk_body(cid, created, model, {"tool_calls": [value]}))
                elif kind == "done":
                    self._finish_stream(cid, created, model, req, value)
                    return
        except JobFailed as e:
            err = _as_request_error(e.error)
            if not started:
                raise err from None
            self._event(err.body())
            self._end_stream()
            return
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            job.cancel.set()
        self.close_connection = True  # the client left mid-stream

    def _finish_stream(self, cid, created, model, req, out: ChatOutcome) -> None:
        u = _usage(out)
        self._event(chunk_body(cid, created, model, {}, out.finish_reason, timings=timings(out.stats),
                               **({} if req.include_usage else {"usage": u})))
        if req.include_usage:
            self._event(usage_chunk_body(cid, created, model, u))
        self._end_stream()

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()

    def _event(self, body: dict) -> None:
        self._chunk(b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n")

    def _end_stream(self) -> None:
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_json(self, status: int, body: dict, close: bool = False, headers: dict | None = None) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _client_gone(self) -> bool:
        """True when the client closed its end (its socket reads as end-of-file)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


def _address(client_address) -> str:
    return client_address[0] if isinstance(client_address, tuple) else str(client_address)


def _usage(out: ChatOutcome) -> dict:
    return usage(out.prompt_tokens, out.stats.generated_tokens, out.stats.reused_tokens)


def _completion(out: ChatOutcome, model: str) -> dict:
    return completion_body(out.id, now(), model, out.content, out.tool_calls, out.finish_reason, _usage(out),
                           timings(out.stats))


def _as_request_error(e: BaseException) -> RequestError:
    if isinstance(e, RequestError):
        return e
    from ..errors import EngineError  # noqa: PLC0415
    if isinstance(e, EngineError):
        return RequestError(str(e), status=500, type="server_error", code="engine_error")
    log.error("generation failed", exc_info=e)
    return RequestError(f"internal server error: {e}", status=500, type="server_error")


def _model_meta(svc: ChatService) -> dict:
    eng = svc.engine
    meta = {"n_ctx": getattr(eng, "n_ctx", None)}
    if isinstance(getattr(eng, "kv_dtype", None), str):
        meta["kv_dtype"] = eng.kv_dtype
    info = getattr(eng, "backend_info", None)
    if isinstance(info, dict):
        meta["backend"] = info.get("backend")
    return meta
