"""hearth.engine.hub.download against a local Hub on 127.0.0.1 serving the tiny models: progress, dropped
connections resumed (in the run and after a restart), SHA-256 mismatch, pause, cancel, gated
repositories, split models joined and run, a full disk."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path

import pytest

from hearth.engine.errors import HubError
from hearth.engine.hub import Download, HubClient, Outcome, job_for, model_folder, pending_downloads
from hearth.engine.hub.partial import part_path, sidecar_path
from hub_fixtures import _no_hf_login, local_hub, split_llama, tiny_models  # noqa: F401
from hub_server import Fault

LLAMA = "alice/Tiny-Llama-GGUF"
LLAMA_FILE = "tiny-llama-Q8_0.gguf"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _download(hub, repo, models_dir, token="", name=None, **kw):
    client = HubClient(hub.endpoint, token=token)
    details = client.repo(repo)
    model = details.models[0] if name is None else next(m for m in details.models if m.name == name)
    job = job_for(model, repo, details.commit)
    return Download(client, job, model_folder(models_dir, repo), **kw), job


def _storage_gets(hub):
    return [r for r in hub.requests if r["server"] == "storage" and r["method"] == "GET"]


def test_download_with_progress(local_hub, tiny_models, tmp_path):
    events = []
    dl, job = _download(local_hub, LLAMA, tmp_path, on_progress=events.append, chunk_size=256 * 1024,
                        progress_every=0.0)
    result = dl.run()
    assert result.outcome is Outcome.DONE
    assert result.path == tmp_path / "alice" / "Tiny-Llama-GGUF" / LLAMA_FILE
    assert _sha(result.path) == _sha(tiny_models["llama"])
    assert not part_path(result.path).exists() and not sidecar_path(result.path).exists()
    done = [e.done for e in events if e.stage == "download"]
    assert done == sorted(done) and done[-1] == job.size == events[-1].total
    assert any(e.speed > 0 and e.eta is not None for e in events)
    assert not (result.path.parent / "README.md").exists()
    # The token never goes to the storage host; its URL came from the Hub's redirect.
    assert all(not r["auth"] for r in _storage_gets(local_hub))
    assert pending_downloads(tmp_path) == []


def test_a_dropped_connection_is_resumed_with_range(local_hub, tiny_models, tmp_path):
    local_hub.faults[LLAMA_FILE] = Fault(drop_after=3_000_000, drop_times=2)
    result = _download(local_hub, LLAMA, tmp_path, retries=3)[0].run()
    assert result.outcome is Outcome.DONE and _sha(result.path) == _sha(tiny_models["llama"])
    ranges = [r["range"] for r in _storage_gets(local_hub)]
    assert len(ranges) == 3 and ranges[0] == "bytes=0-"
    assert all(int(r[6:-1]) > 0 for r in ranges[1:])


def test_an_interrupted_download_resumes_after_a_restart(local_hub, tiny_models, tmp_path):
    local_hub.faults[LLAMA_FILE] = Fault(drop_after=5_000_000)
    dl, job = _download(local_hub, LLAMA, tmp_path, retries=0)
    with pytest.raises(HubError, match="connection was lost .* kept: resume") as e:
        dl.run()
    assert e.value.reason == "interrupted"
    final = tmp_path / "alice" / "Tiny-Llama-GGUF" / LLAMA_FILE
    kept = part_path(final).stat().st_size
    assert 0 < kept <= 5_000_000 and sidecar_path(final).exists() and not final.exists()
    # A new process: only the folder is known; the sidecar gives the job.
    [(folder, pending)] = pending_downloads(tmp_path)
    assert pending == job and folder == final.parent
    result = Download(HubClient(local_hub.endpoint, token=""), pending, folder).run()
    assert result.outcome is Outcome.DONE and _sha(result.path) == _sha(tiny_models["llama"])
    assert _storage_gets(local_hub)[-1]["range"] == f"bytes={kept}-"


def test_a_server_that_ignores_range_restarts_the_file(local_hub, tiny_models, tmp_path):
    local_hub.faults[LLAMA_FILE] = Fault(drop_after=4_000_000)
    with pytest.raises(HubError):
        _download(local_hub, LLAMA, tmp_path, retries=0)[0].run()
    local_hub.faults[LLAMA_FILE] = Fault(ignore_range=True)
    result = _download(local_hub, LLAMA, tmp_path)[0].run()
    assert result.outcome is Outcome.DONE and _sha(result.path) == _sha(tiny_models["llama"])


def test_a_checksum_mismatch_deletes_the_download(local_hub, tmp_path):
    local_hub.faults[LLAMA_FILE] = Fault(corrupt=True)
    with pytest.raises(HubError, match="does not match the Hub's SHA-256.*deleted") as e:
        _download(local_hub, LLAMA, tmp_path)[0].run()
    assert e.value.reason == "checksum"
    folder = tmp_path / "alice" / "Tiny-Llama-GGUF"
    assert list(folder.iterdir()) == []


def test_a_corrupt_partial_from_before_is_caught_at_the_end(local_hub, tiny_models, tmp_path):
    local_hub.faults[LLAMA_FILE] = Fault(drop_after=4_000_000)
    with pytest.raises(HubError):
        _download(local_hub, LLAMA, tmp_path, retries=0)[0].run()
    part = part_path(tmp_path / "alice" / "Tiny-Llama-GGUF" / LLAMA_FILE)
    with open(part, "r+b") as f:  # a bit flipped on disk while the app was closed
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(HubError) as e:
        _download(local_hub, LLAMA, tmp_path)[0].run()
    assert e.value.reason == "checksum" and not part.exists()


def _run_in_thread(dl):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", dl.run()), daemon=True)
    t.start()
    return t, out


def _start_slow_download(hub, models_dir, after_bytes):
    """A download running on a thread from a server sending 64 KB every 10 ms, once `after_bytes`
    have arrived: (download, job, thread, result holder)."""
    hub.faults[LLAMA_FILE] = Fault(delay=0.01)
    started = threading.Event()
    dl, job = _download(hub, LLAMA, models_dir, chunk_size=64 * 1024, progress_every=0.0,
                        on_progress=lambda p: p.done > after_bytes and started.set())
    t, out = _run_in_thread(dl)
    assert started.wait(30)
    return dl, job, t, out


def test_pause_then_resume(local_hub, tiny_models, tmp_path):
    dl, job, t, out = _start_slow_download(local_hub, tmp_path, 1_000_000)
    dl.pause()
    t.join(30)
    assert out["r"].outcome is Outcome.PAUSED
    part = part_path(dl.final_paths()[0])
    kept = part.stat().st_size
    assert 1_000_000 <= kept < job.size
    local_hub.faults.clear()
    result = Download(HubClient(local_hub.endpoint, token=""), job, dl.folder).run()
    assert result.outcome is Outcome.DONE and _sha(result.path) == _sha(tiny_models["llama"])
    assert _storage_gets(local_hub)[-1]["range"] == f"bytes={kept}-"


def test_cancel_removes_what_was_downloaded(local_hub, tmp_path):
    dl, _, t, out = _start_slow_download(local_hub, tmp_path, 500_000)
    dl.cancel()
    t.join(30)
    assert out["r"].outcome is Outcome.CANCELLED
    assert list(dl.folder.iterdir()) == [] and pending_downloads(tmp_path) == []


GATED = "bob/Tiny-Gated-GGUF"


def test_gated_without_a_token(local_hub, tmp_path):
    dl, _ = _download(local_hub, GATED, tmp_path, token="")
    with pytest.raises(HubError, match="is gated: accept its terms .* token") as e:
        dl.run()
    assert e.value.reason == "gated"
    assert not any(dl.folder.rglob("*")) and _storage_gets(local_hub) == []


def test_gated_with_a_token_that_has_no_access(local_hub, tmp_path):
    with pytest.raises(HubError, match="your Hugging Face token has no access") as e:
        _download(local_hub, GATED, tmp_path, token="hf_other")[0].run()
    assert e.value.reason == "gated"


def test_gated_with_a_token(local_hub, tiny_models, tmp_path):
    result = _download(local_hub, GATED, tmp_path, token="hf_good")[0].run()
    assert result.outcome is Outcome.DONE and _sha(result.path) == _sha(tiny_models["gemma3"])
    resolves = [r for r in local_hub.requests if "/resolve/" in r["path"]]
    assert resolves and all(r["auth"] for r in resolves)
    assert all(not r["auth"] for r in _storage_gets(local_hub))


def test_gated_with_the_stored_login(local_hub, tiny_models, tmp_path):
    token_file = tmp_path / "hf_home" / "token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text("hf_good")
    result = _download(local_hub, GATED, tmp_path, token=None)[0].run()
    assert result.outcome is Outcome.DONE


def test_a_file_changed_on_the_hub_is_refused(local_hub, tmp_path):
    dl, _ = _download(local_hub, LLAMA, tmp_path)
    spec = local_hub.repos[LLAMA].files[0]
    spec.data = spec.data[:-64]
    with pytest.raises(HubError, match="the Hub now says") as e:
        dl.run()
    assert e.value.reason == "changed"


def test_a_split_model_is_joined_and_runs(local_hub, tiny_models, tmp_path):
    from hearth.engine import Engine
    from hearth.engine.sampling import Sampling
    events = []
    dl, job = _download(local_hub, "alice/Tiny-Llama-Split-GGUF", tmp_path, on_progress=events.append)
    assert len(job.files) == 3
    result = dl.run()
    assert result.outcome is Outcome.DONE
    assert result.path == tmp_path / "alice" / "Tiny-Llama-Split-GGUF" / "Q8_0" / "tiny-llama-Q8_0.gguf"
    assert _sha(result.path) == _sha(tiny_models["llama"])
    assert sorted(p.name for p in result.path.parent.iterdir()) == ["tiny-llama-Q8_0.gguf"]
    assert events[-1].stage == "join"
    eng = Engine.load(result.path, backend="cpu", n_ctx=128)
    try:
        out = list(eng.generate("Hello", max_tokens=4, sampling=Sampling.greedy()))
    finally:
        eng.close()
    assert out[-1].final and out[-1].stats.generated_tokens >= 1


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 16 MB: room for the 12.7 MB model but not much more."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small_disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
                       capture_output=True, timeout=20)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], timeout=20, check=False)


def test_not_enough_space_is_said_before_starting(local_hub, small_disk):
    (small_disk / "filler").write_bytes(b"\0" * (8 << 20))
    with pytest.raises(HubError, match="needs 0.01 GB more .* GB are free") as e:
        _download(local_hub, LLAMA, small_disk)[0].run()
    assert e.value.reason == "disk_full" and not any(small_disk.rglob("*.part"))


def test_disk_full_midway_keeps_the_part_and_resumes(local_hub, tiny_models, small_disk):
    filler = small_disk / "filler"

    def fill(p):  # something else takes the disk while the download runs
        if p.done > 2_000_000 and not filler.exists():
            with open(filler, "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                except OSError:
                    pass

    dl, job = _download(local_hub, LLAMA, small_disk, on_progress=fill, progress_every=0.0,
                        chunk_size=256 * 1024)
    with pytest.raises(HubError, match="disk is full .* kept: free some space and resume") as e:
        dl.run()
    assert e.value.reason == "disk_full"
    assert part_path(dl.final_paths()[0]).stat().st_size > 2_000_000
    filler.unlink()
    result = Download(HubClient(local_hub.endpoint, token=""), job, dl.folder).run()
    assert result.outcome is Outcome.DONE and _sha(result.path) == _sha(tiny_models["llama"])
