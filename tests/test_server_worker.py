"""engine/server/worker.py: one thread runs every job, in order; cancelled jobs stop or never start;
a failing job is reported to its requester and the worker goes on. The "engine" handed to jobs is
a plain object: the worker never looks at it."""

from __future__ import annotations

import threading
import time

import pytest

from hearth.engine.server.worker import EngineWorker, Job, JobFailed


@pytest.fixture
def worker():
    w = EngineWorker(engine="the engine")
    yield w
    w.close()


def test_jobs_run_one_at_a_time_in_order_on_one_thread(worker):
    seen, running, overlap = [], [0], []

    def job_fn(i):
        def fn(engine, job):
            running[0] += 1
            overlap.append(running[0])
            seen.append((i, threading.current_thread().name, engine))
            time.sleep(0.02)
            job.put(i)
            running[0] -= 1
        return fn

    jobs = [worker.submit(job_fn(i)) for i in range(6)]
    assert [list(j.items()) for j in jobs] == [[i] for i in range(6)]
    assert [s[0] for s in seen] == list(range(6)) and max(overlap) == 1
    assert {s[1] for s in seen} == {"hearth-engine"} and {s[2] for s in seen} == {"the engine"}


def test_a_job_cancelled_while_queued_never_runs(worker):
    gate = threading.Event()
    ran = []
    first = worker.submit(lambda e, j: (gate.wait(5), ran.append(1)))
    second = worker.submit(lambda e, j: ran.append(2))
    second.cancel.set()
    gate.set()
    list(first.items())
    assert list(second.items()) == [] and second.done.wait(5)
    assert ran == [1]


def test_gone_requester_cancels_the_running_job(worker):
    steps = []

    def fn(engine, job):
        for i in range(200):
            if job.cancel.is_set():
                return
            steps.append(i)
            time.sleep(0.01)

    job = worker.submit(fn)
    t = time.perf_counter()
    assert list(job.items(gone=lambda: time.perf_counter() - t > 0.2, poll_s=0.05)) == []
    assert job.cancel.is_set() and job.done.wait(5) and len(steps) < 100


def test_a_failing_job_is_reported_and_the_worker_goes_on(worker):
    bad = worker.submit(lambda e, j: (j.put("partial"), 1 / 0))
    items = bad.items()
    assert next(items) == "partial"
    with pytest.raises(JobFailed) as e:
        next(items)
    assert isinstance(e.value.error, ZeroDivisionError)
    assert list(worker.submit(lambda e, j: j.put("ok")).items()) == ["ok"]


def test_close_cancels_what_is_queued_and_refuses_new_jobs():
    w = EngineWorker(engine=None)
    started = threading.Event()

    def long(engine, job):
        started.set()
        while not job.cancel.is_set():
            time.sleep(0.01)

    running = w.submit(long)
    queued = w.submit(lambda e, j: j.put("should not run"))
    started.wait(5)
    w.close(timeout=5)
    assert running.cancel.is_set() and queued.cancel.is_set() and list(queued.items()) == []
    with pytest.raises(RuntimeError, match="closed"):
        w.submit(lambda e, j: None)


def test_gone_is_asked_even_while_items_keep_coming(worker):
    """A non-streamed reply: tokens arrive faster than the poll interval and nothing is written to
    the client, so the only sign it left is gone()."""
    def fn(engine, job):
        for i in range(1000):
            if job.cancel.is_set():
                return
            job.put(i)
            time.sleep(0.005)

    job = worker.submit(fn)
    t = time.perf_counter()
    got = list(job.items(gone=lambda: time.perf_counter() - t > 0.3, poll_s=0.05))
    assert job.cancel.is_set() and 0 < len(got) < 500


def test_any_thread_that_owns_the_engine_can_run_jobs():
    """What an app with its own engine thread does instead of EngineWorker."""
    job = Job(lambda engine, j: j.put(("ran on", threading.current_thread().name, engine)))
    t = threading.Thread(target=job.run, args=("app engine",), name="app-worker")
    t.start()
    assert list(job.items()) == [("ran on", "app-worker", "app engine")] and job.done.is_set()
    t.join()
    failing = Job(lambda engine, j: {}["missing"])
    failing.run(None)
    with pytest.raises(JobFailed):
        list(failing.items())
