"""The remote client's errors: what went wrong, in a sentence naming the server, as EngineErrors.

httpx's exceptions and servers' error bodies (OpenAI's, Ollama's, FastAPI's, a proxy's HTML page) are
turned into these by `mapped_errors`, `map_httpx_error` and `http_error`.
"""

from __future__ import annotations

import json
import re

import httpx

from ..errors import EngineError

MAX_ERROR_BODY = 64 << 10


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


class mapped_errors:
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
            return plain_text(text), None
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, str):
            return err[:300], None
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            if isinstance(msg, list):  # FastAPI validation errors
                msg = "; ".join(str(x.get("msg", x)) if isinstance(x, dict) else str(x) for x in msg)
            code = err.get("code")
            return (str(msg)[:300] if msg else snippet(doc)), (str(code) if code is not None else None)
    return snippet(doc), None


def plain_text(text: str) -> str:
    if "<" in text and ">" in text:  # HTML: the title and text, no markup
        text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", text)
        text = re.sub(r"(?s)<[^>]+>", " ", text)
    return " ".join(text.split())[:200]


def snippet(v) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)[:200]
    return s[:200]


def json_or_raise(url: str, content: bytes, content_type: str):
    try:
        return json.loads(content)
    except ValueError:
        raise RemoteProtocolError(f"{url} did not answer JSON ({content_type or 'no content type'}): "
                                  f"{plain_text(content[:2000].decode('utf-8', 'replace'))!r}; is this an "
                                  "OpenAI-compatible server?", url) from None
