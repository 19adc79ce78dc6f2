"""qwen3moe and gpt-oss on their tiny random-weight GGUFs against llama.cpp, at every position,
as one batch and one token at a time.

Tolerance from ../shared/reference/README.md (tiny-next): token ids exact; at every position the
logits at llama.cpp's 64 largest ids within mean 0.15 and max 1.5, the same top-1 where llama.cpp's
top-2 gap is at least 0.5; the last position within ~0.05 of llama.cpp's float path (an all-F32
copy, F32 K/V) for a float32 engine; greedy runs up to the first gap under 0.5. The usual mistakes
land far outside (no top-k renormalisation 8.6, wrong expert count 10-16, no sliding window 24.5,
no YaRN 19.7, no sinks 19.1).
Measured here (8-bit x, the default): qwen3moe mean 0.04-0.05, max 0.14-0.16; gpt-oss mean
0.05-0.08, max 0.21-0.27, batch and one token at a time alike; the float path 1e-5 from llama.cpp's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from tests.tiny_next import (
    check_batch_and_one_token_agree_on_the_float_path, check_every_position_as_one_batch,
    check_every_position_one_token_at_a_time, check_last_position_matches_float_path, check_token_ids, prompt_of,
)

ARCHS = ["qwen3moe", "gpt-oss"]
PROMPTS = ["chat", "english"]


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request, reference_dir):
    d = reference_dir / "tiny-next" / request.param
    manifest = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / manifest["file"])
    return d, manifest, g, CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)


def test_hyperparameters_from_metadata(tiny):
    _, m, _, be = tiny
    h, c = m["hparams"], be.cfg
    assert c.arch == m["arch"]
    assert (c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_vocab) == \
        (h["n_embd"], h["n_layer"], h["n_head"], h["n_head_kv"], h["head_dim"], h["n_vocab"])
    assert (c.n_expert, c.n_expert_used, c.n_ff_exp) == (h["n_expert"], h["n_expert_used"], h["n_ff_exp"])
    assert c.rope_base == h["rope_freq_base"] and c.rope_neox
    if c.arch == "gpt-oss":
        assert c.sliding_window == h["sliding_window"] and c.swa_layers == (True, False)
        assert (c.rope_scaling.kind, c.rope_scaling.factor, c.rope_scaling.orig_ctx) == ("yarn", 32.0, 4096)
        assert c.attn_sinks and c.expert_gating == "softmax_weight" and not c.expert_weights_norm
    else:
        assert c.sliding_window == 0 and c.expert_gating == "softmax" and c.expert_weights_norm


@pytest.mark.parametrize("name", PROMPTS)
def test_token_ids(tiny, name):
    check_token_ids(tiny, name)


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_as_one_batch(tiny, name):
    check_every_position_as_one_batch(tiny, name)


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_one_token_at_a_time(tiny, name):
    check_every_position_one_token_at_a_time(tiny, name)


@pytest.mark.parametrize("name", PROMPTS)
def test_last_position_matches_float_path(tiny, name):
    check_last_position_matches_float_path(tiny, name)


def test_batch_and_one_token_passes_agree_on_the_float_path(tiny):
    """Windows, sinks, RoPE offsets and expert grouping give the same logits whether the prompt
    comes as one batch or one token at a time (float rounding apart)."""
    check_batch_and_one_token_agree_on_the_float_path(tiny)


@pytest.mark.parametrize("name", PROMPTS)
def test_greedy_run(tiny, name):
    """llama.cpp's 16 greedy steps fed back one token at a time (its own ids, so a near tie early
    on does not end the comparison): the same argmax at every step whose top-2 gap is >= 0.5."""
    _, m, _, be = tiny
    p = prompt_of(m, name)
    be.kv.clear()
    ids = list(p["ids"])
    logits = be.forward(ids, 0)
    checked = 0
    for i, (want, step) in enumerate(zip(p["greedy"]["ids"], p["greedy"]["steps"])):
        if step["margin_to_top2"] >= 0.5:
            assert int(logits.argmax()) == want, f"greedy step {i}"
            checked += 1
        logits = be.forward([want], len(ids))
        ids.append(want)
    assert checked >= 8


def test_prefill_in_chunks_of_8_agrees_with_one_chunk(tiny):
    """The window and the experts' grouping across chunk boundaries (llama.cpp's ubatches of 8 give
    the same logits as one batch)."""
    _, m, g, be = tiny
    ids = prompt_of(m, "english")["ids"]
    small = CpuBackend(be.cfg, g, n_ctx=128, chunk=8, int8=False)
    with be.float_activations():
        be.kv.clear()
        whole = be.forward(ids, 0, all_logits=True)
    np.testing.assert_allclose(small.forward(ids, 0, all_logits=True), whole, atol=1e-3)
