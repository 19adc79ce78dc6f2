"""A local stand-in for the Hugging Face Hub on 127.0.0.1, for the model library's tests.

Two servers, as the real Hub has: the Hub itself (JSON API and `resolve/`) and a storage host on
another port (another origin) that `resolve/` redirects to with a signed-looking URL. Endpoints,
shaped as huggingface_hub 2.x reads them:

    GET  /api/models?search=&filter=gguf&sort=&limit=&expand=   list, Link: <...>; rel="next" pages
    GET  /api/models/{repo}[/revision/{rev}]?blobs=true          info with siblings (size, lfs sha256),
                                                                 sha (commit), gguf summary
    HEAD/GET /{repo}/resolve/{rev}/{path}                        302 to storage, X-Repo-Commit,
                                                                 X-Linked-Etag ("sha256"), X-Linked-Size,
                                                                 ETag; 401/403 + X-Error-Code: GatedRepo
                                                                 for gated repos; 404 EntryNotFound
    GET  storage /{sha256}?X-Amz-Expires=..&X-Amz-Signature=..   the bytes, Range -> 206 Content-Range

Faults a test can arm on `Fault` (per file path): drop the connection after N bytes, serve
corrupted bytes, ignore Range, sleep per chunk. Every request is recorded (method, path, Range,
whether an Authorization header came) so tests can check what the client sent.

What it cannot check against the real Hub: Xet-backed files (X-Xet-Hash headers, the CAS bridge),
real signed-URL expiry, rate limits (429), the Hub's search ranking and exact JSON field set,
HTTP/2, TLS, and the gated-access flow on the website.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse

PAGE = 3          # models per search page, so pagination is exercised
SEND_CHUNK = 64 * 1024


@dataclass
class RepoFileSpec:
    path: str
    data: bytes
    lfs: bool = True

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class RepoSpec:
    repo_id: str
    files: list[RepoFileSpec]
    gated: bool | str = False
    allowed_tokens: set[str] = field(default_factory=set)
    downloads: int = 0
    likes: int = 0
    gguf: dict | None = None
    tags: list[str] = field(default_factory=lambda: ["gguf"])
    commit: str = ""

    def __post_init__(self):
        if not self.commit:
            self.commit = hashlib.sha1(self.repo_id.encode()).hexdigest()


@dataclass
class Fault:
    drop_after: int | None = None     # close the connection after sending this many body bytes
    drop_times: int = 1               # ... this many times, then serve normally
    corrupt: bool = False             # flip one byte in the middle
    ignore_range: bool = False        # answer 200 with the whole file to a Range request
    delay: float = 0.0                # seconds of sleep per SEND_CHUNK
    gzip_lie: bool = False            # say Content-Encoding: gzip over bytes that are not gzip
    redirect_loop: bool = False       # the storage host redirects the file's URL to itself


class LocalHub:
    def __init__(self, repos: list[RepoSpec], known_tokens: set[str] | None = None):
        self.repos = {r.repo_id: r for r in repos}
        self.known_tokens = known_tokens or set()
        self.faults: dict[str, Fault] = {}
        self.storage_url_override = ""   # redirect downloads there instead (another scheme, another host)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "hub"))
        self.storage = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "storage"))
        for s in (self.hub, self.storage):
            s.daemon_threads = True
        self.threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
                        for s in (self.hub, self.storage)]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    @property
    def storage_url(self) -> str:
        return self.storage_url_override or f"http://127.0.0.1:{self.storage.server_address[1]}"

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        for s in (self.hub, self.storage):
            s.shutdown()
            s.server_close()
        for t in self.threads:
            t.join(timeout=5)

    def record(self, **entry) -> None:
        with self.lock:
            self.requests.append(entry)

    def blob(self, sha: str) -> tuple[RepoFileSpec, RepoSpec] | None:
        for r in self.repos.values():
            for f in r.files:
                if f.sha256 == sha:
                    return f, r
        return None


def _iso(t: float = 1_760_000_000) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def _handler(hub: LocalHub, role: str):
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # a stuck client cannot hold a server thread for ever

        def log_message(self, *args):  # keep test output clean
            pass

        def _json(self, obj, status=200, headers=None):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status, code, message):
            self._json({"error": message}, status, {"X-Error-Code": code, "X-Error-Message": message})

        def do_HEAD(self):
            self._route()

        def do_GET(self):
            self._route()

        def _route(self):
            u = urlparse(self.path)
            auth = self.headers.get("Authorization", "")
            hub.record(server=role, method=self.command, path=unquote(u.path), query=u.query,
                       range=self.headers.get("Range"), auth=bool(auth))
            q = parse_qs(u.query)
            if role == "storage":
                return self._storage(u.path.strip("/"), q)
            parts = [unquote(p) for p in u.path.strip("/").split("/")]
            if parts[:2] == ["api", "models"] and len(parts) == 2:
                return self._search(q)
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                return self._info("/".join(parts[2:4]), q)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), auth)
            self._error(404, "NotFound", "no such endpoint")

        def _summary(self, r: RepoSpec, fields=None):
            d = {"_id": r.commit[:24], "id": r.repo_id, "author": r.repo_id.split("/")[0],
                 "downloads": r.downloads, "likes": r.likes, "lastModified": _iso(), "gated": r.gated,
                 "tags": r.tags, "private": False, "sha": r.commit}
            if r.gguf:
                d["gguf"] = r.gguf
            if fields:
                d = {k: v for k, v in d.items() if k in fields or k in ("_id", "id")}
            return d

        def _search(self, q):
            term = (q.get("search") or [""])[0].lower()
            wanted = q.get("filter") or []
            found = [r for r in hub.repos.values()
                     if term in r.repo_id.lower() and all(w in r.tags for w in wanted)]
            if (q.get("sort") or [""])[0] == "downloads":
                found.sort(key=lambda r: -r.downloads)
            start = int((q.get("cursor") or ["0"])[0])
            limit = int((q.get("limit") or ["1000"])[0])
            page = found[start:start + min(PAGE, limit)]
            headers = {}
            if start + len(page) < len(found):
                rest = {k: v for k, v in q.items() if k != "cursor"}
                query = "&".join(f"{k}={quote(x)}" for k, vs in rest.items() for x in vs)
                headers["Link"] = f'<{hub.endpoint}/api/models?{query}&cursor={start + len(page)}>; rel="next"'
            self._json([self._summary(r, q.get("expand")) for r in page], headers=headers)

        def _info(self, repo_id, q):
            r = hub.repos.get(repo_id)
            if r is None:
                return self._error(401, "RepoNotFound", "Repository not found")
            d = self._summary(r)
            siblings = []
            for f in r.files:
                s = {"rfilename": f.path}
                if "blobs" in q:
                    s["size"] = len(f.data)
                    s["blobId"] = hashlib.sha1(f.data).hexdigest()
                    if f.lfs:
                        s["lfs"] = {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}
                siblings.append(s)
            d["siblings"] = siblings
            self._json(d)

        def _resolve(self, repo_id, rev, path, auth):
            r = hub.repos.get(repo_id)
            if r is None:
                return self._error(401, "RepoNotFound", "Repository not found")
            if rev not in ("main", r.commit):
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            if r.gated:
                token = auth.removeprefix("Bearer ").strip()
                if not token or token not in hub.known_tokens:
                    return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must "
                                                         "have access to it and be authenticated to access it.")
                if token not in r.allowed_tokens:
                    return self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are "
                                                         "not in the authorized list.")
            f = next((f for f in r.files if f.path == path), None)
            if f is None:
                return self._error(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"")
            common = {"X-Repo-Commit": r.commit, "Accept-Ranges": "bytes"}
            if not f.lfs:
                etag = hashlib.sha1(f.data).hexdigest()
                return self._bytes(f, {**common, "ETag": f'"{etag}"'})
            location = f"{hub.storage_url}/{f.sha256}?X-Amz-Expires=3600&X-Amz-Signature=abc123"
            body = f"Found. Redirecting to {location}".encode()
            self.send_response(302)
            for k, v in {**common, "Location": location, "ETag": f'"{f.sha256}"',
                         "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(len(f.data)),
                         "Content-Length": str(len(body)), "Content-Type": "text/plain"}.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _storage(self, sha, q):
            found = hub.blob(sha)
            if found is None or "X-Amz-Signature" not in q:
                return self._error(403, "AccessDenied", "Request has expired or is not signed")
            if hub.faults.get(found[0].path, Fault()).redirect_loop and self.command == "GET":
                self.send_response(302)
                self.send_header("Location", self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._bytes(found[0], {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"})

        def _bytes(self, f: RepoFileSpec, headers):
            fault = hub.faults.get(f.path, Fault())
            data = f.data
            if fault.corrupt:
                mid = len(data) // 2
                data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
            start, status = 0, 200
            rng = self.headers.get("Range")
            if rng and not fault.ignore_range:
                start = int(rng.removeprefix("bytes=").split("-")[0])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            body = data[start:]
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            if fault.gzip_lie:
                self.send_header("Content-Encoding", "gzip")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if self.command == "HEAD":
                return
            limit = len(body)
            if fault.drop_after is not None and fault.drop_times > 0:
                fault.drop_times -= 1
                limit = max(0, min(limit, fault.drop_after - start))
            sent = 0
            try:
                while sent < limit:
                    n = min(SEND_CHUNK, limit - sent)
                    self.wfile.write(body[sent:sent + n])
                    sent += n
                    if fault.delay:
                        time.sleep(fault.delay)
            except (BrokenPipeError, ConnectionResetError):
                pass
            if limit < len(body):
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)  # the connection drops mid-body

    return Handler


def file_spec(path_in_repo: str, source: Path, lfs: bool = True) -> RepoFileSpec:
    return RepoFileSpec(path_in_repo, Path(source).read_bytes(), lfs)
