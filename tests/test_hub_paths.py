"""Hub listings and sidecars that name paths outside the models folder: a `..` or absolute file
path in a listing, a tampered `.part.json` (its paths, its repo id), a repository id with `..`.
A local Hub on 127.0.0.1 serves the file under whatever path the listing gives (normalized as the
HTTP client sends it), so the old code really downloaded it; nothing may be written outside."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hearth.engine.errors import HubError
from hearth.engine.hub import Download, DownloadJob, HubClient, HubFile, job_for, model_folder, pending_downloads
from hearth.engine.hub.names import path_problem, repo_id_problem
from hearth.engine.hub.partial import sidecar_path
from hub_fixtures import _no_hf_login, tiny_models  # noqa: F401
from hub_server import LocalHub, RepoSpec, file_spec

EVIL = "mallory/Evil-GGUF"


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


class AnyPathHub(LocalHub):
    """Serves a repository's one file under any resolve path (the HTTP client drops `..`)."""

    def __init__(self, repo: RepoSpec):
        super().__init__([repo])
        real = repo.files[0]
        for p in ("escape/evil-Q4_0.gguf", "escape2/evil-Q4_0.gguf"):
            repo.files.append(type(real)(p, real.data))


@pytest.fixture
def sandbox(tmp_path):
    models = tmp_path / "box" / "models"
    models.mkdir(parents=True)
    return tmp_path, models


@pytest.mark.parametrize("evil", ["../../escape/evil-Q4_0.gguf", "ABSOLUTE", "sub/../../../../escape2/evil-Q4_0.gguf"])
def test_a_listing_path_outside_the_folder_is_never_written(tiny_models, sandbox, evil):
    tmp, models = sandbox
    if evil == "ABSOLUTE":
        evil = str(tmp / "abs" / "evil-Q4_0.gguf")
    with AnyPathHub(RepoSpec(EVIL, [file_spec(evil, tiny_models["llama"])])) as hub:
        client = HubClient(hub.endpoint, token="")
        details = client.repo(EVIL)
        assert all(path_problem(f.path) is None for m in details.models for f in m.files)
        # The job as the listing gave it, as a tampered client or an old listing would carry it:
        job = DownloadJob(EVIL, details.commit, "evil-Q4_0.gguf", (HubFile(evil, 10, None),))
        with pytest.raises(HubError, match="outside the models folder|not a usable path") as e:
            Download(client, job, model_folder(models, EVIL), retries=0).run()
        assert e.value.reason == "bad_response"
    assert files_under(tmp) == set(), files_under(tmp)


def test_the_listing_leaves_out_files_with_such_paths(tiny_models, sandbox):
    with LocalHub([RepoSpec(EVIL, [file_spec("../../escape/evil-Q4_0.gguf", tiny_models["llama"]),
                                   file_spec("/abs/evil-Q4_0.gguf", tiny_models["llama"]),
                                   file_spec("good-Q8_0.gguf", tiny_models["llama"])])]) as hub:
        details = HubClient(hub.endpoint, token="").repo(EVIL)
    assert [f.path for m in details.models for f in m.files] == ["good-Q8_0.gguf"]


def _tamper(final: Path, **changes) -> None:
    sc = sidecar_path(final)
    d = json.loads(sc.read_text())
    for k, v in changes.items():
        if k == "file_path":
            d["files"][0]["path"] = v
            d["path"] = v
        else:
            d[k] = v
    sc.write_text(json.dumps(d))


@pytest.mark.parametrize("change", [{"file_path": "../../../escape/evil-Q4_0.gguf"},
                                    {"file_path": "/tmp/evil-Q4_0.gguf"},
                                    {"repo": "../../../escape"},
                                    {"repo": "mallory/.."}])
