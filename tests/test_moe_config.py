"""MoE metadata read and checked by ModelConfig (engine/models/moe_config.py): a file whose expert count,
top-k or expert tensor shapes disagree is refused naming the file, the key and the tensor; the model
library says the MoE models run."""

from __future__ import annotations

import re
import shutil

import pytest
from gguf_patch import patch_metadata

from hearth.engine import Engine
from hearth.engine.config import ModelConfig
from hearth.engine.errors import UnsupportedModelError
from hearth.engine.gguf import GGUFFile
from hearth.engine.library.model_facts import read_facts
from hearth.engine.library.support import verdict_before_download


def tiny(reference_dir, arch):
    return reference_dir / "tiny-next" / arch / f"tiny-{arch}.gguf"


def refusal(path) -> str:
    with pytest.raises(UnsupportedModelError) as e:
        ModelConfig.from_gguf(GGUFFile.open(path))
    return str(e.value)


@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss"])
def test_top_k_above_the_expert_count_is_refused(tmp_path, reference_dir, arch):
    bad = patch_metadata(tiny(reference_dir, arch), tmp_path / "bad.gguf", f"{arch}.expert_used_count", 9)
    msg = refusal(bad)
    assert msg.startswith("bad.gguf: ")
    assert f"{arch}.expert_used_count is 9, more than {arch}.expert_count (8)" in msg


@pytest.mark.parametrize("key, value", [("expert_count", 0), ("expert_used_count", 0),
                                        ("expert_feed_forward_length", 0), ("expert_count", 1 << 20)])
def test_zero_or_absurd_expert_metadata_names_the_key(tmp_path, reference_dir, key, value):
    bad = patch_metadata(tiny(reference_dir, "qwen3moe"), tmp_path / "bad.gguf", f"qwen3moe.{key}", value)
    assert re.search(rf"bad.gguf: metadata qwen3moe.{key} is {value}; it must be between", refusal(bad))


def test_an_expert_count_the_tensors_do_not_have_names_tensor_and_key(tmp_path, reference_dir):
    bad = patch_metadata(tiny(reference_dir, "qwen3moe"), tmp_path / "bad.gguf", "qwen3moe.expert_count", 4)
    msg = refusal(bad)
    assert "tensor blk.0.ffn_gate_inp.weight has shape [64, 8]" in msg
    assert "4 (qwen3moe.expert_count)" in msg


def test_an_expert_width_the_tensors_do_not_have_names_tensor_and_key(tmp_path, reference_dir):
    bad = patch_metadata(tiny(reference_dir, "gpt-oss"), tmp_path / "bad.gguf",
                         "gpt-oss.expert_feed_forward_length", 32)
    msg = refusal(bad)
    assert "tensor blk.0.ffn_gate_exps.weight has shape [64, 64, 8]" in msg
    assert "32 (gpt-oss.expert_feed_forward_length)" in msg


def test_missing_expert_metadata_is_named(tmp_path, reference_dir):
    data = tiny(reference_dir, "qwen3moe").read_bytes()
    key = b"qwen3moe.expert_used_count"
    assert data.count(key) == 1
    (tmp_path / "bad.gguf").write_bytes(data.replace(key, b"qwen3moe.expert_used_cXunt"))
    assert "bad.gguf: metadata qwen3moe.expert_used_count is missing" in refusal(tmp_path / "bad.gguf")


def test_engine_load_refuses_and_a_good_model_still_loads(tmp_path, reference_dir):
    bad = patch_metadata(tiny(reference_dir, "gpt-oss"), tmp_path / "bad.gguf", "gpt-oss.expert_used_count", 12)
    with pytest.raises(UnsupportedModelError, match="expert_used_count"):
        Engine.load(bad, backend="cpu", n_ctx=32)
    good = Engine.load(tiny(reference_dir, "gpt-oss"), backend="cpu", n_ctx=32)
    try:
        assert good.config.n_expert_used == 2
        assert len(list(good.generate("Hi there", max_tokens=3))) >= 1
    finally:
        good.close()


@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss"])
def test_the_library_says_they_run(tmp_path, reference_dir, arch):
    path = shutil.copy(tiny(reference_dir, arch), tmp_path / f"tiny-{arch}.gguf")
    f = read_facts(path)
    assert (f.runs, f.reason, f.architecture) == (True, "", arch)


@pytest.mark.parametrize("name, arch", [("gpt-oss-20b-MXFP4.gguf", "gpt-oss"),
                                        ("Qwen3-30B-A3B-Q4_K_M.gguf", "qwen3moe"),
                                        ("Qwen3-Coder-30B-A3B-Instruct-Q8_0.gguf", "qwen3moe")])
def test_the_library_says_they_run_before_download(name, arch):
    assert verdict_before_download(name, arch).runs is True


def test_the_gpu_backend_loads_them(reference_dir):
    """qwen3moe and gpt-oss run on the GPU backend (tests/test_gpu_moe_models.py checks their logits)."""
    for arch in ("qwen3moe", "gpt-oss"):
        e = Engine.load(tiny(reference_dir, arch), backend="gpu", n_ctx=32)
        try:
            assert e.backend_info["backend"] == "gpu"
        finally:
            e.close()


def test_a_missing_expert_tensor_is_named(tmp_path, reference_dir):
    data = tiny(reference_dir, "gpt-oss").read_bytes()
    name = b"blk.1.ffn_up_exps.weight"
    assert data.count(name) == 1
    (tmp_path / "bad.gguf").write_bytes(data.replace(name, b"blk.1.ffn_up_exps.weigXt"))
    assert "bad.gguf: tensor blk.1.ffn_up_exps.weight is missing (a gpt-oss layer's experts)" in refusal(
        tmp_path / "bad.gguf")


def test_auto_takes_a_real_gpu_for_them(monkeypatch, reference_dir):
    """With a real GPU adapter found, auto runs a MoE model there (the adapter is mocked as real;
    the backend then opens this machine's)."""
    from hearth.engine import gpu
    monkeypatch.setattr(gpu, "probe", lambda: {"vendor": "NVIDIA", "device": "H200", "is_cpu": False,
                                               "real_gpu": True})
    e = Engine.load(tiny(reference_dir, "gpt-oss"), backend="auto", n_ctx=32)
    try:
        assert e.backend_info["backend"] == "gpu" and "real GPU adapter" in e.backend_info["reason"]
    finally:
        e.close()
