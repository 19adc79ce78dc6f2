"""One thread owns the Engine; every request's work runs on it, one job at a time, in order.

The HTTP threads never touch the engine: they submit a job and read what it puts out. A job that is
cancelled while still queued never starts; one cancelled while running sees `job.cancel` set (the
engine checks it between tokens) and ends early.

    job = worker.submit(fn)              # fn(engine, job) runs on the worker thread; job.put(item)
    for item in job.items(gone=...):     # the HTTP thread: items in order; ends when fn returns
        ...
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterator

_END = object()


class JobFailed(Exception):
    """Raised from `Job.items()` when the job's function raised: `error` is what it raised."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class Job:
    def __init__(self, fn: Callable):
        self.fn = fn
        self.cancel = threading.Event()
        self.started = threading.Event()
        self.done = threading.Event()
        self._out: queue.Queue = queue.Queue()

    def put(self, item) -> None:
        """Called by the job's function on the worker thread."""
        self._out.put(item)

    def run(self, engine) -> None:
        """Run the job on the calling thread (the one that owns `engine`), unless it was cancelled
        while queued; whatever it raises goes to its requester. Any serial executor may call this:
        EngineWorker does, and so can an app's own engine thread."""
        self.started.set()
        try:
            if not self.cancel.is_set():
                self.fn(engine, self)
        except BaseException as e:  # noqa: BLE001  reported to the requester; the executor goes on
            self.put(JobFailed(e))
        finally:
            self.put(_END)
            self.done.set()

    def items(self, gone: Callable[[], bool] | None = None, poll_s: float = 0.2) -> Iterator:
        """What the job puts, in order, until it ends. At least every `poll_s`, also while items keep
        coming, `gone()` is asked whether the requester left; if so the job is cancelled and
        iteration stops."""
        next_check = time.monotonic() + poll_s
        while True:
            try:
                item = self._out.get(timeout=poll_s)
            except queue.Empty:
                item = None
            if gone is not None and time.monotonic() >= next_check:
                next_check = time.monotonic() + poll_s
                if gone():
                    self.cancel.set()
                    return
            if item is None:
                continue
            if item is _END:
                return
            if isinstance(item, JobFailed):
                raise item
            yield item


class EngineWorker:
    """A single serial executor thread owning `engine`."""

    def __init__(self, engine, name: str = "hearth-engine"):
        self.engine = engine
        self._jobs: queue.Queue = queue.Queue()
        self._closed = False
        self._current: Job | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable) -> Job:
        job = Job(fn)
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine worker is closed")
            self._jobs.put(job)
        return job

    @property
    def queued(self) -> int:
        return self._jobs.qsize()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._current = job
            try:
                job.run(self.engine)
            finally:
                self._current = None

    def close(self, timeout: float | None = 30.0) -> None:
        """Cancel queued jobs, let the running one end (it is cancelled too), stop the thread."""
        with self._lock:
            self._closed = True
            pending = []
            while True:
                try:
                    pending.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            if self._current is not None:
                self._current.cancel.set()
            for job in pending:
                if job is not None:
                    job.cancel.set()
                    self._jobs.put(job)
            self._jobs.put(None)
        self._thread.join(timeout)