def test_a_tampered_sidecar_is_not_resumed(tiny_models, sandbox, change):
    tmp, models = sandbox
    with LocalHub([RepoSpec(EVIL, [file_spec("good-Q8_0.gguf", tiny_models["llama"])])]) as hub:
        from hub_server import Fault
        hub.faults["good-Q8_0.gguf"] = Fault(drop_after=1_000_000)
        client = HubClient(hub.endpoint, token="")
        details = client.repo(EVIL)
        job = job_for(details.models[0], EVIL, details.commit)
        folder = model_folder(models, EVIL)
        with pytest.raises(HubError):
            Download(client, job, folder, retries=0).run()
        _tamper(folder / "good-Q8_0.gguf", **change)
        assert pending_downloads(models) == []                # not offered for resuming
        before = files_under(tmp)
        # Resumed anyway (a job read by older code): refused before anything is written.
        d = json.loads(sidecar_path(folder / "good-Q8_0.gguf").read_text())
        forged = DownloadJob(str(d["repo"]), d["commit"], d["name"],
                             tuple(HubFile(f["path"], f["size"], f["sha256"]) for f in d["files"]))
        with pytest.raises(HubError, match="outside the models folder|not a usable"):
            Download(client, forged, model_folder(models, forged.repo_id), retries=0).run()
        assert files_under(tmp) == before


@pytest.mark.parametrize("repo_id", ["../x", "a/..", "a/b/c", "..", "a/.", "", "a//b", "a\\b", "/abs", "a/b\x00"])
def test_repo_ids_that_could_leave_the_folder_are_refused(repo_id):
    assert repo_id_problem(repo_id) is not None


@pytest.mark.parametrize("repo_id", ["alice/Tiny-Llama-GGUF", "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "gpt2", "a_b/c.d"])
def test_ordinary_repo_ids_pass(repo_id):
    assert repo_id_problem(repo_id) is None


@pytest.mark.parametrize("path", ["", ".", "..", "a/../b", "/etc/x.gguf", "a//b.gguf", "a\\..\\b.gguf", "C:x.gguf",
                                  "a/./b.gguf", "x\x00.gguf", "x\n.gguf", "\u202egguf.exe", "a/" * 300 + "b.gguf", "é" * 200 + ".gguf"])
def test_paths_that_could_leave_the_folder_are_refused(path):
    assert path_problem(path) is not None


def test_a_link_inside_the_model_folder_that_leads_out_is_refused(tiny_models, sandbox):
    tmp, models = sandbox
    outside = tmp / "outside"
    outside.mkdir()
    folder = model_folder(models, EVIL)
    folder.mkdir(parents=True)
    os.symlink(outside, folder / "Q8_0")
    with LocalHub([RepoSpec(EVIL, [file_spec("Q8_0/good-Q8_0.gguf", tiny_models["llama"])])]) as hub:
        client = HubClient(hub.endpoint, token="")
        details = client.repo(EVIL)
        with pytest.raises(HubError, match="outside the models folder"):
            Download(client, job_for(details.models[0], EVIL, details.commit), folder, retries=0).run()
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("path", ["\uff0e\uff0e/evil.gguf", "..\u2215evil.gguf", "e\u0301vil.gguf", " ../x.gguf",
                                  ".. /x.gguf", "Q8_0/model-00001-of-00002.gguf"])
def test_look_alikes_of_dots_and_slashes_are_plain_names_that_stay_inside(tmp_path, path):
    from hearth.engine.hub.names import inside
    assert path_problem(path) is None
    real = os.path.realpath(inside(tmp_path / "box", path))
    assert real.startswith(os.path.realpath(tmp_path / "box") + os.sep)


def test_a_location_of_another_scheme_is_a_bad_response_not_a_lost_connection(tiny_models, sandbox):
    tmp, models = sandbox
    with LocalHub([RepoSpec(EVIL, [file_spec("good-Q8_0.gguf", tiny_models["llama"])])]) as hub:
        hub.storage_url_override = "file:///etc"
        client = HubClient(hub.endpoint, token="")
        details = client.repo(EVIL)
        with pytest.raises(HubError, match="will not follow") as e:
            Download(client, job_for(details.models[0], EVIL, details.commit), model_folder(models, EVIL),
                     retries=1).run()
    assert e.value.reason == "bad_response"
