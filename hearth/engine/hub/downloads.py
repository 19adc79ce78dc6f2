"""The downloads the Models window shows: each on its own thread, paused, resumed, cancelled by
key, finished models added to the local registry. Qt-free: callbacks run on the download's thread
and the app turns them into queued signals.

A paused download is nothing but its `.part` files and sidecars (`engine.hub.partial`), so one
paused here, one cut off by a network error and one left by a closed app are the same thing:
`pending()` lists them all and `resume()` continues any of them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

from ..errors import EngineError, HubError
from ..library.registry import ModelRegistry
from .client import HubClient
from .download import Download, DownloadResult, Outcome, Progress
from .partial import DownloadJob, bytes_on_disk, model_folder, pending_downloads, remove_partial

log = logging.getLogger(__name__)
Key = tuple[str, str]  # (repo id, model file name)


@dataclass
class DownloadCallbacks:
    progress: Callable[[Key, Progress], None] = lambda key, p: None
    # (key, result or None, error or None): exactly one call per start/resume
    finished: Callable[[Key, DownloadResult | None, EngineError | None], None] = lambda key, r, e: None


class DownloadManager:
    def __init__(self, client: HubClient, registry: ModelRegistry, callbacks: DownloadCallbacks | None = None):
        self.client, self.registry = client, registry
        self.callbacks = callbacks or DownloadCallbacks()
        self._lock = threading.Lock()
        self._running: dict[Key, tuple[Download, threading.Thread]] = {}

    @staticmethod
    def key(job: DownloadJob) -> Key:
        return job.repo_id, job.name

    def running(self) -> list[Key]:
        with self._lock:
            return list(self._running)

    def pending(self) -> list[DownloadJob]:
        """Downloads with bytes on disk and not running: paused, cut off, or left by a closed app."""
        running = set(self.running())
        return [job for _, job in pending_downloads(self.registry.models_dir) if self.key(job) not in running]

    def on_disk(self, job: DownloadJob) -> int:
        """Bytes of `job` already downloaded (a paused or cut-off download resumes from there)."""
        return bytes_on_disk(model_folder(self.registry.models_dir, job.repo_id), job)

    def start(self, job: DownloadJob) -> Key:
        """Start (or resume: the same call) downloading `job` into the models folder."""
        key = self.key(job)
        with self._lock:
            if key in self._running:
                raise EngineError(f"{job.name} is already downloading")
            dl = Download(self.client, job, model_folder(self.registry.models_dir, job.repo_id),
                          on_progress=lambda p: self.callbacks.progress(key, p))
            t = threading.Thread(target=self._run, args=(key, dl), name=f"download {job.name}", daemon=True)
            self._running[key] = (dl, t)
        t.start()
        return key

    resume = start

    def _run(self, key: Key, dl: Download) -> None:
        result, error = None, None
        try:
            result = dl.run()
            if result.outcome is Outcome.DONE and result.path is not None:
                self.registry.add_downloaded(result.path, dl.job.repo_id)
        except EngineError as e:
            error = e
        except OSError as e:  # a folder that vanished, permissions: said, and the app stays up
            error = HubError("io", f"{dl.job.name}: {e.strerror or e}")
        except Exception as e:  # noqa: BLE001  a bug or an answer nobody foresaw: still one finished()
            log.exception("download of %s failed", dl.job.name)
            error = HubError("internal", f"{dl.job.name}: the download failed ({type(e).__name__}: {e})")
        finally:
            with self._lock:
                self._running.pop(key, None)
        self.callbacks.finished(key, result, error)

    def pause(self, key: Key) -> None:
        with self._lock:
            entry = self._running.get(key)
        if entry:
            entry[0].pause()

    def cancel(self, key: Key) -> None:
        """Stop a running download and delete its bytes; for a paused one, delete its bytes."""
        with self._lock:
            entry = self._running.get(key)
        if entry:
            entry[0].cancel()
            return
        for job in self.pending():
            if self.key(job) == key:
                folder = model_folder(self.registry.models_dir, job.repo_id)
                for f in job.files:
                    remove_partial(folder / f.path)

    def close(self, timeout: float = 10.0) -> None:
        """Pause every download (their bytes stay for the next run) and wait for the threads."""
        with self._lock:
            entries = list(self._running.values())
        for dl, _ in entries:
            dl.pause()
        for _, t in entries:
            t.join(timeout)

