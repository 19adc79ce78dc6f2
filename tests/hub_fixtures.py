"""Fixtures for the model library's tests: the tiny reference models, a local Hub serving them,
GGUF files written with gguf-py, and a Hugging Face home with no login."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hub_server import LocalHub, RepoSpec, file_spec

TINY = ("llama", "qwen2", "qwen3", "gemma3")


@pytest.fixture(scope="session")
def tiny_models(reference_dir) -> dict[str, Path]:
    return {a: reference_dir / "tiny" / a / f"tiny-{a}.gguf" for a in TINY}


@pytest.fixture(autouse=True)
def _no_hf_login(tmp_path, monkeypatch):
    """huggingface_hub finds no token of the user's: its home is empty and HF_TOKEN unset."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    import huggingface_hub.constants as c
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(c, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf_home" / "stored_tokens"))


def write_gguf(path: Path, arch: str = "llama", extra: dict | None = None, tensor_type=None,
               name: str | None = None) -> Path:
    """A small GGUF written by gguf-py (the test oracle): one layer, F32 weights, or one tensor of
    `tensor_type` (a gguf.GGMLQuantizationType) stored as raw bytes."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), arch)
    if name:
        w.add_name(name)
    for k, v in {f"{arch}.embedding_length": 8, f"{arch}.block_count": 2, f"{arch}.context_length": 2048,
                 f"{arch}.attention.head_count": 2, f"{arch}.attention.head_count_kv": 1,
                 f"{arch}.feed_forward_length": 16}.items():
        w.add_uint32(k, v)
    for k, v in (extra or {}).items():
        if isinstance(v, float):
            w.add_float32(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_int32(k, v)
    w.add_tensor("token_embd.weight", np.zeros((16, 8), np.float32))
    if tensor_type is not None:
        size = gguf.GGML_QUANT_SIZES[tensor_type]
        raw = np.zeros((1, 256 // size[0] * size[1]), np.uint8)
        w.add_tensor("blk.0.attn_q.weight", raw, raw_dtype=tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tiny_repos(tiny_models, split_parts: list[Path] | None = None) -> list[RepoSpec]:
    llama = tiny_models["llama"]
    repos = [
        RepoSpec("alice/Tiny-Llama-GGUF", [file_spec("tiny-llama-Q8_0.gguf", llama),
                                            file_spec("README.md", llama.parent / "manifest.json", lfs=False)],
                 downloads=500, likes=12, gguf={"architecture": "llama", "context_length": 8192, "total": 3_000_000}),
        RepoSpec("alice/Tiny-Qwen3-GGUF", [file_spec("tiny-qwen3-Q4_K_M.gguf", tiny_models["qwen3"]),
                                            file_spec("tiny-qwen3-IQ1_S.gguf", tiny_models["qwen3"])],
                 downloads=300, gguf={"architecture": "qwen3", "context_length": 4096}),
        RepoSpec("bob/Tiny-Gated-GGUF", [file_spec("tiny-gemma3-Q4_0.gguf", tiny_models["gemma3"])],
                 gated="manual", allowed_tokens={"hf_good"}, downloads=200),
        RepoSpec("bob/Phi-Tiny-GGUF", [file_spec("phi-tiny-Q4_0.gguf", llama)], downloads=100,
                 gguf={"architecture": "falcon"}),
        RepoSpec("carol/safetensors-only", [file_spec("model.safetensors", llama)], tags=["safetensors"]),
    ]
    if split_parts:
        repos.append(RepoSpec("alice/Tiny-Llama-Split-GGUF",
                              [file_spec(f"Q8_0/{p.name}", p) for p in split_parts], downloads=50,
                              gguf={"architecture": "llama"}))
    return repos


@pytest.fixture(scope="session")
def split_llama(tiny_models, tmp_path_factory) -> list[Path]:
    from hearth.engine.library.split_gguf import split_model
    folder = tmp_path_factory.mktemp("split")
    src = folder / "tiny-llama-Q8_0.gguf"
    src.write_bytes(tiny_models["llama"].read_bytes())
    parts = split_model(src, 3, folder)
    src.unlink()
    return parts


@pytest.fixture
def local_hub(tiny_models, split_llama):
    with LocalHub(tiny_repos(tiny_models, split_llama), known_tokens={"hf_good", "hf_other"}) as hub:
        yield hub
