"""hearth.engine.library.support and model_facts: "can Hearth run this", before download from the name and
the Hub's summary, after download from the file; the facts the library shows."""

from __future__ import annotations

import pytest

from hearth.engine.gguf import GGUFFile
from hearth.engine.library.model_facts import read_facts
from hearth.engine.library.support import verdict_before_download, verdict_for_gguf
from hub_fixtures import _no_hf_login, tiny_models, write_gguf  # noqa: F401

gguf = pytest.importorskip("gguf")


@pytest.mark.parametrize("name, arch, runs, reason", [
    ("m-Q4_K_M.gguf", None, None, "architecture not known"),
    ("m-Q4_K_M.gguf", "llama", True, ""),
    ("m-Q8_0.gguf", "mistral", True, ""),         # an alias the engine maps to llama
    ("m-IQ1_S.gguf", "llama", False, "IQ1_S, which Hearth cannot read yet"),
    ("m-IQ2_XS.gguf", "llama", True, ""),
    ("m-IQ3_M.gguf", "qwen3", True, ""),
    ("m-IQ4_XS.gguf", "llama", True, ""),
    ("m-IQ4_NL.gguf", "llama", True, ""),
    ("m-MXFP4.gguf", "qwen3", True, ""),
    ("m-Q4_0.gguf", "falcon", False, "architecture 'falcon' is not supported"),
    ("m.gguf", "llama", None, "no quantization in the file name"),
    ("m-Q9_Z.gguf", "qwen3", None, "no quantization in the file name"),
    ("mmproj-m-f16.gguf", "llama", False, "multimodal projector"),
])
def test_verdict_before_download(name, arch, runs, reason):
    v = verdict_before_download(name, arch)
    assert v.runs is runs
    assert reason in v.reason


def test_every_tiny_model_runs(tiny_models):
    for arch, path in tiny_models.items():
        f = read_facts(path)
        assert (f.runs, f.reason, f.architecture) == (True, "", arch)
        assert f.size == path.stat().st_size and f.context_length and f.n_layer and f.head_dim


def test_tiny_llama_facts(tiny_models):
    f = read_facts(tiny_models["llama"])
    assert (f.n_layer, f.n_head_kv, f.head_dim, f.head_dim_v, f.n_vocab, f.context_length) == (3, 2, 16, 16, 128256, 8192)
    assert f.name == "tiny-random-llama" and f.quant is not None


def test_unsupported_architecture_after_download(tmp_path):
    f = read_facts(write_gguf(tmp_path / "m-Q4_0.gguf", arch="falcon"))
    assert f.runs is False and "architecture 'falcon' is not supported" in f.reason


def test_unsupported_tensor_type_after_download(tmp_path):
    p = write_gguf(tmp_path / "m.gguf", tensor_type=gguf.GGMLQuantizationType.IQ1_S)
    g = GGUFFile.open(p, check_types=False)
    v = verdict_for_gguf(g)
    g.close()
    assert v.runs is False and "IQ1_S" in v.reason


@pytest.mark.parametrize("type_name", ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "MXFP4"])
def test_i_quant_and_mxfp4_files_run(tmp_path, type_name):
    p = write_gguf(tmp_path / "m.gguf", tensor_type=gguf.GGMLQuantizationType[type_name])
    g = GGUFFile.open(p, check_types=False)
    v = verdict_for_gguf(g)
    g.close()
    assert (v.runs, v.reason) == (True, "")


def test_sampling_defaults_from_metadata(tmp_path):
    p = write_gguf(tmp_path / "m.gguf", extra={"general.sampling.temp": 0.6, "general.sampling.top_k": 20,
                                               "general.sampling.top_p": 0.8, "general.sampling.mirostat": 2})
    f = read_facts(p)
    assert f.sampling == {"temperature": pytest.approx(0.6), "top_k": 20, "top_p": pytest.approx(0.8)}
    assert f.sampling_unused == ("general.sampling.mirostat",)


def test_a_broken_file_is_refused_with_the_reason(tmp_path):
    from hearth.engine.library.registry import ModelRegistry
    bad = tmp_path / "models" / "bad-Q4_0.gguf"
    bad.parent.mkdir()
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 5)
    reg = ModelRegistry(tmp_path / "models.json")
    reg.set_models_dir(bad.parent)
    [m] = reg.models()
    assert m.facts.runs is False and "truncated" in m.facts.reason and "bad-Q4_0.gguf" in m.facts.reason
