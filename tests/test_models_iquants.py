"""Whole models in i-quant and MXFP4 types against llama.cpp, at every position: the shipped tiny
llama with its layer matrices replaced by llama.cpp's IQ4_NL, IQ4_XS, IQ3_S, IQ2_S (mix_a) and
IQ3_XXS, IQ2_XS, IQ2_XXS (mix_b) blocks and gguf-py's MXFP4 (tests/iquant_models.py), and llama.cpp's
logits on those files (tests/data/iquants/make.py). Tolerance from ../shared/reference/README.md's
tiny models: the logits at llama.cpp's 64 largest ids within 0.75 at every position, the same top-1
where llama.cpp's top-2 gap exceeds 0.5; on the CPU with 8-bit x (llama.cpp's arithmetic) in one-token
passes and batches, on the GPU (lavapipe in CI) with every matrix in its blocks, float and int8 x.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from iquant_models import DATA, MODELS, build

PROMPTS = ["chat", "english"]
STEPS = 12        # GPU one-token passes (llama.cpp's top-2 gap > 0.5 at 5 / 9 of them in mix_a / mix_b)


@pytest.fixture(scope="module")
def tiny_llama(reference_dir):
    d = reference_dir / "tiny" / "llama"
    return d / "tiny-llama.gguf", json.loads((d / "manifest.json").read_text())


@pytest.fixture(scope="module", params=MODELS)
def model(request, tiny_llama, tmp_path_factory):
    path = build(request.param, tiny_llama[0], tmp_path_factory.mktemp("iq"))
    return request.param, path, tiny_llama[1]


def prompt_ids(manifest, name):
    return next(p for p in manifest["prompts"] if p["name"] == name)["ids"]


def check_against_llama_cpp(got: np.ndarray, model: str, prompt: str) -> None:
    """`got`: logits at the prompt's first got.shape[0] positions (every one, unless a test says why)."""
    z = np.load(DATA / f"top64_{model}_{prompt}.npz")
    n = got.shape[0]
    ref = {"ids": z["ids"][:n], "logits": z["logits"][:n]}
    at = np.take_along_axis(got, ref["ids"].astype(np.int64), axis=1)
    assert np.abs(at - ref["logits"]).max() <= 0.75
    gap = ref["logits"][:, 0] - ref["logits"][:, 1]
    sure = gap > 0.5
    assert sure.sum() >= 5
    assert (got.argmax(-1) == ref["ids"][:, 0])[sure].all()


def test_the_models_hold_the_types(model):
    name, path, _ = model
    g = GGUFFile.open(path)
    types = {t.type.name for t in g.tensors.values()}
    g.close()
    want = {"mix_a": {"IQ4_NL", "IQ4_XS", "IQ3_S", "IQ2_S", "MXFP4"},
            "mix_b": {"IQ4_NL", "IQ3_XXS", "IQ2_XS", "IQ2_XXS", "MXFP4"}}[name]
    assert want <= types


@pytest.mark.parametrize("prompt", PROMPTS)
def test_cpu_every_position_batch_and_one_token_at_a_time(model, prompt):
    name, path, manifest = model
    ids = prompt_ids(manifest, prompt)
    g = GGUFFile.open(path)
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)
    be.kv.clear()
    batch = be.forward(ids, 0, all_logits=True)
    assert batch.shape[0] == len(ids)
    check_against_llama_cpp(batch, name, prompt)
    be.kv.clear()
    steps = np.stack([be.forward([t], i) for i, t in enumerate(ids)]).reshape(len(ids), -1)
    check_against_llama_cpp(steps, name, prompt)


def test_cpu_compiled_layers_give_the_per_operation_bits(model):
    """One-token passes of these models run as compiled layers (engine/cpu/decode_layer.py), with the
    same bits as the per-operation path (the same block code)."""
    _, path, manifest = model
    ids = prompt_ids(manifest, "english")[:8]
    g = GGUFFile.open(path)
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)
    assert be.model.compiled_reason is None
    outs = []
    for on in (True, False):
        be.model.compiled_on = on
        be.kv.clear()
        outs.append(np.stack([np.asarray(be.forward([t], i)).reshape(-1) for i, t in enumerate(ids)]))
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.gpu
@pytest.mark.parametrize("x_path", ["f32", "int8"])
def test_gpu_every_position_batch_and_one_token_at_a_time(model, monkeypatch, x_path):
    """Every matrix in its file's blocks (no F16 copies). f32: the float products (lavapipe's default);
    int8: every decode matvec on int8 x (ops.INT8_K_MIN lowered to the tiny width; the down products
    read x quantized once a layer by the gate/up product) and every prefill product of a type
    matmul8 reads on int8 X (mm8), as a real GPU runs them. One token at a time over the first STEPS
    positions only: a step costs lavapipe 0.1-0.4 s (the 128,256-row head), and the steps' kernels
    are the same at every position."""
    from hearth.engine.gpu import GpuBackend, ops, probe
    if probe() is None:
        pytest.skip("wgpu finds no adapter")
    name, path, manifest = model
    ids = prompt_ids(manifest, "english")
    if x_path == "int8":
        monkeypatch.setattr(ops, "INT8_K_MIN", 32)
        monkeypatch.setattr(ops, "INT8_PRE_K_MIN", 256)
    g = GGUFFile.open(path)
    be = GpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=x_path == "int8", mm8=x_path == "int8")
    try:
        assert be.weights.fallbacks == []
        if x_path == "int8":
            if not be.int8:
                pytest.skip("the adapter has no 4-way int8 dot products")
            assert any(op["label"].endswith(".ffn") and op["buffers"][-1] is be.ffq for op in be.decode_plan.ops)
        be.kv.clear()
        batch = np.asarray(be.forward(ids, 0, all_logits=True))
        assert batch.shape[0] == len(ids)
        check_against_llama_cpp(batch, name, "english")
        be.kv.clear()
        steps = np.stack([np.asarray(be.forward([t], i)).reshape(-1) for i, t in enumerate(ids[:STEPS])])
        check_against_llama_cpp(steps, name, "english")
    finally:
        be.close()
