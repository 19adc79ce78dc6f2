"""Servers for the server and remote-client tests, all on 127.0.0.1 with an ephemeral port.

- `hearth_server(...)`: Hearth's own server (engine.server) on the real default model, in-process,
  serving from a thread; one per test module (loading the model is the slow part).
- `ScriptedServer`: a tiny http.server that answers each path prefix with a scripted reply, for what
  Hearth's server never sends (tool calls on demand, garbage, hangs). It records every request.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def hearth_server(n_ctx: int = 512, token: str | None = None, presets=None, engine=None, chat_images=None):
    """Yields (server, service). `presets` is a PresetPrefixes or None; `chat_images` a ChatImages."""
    from hearth.engine import Engine
    from hearth.engine.server import ChatService, HearthServer
    eng = engine or Engine.load(n_ctx=n_ctx)
    service = ChatService(eng, presets=presets, chat_images=chat_images)
    server = HearthServer(service, "127.0.0.1", 0, token=token)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield server, service
    finally:
        server.shutdown()
        server.server_close()
        service.close()


def wait_for(predicate, timeout: float = 60.0, every: float = 0.05):
    """Poll until predicate() is truthy; returns its value, or fails after `timeout` seconds."""
    end = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(every)


def sse(*events) -> bytes:
    """An event stream of the given data objects (dicts are JSON-encoded, strings sent as is)."""
    out = b""
    for e in events:
        out += b"data: " + (json.dumps(e) if isinstance(e, dict) else e).encode() + b"\n\n"
    return out


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}


class Reply:
    """A scripted answer: status, content type, body parts (sent with `pause` seconds between them),
    then the connection is closed (HTTP/1.0 framing: the end of the body is the end of the connection).
    `hang` seconds are slept before anything is sent."""

    def __init__(self, body=b"", status: int = 200, ctype: str = "text/event-stream", pause: float = 0.0,
                 hang: float = 0.0, parts=None):
        self.status, self.ctype, self.pause, self.hang = status, ctype, pause, hang
        self.parts = parts if parts is not None else [body if isinstance(body, bytes) else body.encode()]


class ScriptedServer:
    """`server.script["name"] = Reply(...)`; the client's base URL is `server.url("name")`."""

    def __init__(self):
        self.script: dict[str, Reply] = {}
        self.requests: list[tuple[str, str, dict | None, dict]] = []  # (method, path, json body, headers)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def _answer(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                outer.requests.append((method, self.path, body, dict(self.headers)))
                name = self.path.strip("/").split("/")[0]
                r = outer.script.get(name)
                if r is None:
                    self.send_error(404)
                    return
                time.sleep(r.hang)
                self.send_response(r.status)
                if r.ctype:
                    self.send_header("Content-Type", r.ctype)
                self.end_headers()
                try:
                    for i, p in enumerate(r.parts):
                        if i and r.pause:
                            time.sleep(r.pause)
                        self.wfile.write(p)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
