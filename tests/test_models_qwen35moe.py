"""qwen35moe on a tiny model made from the shared tiny qwen35 (tests/tiny_qwen35moe.py: its layers
with every FFN 4 experts, top 2 renormalised, plus a gated shared expert) against llama.cpp's logits
for that exact file (tests/data/tiny_qwen35moe_ref.npz, with its sha256), at every position, as one
batch and one token at a time; tolerance as the tiny-next README's. The float path against
llama.cpp's run of the maker's all-F32 copy: 2.5e-5 at its 512 largest logits, held to 1e-3 (a
router without renormalisation lands ~8 away on qwen3moe)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from tests.tiny_next import check_against_top64
from tests.tiny_qwen35moe import N_EXPERT, N_USED, make

REF = Path(__file__).parent / "data" / "tiny_qwen35moe_ref.npz"


@pytest.fixture(scope="module")
def tiny(reference_dir, tmp_path_factory):
    path = make(reference_dir / "tiny-next" / "qwen35" / "tiny-qwen35.gguf", tmp_path_factory.mktemp("moe") / "m.gguf")
    ref = np.load(REF)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(ref["sha256"]), "the maker no longer makes that file"
    g = GGUFFile.open(path)
    return ref, CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)


def top64(ref, name):
    return {"ids": ref[f"{name}_top_ids"], "logits": ref[f"{name}_top_logits"]}


def test_experts_from_metadata(tiny):
    _, be = tiny
    moe = be.cfg.hybrid.moe
    assert (moe.n_expert, moe.n_used) == (N_EXPERT, N_USED) and be.cfg.recurrent


@pytest.mark.parametrize("name", ["chat", "english"])
def test_every_position_batch_and_one_token(tiny, name):
    ref, be = tiny
    ids = ref[f"{name}_ids"].tolist()
    be.kv.clear()
    check_against_top64(be.forward(ids, 0, all_logits=True), top64(ref, name))
    be.kv.clear()
    check_against_top64(np.stack([be.forward([t], i) for i, t in enumerate(ids)]), top64(ref, name))


@pytest.mark.parametrize("name", ["chat", "english"])
def test_last_position_matches_float_path(tiny, name):
    ref, be = tiny
    be.kv.clear()
    with be.float_activations():
        got = be.forward(ref[f"{name}_ids"].tolist(), 0)
    assert np.abs(got[ref[f"{name}_f32_ids"]] - ref[f"{name}_f32_logits"]).max() <= 1e-3


def test_routing_renormalises_the_top_k(tiny):
    _, be = tiny
    ffn = be.model.blocks[0].ffn
    h = np.random.default_rng(0).standard_normal((5, be.cfg.n_embd)).astype(np.float32)
    chosen, w = ffn.route(h, False, None)
    assert chosen.shape == (5, N_USED) and np.allclose(w.sum(1), 1.0, atol=1e-6)
    assert (np.diff(w, axis=1) <= 0).all()   # the best expert first
