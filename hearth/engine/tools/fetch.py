"""The fetch_url tool: an http(s) page's text, for a model, reaching public addresses only.

A model's request must not turn Hearth into a way into this machine or its network: a URL naming
127.0.0.1, `localhost`, `2130706433`, `0.0.0.0`, a private or link-local address, a metadata service,
or Hearth's own server is refused. The check is made on the addresses the connection is about to use
(resolved once, then connected to by address, so a name cannot resolve one way for the check and
another for the connection), on the first request and on every redirect. Environment proxies are
not used (the check would judge the proxy, not the page). A host the user allows
(`ToolContext.fetch_allowed_hosts`, as written in URLs) skips the address check.
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request

from ..system.net import forbidden_reason, resolve
from .context import ToolContext, ToolError
from .html_text import html_to_text

FETCH_URL = {"type": "function", "function": {
    "name": "fetch_url",
    "description": "Fetch a web page or text file over http(s) and return its text.",
    "parameters": {"type": "object",
                   "properties": {"url": {"type": "string", "description": "An http or https URL"}},
                   "required": ["url"]}}}

MAX_REDIRECTS = 5
TEXT_TYPES = ("application/json", "application/xml", "application/xhtml+xml")


class FetchRefused(OSError):
    """The URL leads to an address a tool must not reach."""


def run_fetch_url(args: dict, context: ToolContext) -> str:
    if not context.allow_fetch:
        raise ToolError("fetching URLs is turned off; the user can turn it on in the settings")
    url = args["url"].strip()
    if not url.lower().startswith(("http://", "https://")):
        raise ToolError(f"only http and https URLs can be fetched, not {url[:80]!r}")
    opener = guarded_opener(frozenset(h.lower() for h in context.fetch_allowed_hosts))
    req = urllib.request.Request(url, headers={"User-Agent": "Hearth/0.1 (fetch_url tool)"})
    try:
        with opener.open(req, timeout=context.fetch_timeout_s) as resp:
            ctype = resp.headers.get_content_type()
            charset = resp.headers.get_content_charset() or "utf-8"
            data = resp.read(context.fetch_max_bytes + 1)
            status = resp.status
    except urllib.error.HTTPError as e:
        raise ToolError(f"{url} answered HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, FetchRefused):
            raise ToolError(f"refused to fetch {url}: {reason}") from None
        raise ToolError(f"cannot fetch {url}: {reason}") from None
    if not (ctype.startswith("text/") or ctype in TEXT_TYPES):
        raise ToolError(f"{url} is {ctype}, not text")
    truncated = len(data) > context.fetch_max_bytes
    try:
        text = data[:context.fetch_max_bytes].decode(charset, errors="replace")
    except LookupError:                       # a charset Python does not know
        text = data[:context.fetch_max_bytes].decode("utf-8", errors="replace")
    if ctype in ("text/html", "application/xhtml+xml"):
        text = html_to_text(text)
    note = f"\n[truncated at {context.fetch_max_bytes:,} bytes]" if truncated else ""
    return f"HTTP {status}, {ctype}\n\n{text}{note}"


def guarded_connect(address: tuple[str, int], timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None,
                    *, allowed_hosts: frozenset = frozenset()) -> socket.socket:
    """socket.create_connection, after checking every address `host` resolves to, connecting to the
    checked addresses themselves."""
    host, port = address
    try:
        addresses = resolve(host, port)
    except (UnicodeError, ValueError) as e:
        raise OSError(f"{host!r} is not a host name ({e})") from None
    if host.strip("[]").lower() not in allowed_hosts:
        for a in addresses:
            why = forbidden_reason(a)
            if why:
                shown = host if host.strip("[]") == str(a) else f"{host} ({a})"
                raise FetchRefused(f"{shown} is {why}; fetch_url reaches only public addresses unless the user "
                                   "allows the host in the settings")
    error: OSError | None = None
    for a in addresses:
        try:
            return socket.create_connection((str(a), port), timeout, source_address)
        except OSError as e:
            error = e
    raise error or OSError(f"{host} has no address")


class _GuardedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, allowed_hosts: frozenset, **kwargs):
        super().__init__(*args, **kwargs)
        # http.client opens its socket through this attribute (and HTTPS wraps that socket, with the
        # URL's host name for certificate checks), so replacing it guards both.
        self._create_connection = functools.partial(guarded_connect, allowed_hosts=allowed_hosts)


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, allowed_hosts: frozenset, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = functools.partial(guarded_connect, allowed_hosts=allowed_hosts)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, allowed_hosts: frozenset):
        super().__init__()
        self.allowed_hosts = allowed_hosts

    def http_open(self, req):
        return self.do_open(functools.partial(_GuardedHTTPConnection, allowed_hosts=self.allowed_hosts), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, allowed_hosts: frozenset):
        super().__init__(context=ssl.create_default_context())
        self.allowed_hosts = allowed_hosts

    def https_open(self, req):
        return self.do_open(functools.partial(_GuardedHTTPSConnection, allowed_hosts=self.allowed_hosts), req,
                            context=self._context)


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows at most MAX_REDIRECTS redirects, to http(s) only; the next connection is guarded like
    the first."""
    max_redirections = MAX_REDIRECTS

    def http_error_302(self, req, fp, code, msg, headers):
        target = urllib.parse.urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
        if urllib.parse.urlsplit(target).scheme.lower() not in ("http", "https"):
            raise FetchRefused(f"it redirects to {target[:80]!r}; only http and https can be fetched")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def guarded_opener(allowed_hosts: frozenset = frozenset()) -> urllib.request.OpenerDirector:
    """An opener for http and https only, every connection (redirects too) through guarded_connect,
    no proxies, no other schemes."""
    opener = urllib.request.OpenerDirector()
    for handler in (_HTTPHandler(allowed_hosts), _HTTPSHandler(allowed_hosts), _RedirectHandler(),
                    urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor(),
                    urllib.request.UnknownHandler()):
        opener.add_handler(handler)
    return opener
