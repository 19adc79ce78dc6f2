"""hearth.engine.hub.downloads: downloads on threads, paused and resumed by key, finished into the registry."""

from __future__ import annotations

import hashlib
import queue
import threading

import pytest

from hearth.engine.errors import HubError
from hearth.engine.hub import HubClient, job_for
from hearth.engine.hub.download import Outcome
from hearth.engine.hub.downloads import DownloadCallbacks, DownloadManager
from hearth.engine.library.registry import ModelRegistry
from hub_fixtures import _no_hf_login, local_hub, split_llama, tiny_models  # noqa: F401
from hub_server import Fault


def _manager(hub, tmp_path):
    reg = ModelRegistry()
    reg.set_models_dir(tmp_path / "models")
    done: queue.Queue = queue.Queue()
    progressed = threading.Event()
    cb = DownloadCallbacks(progress=lambda k, p: p.done > 300_000 and progressed.set(),
                           finished=lambda k, r, e: done.put((k, r, e)))
    client = HubClient(hub.endpoint, token="")
    return DownloadManager(client, reg, cb), client, reg, done, progressed


def _job(client, repo):
    d = client.repo(repo)
    return job_for(d.models[0], repo, d.commit)


def test_pause_resume_and_the_registry(local_hub, tiny_models, tmp_path):
    local_hub.faults["tiny-llama-Q8_0.gguf"] = Fault(delay=0.01)
    mgr, client, reg, done, progressed = _manager(local_hub, tmp_path)
    job = _job(client, "alice/Tiny-Llama-GGUF")
    key = mgr.start(job)
    assert progressed.wait(30) and mgr.running() == [key]
    mgr.pause(key)
    k, result, error = done.get(timeout=30)
    assert (k, result.outcome, error) == (key, Outcome.PAUSED, None)
    assert mgr.running() == [] and mgr.pending() == [job]
    # After a restart: a new manager finds the paused download and resumes it.
    local_hub.faults.clear()
    mgr2, *_, done2, _ = _manager(local_hub, tmp_path)
    [pending] = mgr2.pending()
    mgr2.resume(pending)
    k, result, error = done2.get(timeout=60)
    assert error is None and result.outcome is Outcome.DONE
    assert hashlib.sha256(result.path.read_bytes()).digest() == hashlib.sha256(tiny_models["llama"].read_bytes()).digest()
    [m] = ModelRegistry().models()
    assert (m.path, m.source, m.repo_id, m.facts.architecture) == (result.path, "downloaded", "alice/Tiny-Llama-GGUF", "llama")
    assert mgr2.pending() == []


def test_an_error_is_reported_once_and_the_manager_goes_on(local_hub, tmp_path):
    mgr, client, reg, done, _ = _manager(local_hub, tmp_path)
    key = mgr.start(_job(client, "bob/Tiny-Gated-GGUF"))
    k, result, error = done.get(timeout=30)
    assert k == key and result is None and error.reason == "gated"
    assert done.empty() and mgr.running() == []
    mgr.start(_job(client, "alice/Tiny-Qwen3-GGUF"))
    assert done.get(timeout=60)[1].outcome is Outcome.DONE


def test_cancel_a_paused_download_deletes_its_bytes(local_hub, tmp_path):
    local_hub.faults["tiny-llama-Q8_0.gguf"] = Fault(delay=0.01)
    mgr, client, reg, done, progressed = _manager(local_hub, tmp_path)
    key = mgr.start(_job(client, "alice/Tiny-Llama-GGUF"))
    assert progressed.wait(30)
    mgr.close()
    assert done.get(timeout=30)[1].outcome is Outcome.PAUSED and len(mgr.pending()) == 1
    mgr.cancel(key)
    assert mgr.pending() == [] and not any((tmp_path / "models").rglob("*.part"))


@pytest.mark.parametrize("fault, words", [(Fault(gzip_lie=True), "could not be decoded"),
                                          (Fault(redirect_loop=True), "redirect")])
def test_a_lying_body_or_a_redirect_loop_is_a_hub_error_and_finished_is_called(local_hub, tmp_path, fault, words):
    """httpx raises neither TransportError nor HubError for these: the download thread must still
    end with one finished() call carrying a HubError, never die with a traceback."""
    local_hub.faults["tiny-llama-Q8_0.gguf"] = fault
    mgr, client, reg, done, _ = _manager(local_hub, tmp_path)
    key = mgr.start(_job(client, "alice/Tiny-Llama-GGUF"))
    k, result, error = done.get(timeout=60)
    assert k == key and result is None and isinstance(error, HubError), error
    assert error.reason == "bad_response" and words in str(error) and "tiny-llama-Q8_0.gguf" in str(error)
    assert mgr.running() == []
