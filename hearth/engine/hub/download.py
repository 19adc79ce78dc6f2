"""Downloading one model from the Hub: resumable, pausable, cancellable, checked against SHA-256.

Why not `hf_hub_download`: in huggingface_hub 2.x it writes to a process-unique temporary file and
deletes it on any failure, so nothing survives a closed app or a pause; it has no pause or cancel
and checks no SHA-256 of what it wrote. What is used from huggingface_hub: the file's URL and
metadata (`hf_hub_url`, `get_hf_file_metadata`: the redirect target, X-Linked-Size, X-Linked-Etag),
its HTTP session and headers, its error types. This module adds the Range loop over that session:

    per file:  <file>.part + <file>.part.json (engine.hub.partial)  ->  GET location, Range: bytes=N-
               206 from N: append;  200: the server ignored Range, start again;  416 at full size: done
               connection lost: retried `retries` times (fresh location each time, bounded), then kept
               for a later resume;  disk full: kept, said so
               end: length == size, SHA-256 == the Hub's LFS sha256, else deleted and said so;
               then renamed into place
    split models: every part, then joined into one file (engine.library.split_gguf)

`Download.run()` blocks; call it on a worker thread. `pause()` and `cancel()` may be called from
any thread; they take effect at the next chunk (a stalled server: within the read timeout).
"""

from __future__ import annotations

import collections
import enum
import errno
import hashlib
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx2
from huggingface_hub.utils import get_session

from ..errors import GGUFError, HubError
from ..library.file_names import split_part
from ..library.split_gguf import join_split
from .client import HubClient, HubFile, RemoteModel, hub_error
from .names import check_job_names, inside
from .partial import DownloadJob, part_path, read_sidecar, remove_partial, write_sidecar

CHUNK = 1 << 20
HASH_CHUNK = 8 << 20
TIMEOUT = httpx2.Timeout(20.0, connect=10.0)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class Outcome(enum.Enum):
    DONE = "done"
    PAUSED = "paused"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Progress:
    name: str
    stage: str            # "download", "verify" (hashing what an earlier run left), "join"
    done: int             # bytes of the whole model
    total: int
    speed: float          # bytes/s over the last few seconds (0 until measured)
    eta: float | None     # seconds left, None until a speed is known
    file_index: int       # 0-based, of n_files
    n_files: int


@dataclass(frozen=True)
class DownloadResult:
    outcome: Outcome
    path: Path | None     # the model file when DONE


def job_for(model: RemoteModel, repo_id: str, commit: str) -> DownloadJob:
    return DownloadJob(repo_id, commit, model.name, model.files)




class _Speed:
    """Bytes per second over a sliding window of `window` seconds."""

    def __init__(self, clock: Callable[[], float], window: float = 4.0):
        self.clock, self.window = clock, window
        self.samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, total_bytes: int) -> float:
        now = self.clock()
        self.samples.append((now, total_bytes))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


