"""Qwen2.5-Coder-0.5B-Instruct (Q4_K_M label: Q5_0 matrices, Q8_0 output; joined from its PyPI part
packages) against llama.cpp: tests/data/qwen_coder/, made by bench/qwen_reference.py.

Tolerances are SmolLM2's (../shared/reference/README.md), the same kind of comparison: against
llama.cpp's own logits (8-bit activations, f16 K/V) the same top-1 where the top-2 gap is >= 1.0
and a mean |difference| <= 0.3 after removing the mean difference, at every position (here over
the 64 ids llama.cpp ranked highest). Against llama.cpp's all-F32 copy with F32 K/V, Hearth's float
path agrees to 0.0003-0.0012 on average and 0.007 at most (the float16 storage of the reference
rounds by up to 0.008 below 32, 0.016 above), so the bound there is a mean of 0.01 and a max of 0.05,
sharper than Gemma 3's 0.05 mean. Measured against llama.cpp's own logits: 0.04-0.06 mean, at most
0.14 per position over the top 64.

Cost: the three short prompts (13-33 tokens) run at every position in float32; the 500-token tool
prompt only its last position, on the default 8-bit path (~5 s on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from hearth.engine.tokenizer import Tokenizer
from model_paths import QWEN_MISSING, qwen_coder_model_path

DATA = Path(__file__).parent / "data" / "qwen_coder"
SHORT = ["code", "unicode", "chat"]
MEAN_TOL, F32_TOL, F32_MAX, GAP = 0.3, 0.01, 0.05, 1.0


@pytest.fixture(scope="module")
def qwen():
    path = qwen_coder_model_path()
    if path is None:
        pytest.skip(QWEN_MISSING)
    g = GGUFFile.open(path)
    ref = {p["name"]: p for p in json.loads((DATA / "reference.json").read_text(encoding="utf-8"))["prompts"]}
    return CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=512, int8=True), ref, g


def logits(name):
    d = np.load(DATA / f"logits_{name}.npz")
    return {k: d[k].astype(np.float64) if d[k].dtype == np.float16 else d[k] for k in d.files}


def centered_mean(a, b):
    d = np.asarray(a, np.float64) - b
    return np.abs(d - d.mean(axis=-1, keepdims=True)).mean(axis=-1)


def test_config(qwen):
    c = qwen[0].cfg
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim) == ("qwen2", 24, 896, 14, 2, 64)
    assert c.rope_base == 1e6 and c.n_vocab == 151936


@pytest.mark.parametrize("name", SHORT + ["tool"])
def test_token_ids(qwen, name):
    """Code, non-ASCII text, a chat turn and a prompt with tools, with special tokens parsed."""
    _, ref, g = qwen
    p = ref[name]
    assert Tokenizer.from_gguf(g).encode(p["text"], add_special=True, parse_special=True) == p["ids"]


@pytest.mark.parametrize("name", SHORT + ["tool"])
def test_last_logits_with_8bit_x(qwen, name):
    be, ref, _ = qwen
    assert be.int8
    be.kv.clear()
    got = be.forward(ref[name]["ids"], 0)
    want = logits(name)["last"]
    assert centered_mean(got, want) <= MEAN_TOL
    s = np.sort(want)
    if s[-1] - s[-2] >= GAP:
        assert got.argmax() == want.argmax()


@pytest.mark.parametrize("name", SHORT)
def test_every_position_in_float(qwen, name):
    be, ref, _ = qwen
    d = logits(name)
    be.kv.clear()
    with be.float_activations():
        got = be.forward(ref[name]["ids"], 0, all_logits=True)      # [n_pos, vocab]
    at_top = np.take_along_axis(got.astype(np.float64), d["top_ids"], axis=1)
    assert centered_mean(at_top, d["top_logits"]).max() <= MEAN_TOL
    sure = d["top_logits"][:, 0] - d["top_logits"][:, 1] >= GAP
    assert (got.argmax(axis=1)[sure] == d["top_ids"][sure, 0]).all()
    assert centered_mean(got[-1], d["f32path_last"]) <= F32_TOL
    assert np.abs(got[-1] - d["f32path_last"]).max() <= F32_MAX
    assert got[-1].argmax() == d["f32path_last"].argmax()


@pytest.mark.parametrize("name", ["code", "chat"])
def test_greedy_continuation(qwen, name):
    be, ref, _ = qwen
    p = ref[name]
    be.kv.clear()
    ids = list(p["ids"])
    out = be.forward(ids, 0)
    for i, (want, step) in enumerate(zip(p["greedy"]["ids"][:8], p["greedy"]["steps"])):
        tok = int(out.argmax())
        assert tok == want, f"greedy step {i}"
        if step["margin_to_top2"] < GAP:
            break
        out = be.forward([tok], len(ids))
        ids.append(tok)
