"""gemma4 on its tiny random-weight GGUF against llama.cpp, at every position, as one batch and one
token at a time (sliding window 8 on a 39-token prompt, per-layer embeddings, head dims 16 and 32,
partial rotation by rope_freqs on the full layer, soft-cap 30). The float path against llama.cpp's
all-F32 run: README gives 0.02 (ggml's GELU is an f16 table; ours is exact): held to 0.02, where a
missing soft-cap lands 1.9 and ignored rope_freqs 1.3 away. KV sharing and per-layer FFN widths on a
model made from it (tests/tiny_gemma4_shared.py), and experts beside the MLP (tests/tiny_gemma4_moe.py),
against llama.cpp's logits for those files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from hearth.engine.models.layer_state import SplitKV
from tests.tiny_gemma4_shared import make as make_shared
from tests.tiny_next import PROMPTS, check_against_top64, check_greedy, load, one_token_at_a_time, prompt_of


@pytest.fixture(scope="module")
def tiny(reference_dir):
    return load(reference_dir, "gemma4")


def test_hyperparameters_from_metadata(tiny):
    _, m, be = tiny
    h, c = m["hparams"], be.cfg
    hc = c.hybrid
    assert (c.n_embd, c.n_layer, c.n_head, c.head_dim, hc.head_dim_swa, c.n_ff, c.n_vocab) == \
        (h["n_embd"], h["n_layer"], h["n_head"], h["head_dim_full"], h["head_dim_swa"], h["n_ff"], h["n_vocab"])
    assert list(hc.swa_layers) == h["swa_pattern"] and hc.window == h["sliding_window"]
    assert (hc.n_embd_per_layer, c.final_softcap, c.rope_base, hc.rope_base_swa) == \
        (h["n_embd_per_layer"], h["final_logit_softcapping"], h["rope_freq_base"], h["rope_freq_base_swa"])
    assert isinstance(be.kv, SplitKV)
    assert [(k.n_layers, k.head_dim) for k in be.kv.caches] == [(3, 16), (1, 32)]


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_as_one_batch(tiny, name):
    d, m, be = tiny
    be.kv.clear()
    got = be.forward(prompt_of(m, name)["ids"], 0, all_logits=True)
    check_against_top64(got, np.load(d / f"top64_{name}.npz"))


@pytest.mark.parametrize("name", PROMPTS)
def test_every_position_one_token_at_a_time(tiny, name):
    d, m, be = tiny
    p = prompt_of(m, name)
    one = one_token_at_a_time(be, p["ids"])
    check_against_top64(one, np.load(d / f"top64_{name}.npz"))


@pytest.mark.parametrize("name", PROMPTS)
def test_last_position_matches_float_path(tiny, name):
    d, m, be = tiny
    be.kv.clear()
    with be.float_activations():
        got = be.forward(prompt_of(m, name)["ids"], 0)
    f32 = np.load(d / f"logits_f32path_last_{name}.npy")
    assert np.abs(got - f32).max() <= 0.02


@pytest.mark.parametrize("name", PROMPTS)
def test_greedy_run(tiny, name):
    _, m, be = tiny
    check_greedy(be, prompt_of(m, name))


def test_shared_kv_layers_read_the_last_layer_of_their_kind():
    from hearth.engine.models.gemma4_config import Gemma4Config
    hc = Gemma4Config(swa_layers=(True, False, True, False, True, False), window=8, head_dim_swa=16, n_rot_swa=16,
                      rope_base_swa=1e4, n_head_kv=(1,) * 6, n_ff=(8,) * 6, n_embd_per_layer=0, n_kv_layers=4)
    assert [hc.kv_source(i) for i in range(6)] == [0, 1, 2, 3, 2, 3]


SHARED_REF = Path(__file__).parent / "data" / "tiny_gemma4_shared_ref.npz"


@pytest.fixture(scope="module")
def shared(reference_dir, tmp_path_factory):
    """The tiny gemma4 with KV shared by layers 2-3 and per-layer FFN widths (tests/tiny_gemma4_shared.py)."""
    path = make_shared(reference_dir / "tiny-next" / "gemma4" / "tiny-gemma4.gguf",
                       tmp_path_factory.mktemp("g4") / "shared.gguf")
    ref = np.load(SHARED_REF)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(ref["sha256"]), "the maker no longer makes that file"
    g = GGUFFile.open(path)
    return ref, CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)


def test_shared_kv_model_layout(shared):
    _, be = shared
    hc = be.cfg.hybrid
    assert (hc.n_kv_layers, hc.n_ff) == (2, (96, 96, 192, 192))
    assert [(k.n_layers, k.head_dim) for k in be.kv.caches] == [(1, 16), (1, 32)]   # K/V for layers 0 and 1 only
    assert be.kv.kv_of(2) == be.kv.kv_of(0) and be.kv.kv_of(3) == be.kv.kv_of(1)


@pytest.mark.parametrize("name", PROMPTS)
def test_shared_kv_against_llama_cpp(shared, name):
    ref, be = shared
    ids = ref[f"{name}_ids"].tolist()
    top = {"ids": ref[f"{name}_top_ids"], "logits": ref[f"{name}_top_logits"]}
    be.kv.clear()
    check_against_top64(be.forward(ids, 0, all_logits=True), top)
    check_against_top64(one_token_at_a_time(be, ids), top)
    be.kv.clear()
    with be.float_activations():
        got = be.forward(ids, 0)
    assert np.abs(got[ref[f"{name}_f32_ids"]] - ref[f"{name}_f32_logits"]).max() <= 0.02


@pytest.mark.parametrize("key", ["gemma4.attention.sliding_window_pattern", "gemma4.attention.key_length_swa",
                                 "gemma4.attention.sliding_window", "gemma4.embedding_length_per_layer_input"])
def test_missing_metadata_names_the_key(reference_dir, key):
    import types

    from hearth.engine.errors import UnsupportedModelError
    g = GGUFFile.open(reference_dir / "tiny-next" / "gemma4" / "tiny-gemma4.gguf")
    md = {k: v for k, v in g.metadata.items() if k != key}
    fake = types.SimpleNamespace(path=g.path, architecture=g.architecture, metadata=md, tensors=g.tensors)
    with pytest.raises(UnsupportedModelError, match=key.replace(".", r"\.")):
        ModelConfig.from_gguf(fake)


def test_a_sharing_pattern_hearth_cannot_run_is_refused(reference_dir, tmp_path):
    """shared_kv_layers must leave a sliding and then a full layer with K/V right before the sharing
    ones (llama.cpp reads those two); the library refuses another pattern before loading."""
    from hearth.engine.library.support import verdict_for_gguf
    from tests.gguf_patch import patch_metadata
    bad = patch_metadata(reference_dir / "tiny-next" / "gemma4" / "tiny-gemma4.gguf", tmp_path / "bad.gguf",
                         "gemma4.attention.shared_kv_layers", 1)
    v = verdict_for_gguf(GGUFFile.open(bad, check_types=False))
    assert v.refused and "shared_kv_layers" in v.reason


MOE_REF = Path(__file__).parent / "data" / "tiny_gemma4_moe_ref.npz"


@pytest.fixture(scope="module")
def moe(reference_dir, tmp_path_factory):
    """The tiny gemma4 with experts in layers 1 (fused gate_up) and 3 (per-expert down scale)."""
    from tests.tiny_gemma4_moe import make as make_moe
    path = make_moe(reference_dir / "tiny-next" / "gemma4" / "tiny-gemma4.gguf", tmp_path_factory.mktemp("g4m") / "m.gguf")
    ref = np.load(MOE_REF)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(ref["sha256"]), "the maker no longer makes that file"
    g = GGUFFile.open(path)
    return ref, CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)


@pytest.mark.parametrize("name", PROMPTS)
def test_experts_against_llama_cpp(moe, name):
    ref, be = moe
    assert [b.moe is not None for b in be.model.blocks] == [False, True, False, True]
    ids = ref[f"{name}_ids"].tolist()
    top = {"ids": ref[f"{name}_top_ids"], "logits": ref[f"{name}_top_logits"]}
    be.kv.clear()
    check_against_top64(be.forward(ids, 0, all_logits=True), top)
    check_against_top64(one_token_at_a_time(be, ids), top)
    be.kv.clear()
    with be.float_activations():
        got = be.forward(ids, 0)
    assert np.abs(got[ref[f"{name}_f32_ids"]] - ref[f"{name}_f32_logits"]).max() <= 0.02