class Download:
    """Downloads `job` into `folder` (see `model_folder`).

    on_progress(Progress) is called from the downloading thread at most every `progress_every`
    seconds and once at the end of each stage."""

    def __init__(self, client: HubClient, job: DownloadJob, folder: Path,
                 on_progress: Callable[[Progress], None] | None = None, retries: int = 3,
                 chunk_size: int = CHUNK, progress_every: float = 0.1,
                 clock: Callable[[], float] = time.monotonic):
        self.client, self.job, self.folder = client, job, Path(folder)
        self.on_progress = on_progress
        self.retries, self.chunk_size, self.progress_every = retries, chunk_size, progress_every
        self.clock = clock
        self._pause = threading.Event()
        self._cancel = threading.Event()
        self._speed = _Speed(clock)
        self._last_report = -1e9
        self._sha = hashlib.sha256()  # of the file being downloaded, over the bytes in its .part

    # --- control, from any thread
    def pause(self) -> None:
        self._pause.set()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def stopping(self) -> bool:
        return self._pause.is_set() or self._cancel.is_set()

    # --- the work
    def final_paths(self) -> list[Path]:
        return [self.folder / f.path for f in self.job.files]

    def model_path(self) -> Path:
        first = self.final_paths()[0]
        return first if len(self.job.files) == 1 else first.with_name(self.job.name)

    def run(self) -> DownloadResult:
        check_job_names(self.job.repo_id, [f.path for f in self.job.files], self.job.name)
        for f in self.job.files:
            inside(self.folder, f.path)
        target = self.model_path()
        if target.is_file() and len(self.job.files) > 1 and not any(p.exists() for p in self.final_paths()):
            return DownloadResult(Outcome.DONE, target)  # joined by an earlier run
        self._check_space()
        done_before = 0
        for i, (f, final) in enumerate(zip(self.job.files, self.final_paths())):
            outcome = self._file(i, f, final, done_before)
            if outcome is not Outcome.DONE:
                return self._stopped(outcome)
            done_before += f.size
        if len(self.job.files) > 1:
            self._report("join", self.job.size, len(self.job.files) - 1, force=True)
            try:
                target = join_split(self.final_paths()[0], out=target)
            except GGUFError as e:
                raise HubError("bad_file", f"{self.job.name}: the parts do not join into one model: {e}") from e
        return DownloadResult(Outcome.DONE, target)

    def _stopped(self, outcome: Outcome) -> DownloadResult:
        if outcome is Outcome.CANCELLED:
            for final in self.final_paths():
                remove_partial(final)
                if split_part(final.name) is not None:
                    final.unlink(missing_ok=True)  # finished parts of an unfinished split model
        return DownloadResult(outcome, None)

    def _check_space(self) -> None:
        left = 0
        for f, final in zip(self.job.files, self.final_paths()):
            if not final.is_file():
                part = part_path(final)
                left += f.size - (part.stat().st_size if part.is_file() else 0)
        if len(self.job.files) > 1:
            left += self.job.size  # the joined copy, written before the parts are removed
        self.folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.folder).free
        if left > free:
            raise HubError("disk_full", f"{self.job.name} needs {left / 1e9:.2f} GB more in {self.folder}, "
                                        f"{free / 1e9:.2f} GB are free: free some space or choose another "
                                        "models folder")

    def _file(self, index: int, f: HubFile, final: Path, done_before: int) -> Outcome:
        if final.is_file() and final.stat().st_size == f.size:
            return Outcome.DONE  # renamed into place only after its checks passed
        try:
            location = self._locate(f)  # a gated or missing file fails here, before anything is written
        except httpx2.TransportError:
            location = None  # the Hub is not answering: retried below
        final.parent.mkdir(parents=True, exist_ok=True)
        part = part_path(final)
        found = read_sidecar(final)
        same_job = found is not None and found[0] == self.job and found[1] == f.path
        if not same_job or not part.is_file() or part.stat().st_size > f.size:
            part.unlink(missing_ok=True)  # bytes of unknown origin are never resumed
        write_sidecar(final, self.job, f.path)
        part.touch()
        self._sha = hashlib.sha256()
        have = self._hash_existing(part, index, done_before)
        if have is None:
            return self._control_outcome()
        for attempt in range(self.retries + 1):
            if self.stopping:
                return self._control_outcome()
            try:
                location = location or self._locate(f)
                have = self._stream(index, f, part, have, done_before, *location)
                break
            except httpx2.UnsupportedProtocol as e:       # a location that is not http(s): no retry helps
                raise HubError("bad_response", f"{f.path}: the Hub sent a download location Hearth will not "
                                               f"follow ({e})") from e
            except (httpx2.TransportError, httpx2.StreamError) as e:
                have, location = part.stat().st_size, None  # a fresh (signed) location next time
                if attempt >= self.retries:
                    raise HubError("interrupted", f"{self.job.name}: the connection was lost at "
                                   f"{(done_before + have) / 1e6:.1f} of {self.job.size / 1e6:.1f} MB "
                                   f"({type(e).__name__}); what was downloaded is kept: resume to continue") from e
                if self._cancel.wait(min(0.25 * 2 ** attempt, 4.0)) or self._pause.is_set():
                    return self._control_outcome()
            except (httpx2.HTTPError, httpx2.InvalidURL) as e:   # a lying body, a redirect loop: not retried
                raise HubError("bad_response", f"{f.path}: {_what_went_wrong(e)}; what was downloaded is "
                                               "kept: try again later or choose another repository") from e
        if have is None:
            return self._control_outcome()
        return self._finish(f, final, part)

    def _locate(self, f: HubFile) -> tuple[str, bool]:
        """(url, send_token) of the file's bytes; HubError 'changed' when its size moved."""
        try:
            url, size, send_token = self.client.file_location(self.job.repo_id, f.path, self.job.commit)
        except HubError as e:
            if e.reason == "network" and isinstance(e.__cause__, (httpx2.TransportError, OSError)):
                raise httpx2.TransportError(str(e)) from e  # retried like a cut connection
            raise
        if size is not None and size != f.size:
            raise HubError("changed", f"{f.path}: the Hub now says {size} bytes, the listing said {f.size}: "
                                      "reopen the repository and download again")
        return url, send_token

    def _control_outcome(self) -> Outcome:
        return Outcome.CANCELLED if self._cancel.is_set() else Outcome.PAUSED

    def _hash_existing(self, part: Path, index: int, done_before: int) -> int | None:
        have = 0
        with open(part, "rb") as fh:
            while block := fh.read(HASH_CHUNK):
                if self.stopping:
                    return None
                self._sha.update(block)
                have += len(block)
                self._report("verify", done_before + have, index)
        return have

    def _stream(self, index: int, f: HubFile, part: Path, have: int, done_before: int,
                url: str, send_token: bool) -> int | None:
        """One GET from `have` on; returns the bytes in `part` after it, or None when stopped."""
        if have >= f.size:
            return have
        headers = self.client.download_headers(send_token)
        headers["Range"] = f"bytes={have}-"
        headers["Accept-Encoding"] = "identity"
        with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT, follow_redirects=True) as r:
            if r.status_code == 416 and have == f.size:
                return have
            if r.status_code >= 400:
                r.read()
                raise hub_error(_status_error(r), f"{self.job.repo_id}/{f.path}", self.job.repo_id,
                                self.client.token)
            mode = "ab"
            if r.status_code == 200:
                mode, have, self._sha = "wb", 0, hashlib.sha256()  # Range ignored: the whole file comes again
            elif r.status_code == 206:
                m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
                if m is None or int(m[1]) != have:
                    raise HubError("bad_response", f"{f.path}: asked for bytes from {have}, the server sent "
                                                   f"{r.headers.get('Content-Range')!r}")
            else:
                raise HubError("bad_response", f"{f.path}: unexpected HTTP {r.status_code}")
            with open(part, mode) as out:
                for chunk in r.iter_bytes(self.chunk_size):
                    if have + len(chunk) > f.size:
                        raise HubError("bad_response", f"{f.path}: the server sent more than {f.size} bytes")
                    try:
                        out.write(chunk)
                    except OSError as e:
                        if e.errno == errno.ENOSPC:
                            raise HubError("disk_full", f"{self.job.name}: the disk is full after "
                                           f"{(done_before + have) / 1e6:.1f} MB; what was downloaded is kept: "
                                           "free some space and resume") from e
                        raise
                    self._sha.update(chunk)
                    have += len(chunk)
                    self._report("download", done_before + have, index)
                    if self.stopping:
                        return None
        if have < f.size:
            raise httpx2.RemoteProtocolError(f"the body ended at {have} of {f.size} bytes")
        self._report("download", done_before + have, index, force=True)
        return have

    def _finish(self, f: HubFile, final: Path, part: Path) -> Outcome:
        size = part.stat().st_size
        if size != f.size:
            remove_partial(final)
            raise HubError("bad_file", f"{f.path}: {size} bytes downloaded, the Hub says {f.size}; deleted")
        digest = self._sha.hexdigest()
        if f.sha256 and digest != f.sha256.lower():
            remove_partial(final)
            raise HubError("checksum", f"{f.path}: the download does not match the Hub's SHA-256 "
                                       f"(got {digest[:12]}…, expected {f.sha256[:12]}…): it was deleted; "
                                       "download it again")
        part.replace(final)
        remove_partial(final)
        return Outcome.DONE

    def _report(self, stage: str, done: int, index: int, force: bool = False) -> None:
        if self.on_progress is None:
            return
        speed = self._speed.add(done) if stage == "download" else 0.0
        now = self.clock()
        if not force and now - self._last_report < self.progress_every:
            return
        self._last_report = now
        left = self.job.size - done
        eta = left / speed if speed > 0 else None
        self.on_progress(Progress(self.job.name, stage, done, self.job.size, speed, eta, index,
                                  len(self.job.files)))


def _what_went_wrong(e: Exception) -> str:
    if isinstance(e, httpx2.DecodingError):
        return f"the server's body could not be decoded as the encoding it named ({e})"
    if isinstance(e, httpx2.TooManyRedirects):
        return "the download location redirects in a loop (too many redirects)"
    return f"the download failed ({type(e).__name__}: {e})"


class _StatusError(Exception):
    def __init__(self, response):
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def _status_error(r) -> Exception:
    """huggingface_hub's typed error for a failed response (GatedRepoError, ...)."""
    from huggingface_hub.utils import hf_raise_for_status  # noqa: PLC0415
    try:
        hf_raise_for_status(r)
    except Exception as e:  # noqa: BLE001
        return e
    return _StatusError(r)
