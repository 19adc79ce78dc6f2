"""hearth.engine.hub.client against a local Hub on 127.0.0.1: search, a repository's models, errors, tokens."""

from __future__ import annotations

import hashlib
import socket

import pytest

from hearth.engine.errors import HubError
from hearth.engine.hub import HubClient, stored_token
from hub_fixtures import _no_hf_login, local_hub, split_llama, tiny_models  # noqa: F401


def test_search_lists_gguf_repositories_by_downloads(local_hub):
    found = HubClient(local_hub.endpoint, token="").search("tiny", limit=10)
    assert [r.repo_id for r in found] == ["alice/Tiny-Llama-GGUF", "alice/Tiny-Qwen3-GGUF", "bob/Tiny-Gated-GGUF",
                                          "bob/Phi-Tiny-GGUF", "alice/Tiny-Llama-Split-GGUF"]
    first = found[0]
    assert (first.author, first.downloads, first.likes, first.architecture, first.context_length) == (
        "alice", 500, 12, "llama", 8192)
    assert first.updated is not None and first.updated.year == 2025
    assert found[2].gated is True and found[0].gated is False
    pages = [r for r in local_hub.requests if r["path"] == "/api/models"]
    assert len(pages) == 2 and "filter=gguf" in pages[0]["query"]  # 3 per page: the Link was followed


def test_search_stops_at_the_limit(local_hub):
    found = HubClient(local_hub.endpoint, token="").search("", limit=2)
    assert len(found) == 2
    assert len([r for r in local_hub.requests if r["path"] == "/api/models"]) == 1


def test_search_term_filters(local_hub):
    assert [r.repo_id for r in HubClient(local_hub.endpoint, token="").search("qwen3")] == ["alice/Tiny-Qwen3-GGUF"]
    assert HubClient(local_hub.endpoint, token="").search("safetensors") == []


def test_repo_lists_models_with_size_sha_and_verdict(local_hub, tiny_models, split_llama):
    d = HubClient(local_hub.endpoint, token="").repo("alice/Tiny-Qwen3-GGUF")
    assert len(d.commit) == 40
    by_name = {m.name: m for m in d.models}
    assert set(by_name) == {"tiny-qwen3-Q4_K_M.gguf", "tiny-qwen3-IQ1_S.gguf"}
    m = by_name["tiny-qwen3-Q4_K_M.gguf"]
    data = tiny_models["qwen3"].read_bytes()
    assert m.size == len(data) and m.files[0].sha256 == hashlib.sha256(data).hexdigest()
    assert m.verdict.runs is True and m.group.quant == "Q4_K_M"
    assert by_name["tiny-qwen3-IQ1_S.gguf"].verdict.runs is False

    split = HubClient(local_hub.endpoint, token="").repo("alice/Tiny-Llama-Split-GGUF")
    [sm] = split.models
    assert sm.name == "tiny-llama-Q8_0.gguf" and len(sm.files) == 3 and sm.group.complete
    assert sm.size == sum(p.stat().st_size for p in split_llama)

    phi = HubClient(local_hub.endpoint, token="").repo("bob/Phi-Tiny-GGUF")
    assert "architecture 'falcon' is not supported" in phi.models[0].verdict.reason


def test_readme_is_not_a_model(local_hub):
    d = HubClient(local_hub.endpoint, token="").repo("alice/Tiny-Llama-GGUF")
    assert [m.name for m in d.models] == ["tiny-llama-Q8_0.gguf"]


def test_unknown_repository(local_hub):
    with pytest.raises(HubError, match="no such repository") as e:
        HubClient(local_hub.endpoint, token="").repo("nobody/nothing")
    assert e.value.reason == "not_found"


def test_unreachable_hub_is_a_network_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(HubError, match="cannot reach the Hugging Face Hub \\(no network\\?\\)") as e:
        HubClient(f"http://127.0.0.1:{port}", token="").repo("a/b")
    assert e.value.reason == "network"


def test_token_comes_from_the_stored_login(tmp_path):
    assert stored_token() is None and HubClient("http://127.0.0.1:9", token=None).token is None
    token_file = tmp_path / "hf_home" / "token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text("hf_good")
    assert HubClient("http://127.0.0.1:9").token == "hf_good"
    assert HubClient("http://127.0.0.1:9", token="hf_mine").token == "hf_mine"
    assert HubClient("http://127.0.0.1:9", token="").token is None


def test_remote_facts_read_only_the_header(local_hub, tiny_models):
    from hearth.engine.hub.remote_header import remote_facts
    from hearth.engine.library.model_facts import read_facts
    c = HubClient(local_hub.endpoint, token="")
    d = c.repo("alice/Tiny-Llama-GGUF")
    [m] = d.models
    facts = remote_facts(c, "alice/Tiny-Llama-GGUF", d.commit, m.files[0])
    local = read_facts(tiny_models["llama"])
    assert facts.quant == "Q8_0"  # the file has no general.file_type: the name's label
    for field in ("architecture", "context_length", "n_layer", "n_head_kv", "head_dim", "n_vocab", "runs"):
        assert getattr(facts, field) == getattr(local, field), field
    assert facts.size == local.size
    ranges = [r["range"] for r in local_hub.requests if r["server"] == "storage"]
    # The 7.8 MB header (a 128k-token vocabulary) took a 1 MB read, then up to 4 MB, then 16 MB.
    assert ranges == ["bytes=0-1048575", "bytes=1048576-4194303", "bytes=4194304-12733631"]


def test_remote_facts_refuse_a_tensor_type_before_download(local_hub, tmp_path):
    from hub_fixtures import write_gguf
    from hub_server import RepoSpec, file_spec
    import gguf
    from hearth.engine.hub.remote_header import remote_facts
    p = write_gguf(tmp_path / "odd-Q4_0.gguf", tensor_type=gguf.GGMLQuantizationType.IQ1_S)
    local_hub.repos["eve/Odd-GGUF"] = RepoSpec("eve/Odd-GGUF", [file_spec("odd-Q4_0.gguf", p)],
                                                gguf={"architecture": "llama"})
    c = HubClient(local_hub.endpoint, token="")
    d = c.repo("eve/Odd-GGUF")
    assert d.models[0].verdict.runs is True  # the name says Q4_0 ...
    facts = remote_facts(c, "eve/Odd-GGUF", d.commit, d.models[0].files[0])
    assert facts.runs is False and "IQ1_S" in facts.reason  # ... the header says otherwise


def test_remote_facts_of_a_split_model(local_hub, tiny_models):
    from hearth.engine.hub.remote_header import remote_facts
    c = HubClient(local_hub.endpoint, token="")
    d = c.repo("alice/Tiny-Llama-Split-GGUF")
    facts = remote_facts(c, "alice/Tiny-Llama-Split-GGUF", d.commit, d.models[0].files[0])
    assert facts.runs is True and facts.architecture == "llama" and facts.n_layer == 3
