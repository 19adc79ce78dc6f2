"""smollm3, phi3 and mistral3 on their tiny random-weight GGUFs (tests/data/tiny-next, made by
make_tiny.py there) against llama.cpp, at every position, as one batch and one token at a time.

Tolerance: ../shared/reference/README.md's for its tiny-next models: token ids exact; at every
position the logits at llama.cpp's 64 largest ids within mean 0.15 and max 1.5, the same top-1
where llama.cpp's top-2 gap is at least 0.5; the last position within 0.01 mean / 0.05 max of
llama.cpp's float path (an all-F32 copy of the same values, F32 K/V) for the float path; greedy
steps up to gaps under 0.5. These models' logits spread ~9 (the shared ones ~3), which makes the
8-bit comparison stricter, not looser.
Measured (8-bit x, the default; worst position's mean, max): smollm3 0.11, 0.33; phi3 0.03, 0.09;
mistral3 0.05, 0.14, batch and one token at a time alike; the float path within 2e-5.
How far the mistakes land on the float path (max, english, last position): smollm3 RoPE on every
layer 1.8, NoPE on every 2nd layer 7.1; phi3 long factors where short belong 11.5, no
rope.scaling.attn_factor 1.6; mistral3 no temperature scaling 0.84, YaRN without its log
multiplier 2.2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.models.dense_config import config_fields
from hearth.engine.errors import UnsupportedModelError
from hearth.engine.gguf import GGUFFile
from hearth.engine.library.support import architecture_verdict
from tests.tiny_next import (
    assert_agrees, check_batch_and_one_token_agree_on_the_float_path, check_every_position_as_one_batch,
    check_every_position_one_token_at_a_time, check_last_position_matches_float_path, check_token_ids, prompt_of,
)

DATA = Path(__file__).parent / "data" / "tiny-next"
ARCHS = ["smollm3", "phi3", "mistral3"]
PROMPTS = ["chat", "english"]


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    d = DATA / request.param
    manifest = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / manifest["file"])
    return d, manifest, g, CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)


def test_hyperparameters_from_metadata(tiny):
    _, m, _, be = tiny
    h, c = m["hparams"], be.cfg
    assert c.arch == m["arch"] and architecture_verdict(c.arch).runs
    assert (c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_vocab) == \
        (h["n_embd"], h["n_layer"], h["n_head"], h["n_head_kv"], h["head_dim"], h["n_ff"], m["n_vocab"])
    assert c.rope_base == h["rope.freq_base"] and not c.cpu_only     # the GPU runs them too
    if c.arch == "smollm3":
        assert c.nope_layers == (False, False, False, True) and not c.rope_neox
        assert be.model.compiled is not None      # in stretches that rotate alike
    elif c.arch == "phi3":
        assert c.rope_neox and c.n_rot == 12 and c.rope_orig_ctx == 256
        assert c.rope_scaling.kind == "none"
        assert c.rope_scaling.attn_factor == pytest.approx(h["rope.scaling.attn_factor"], rel=1e-6)
        assert be.model.compiled is not None      # the fused matrices split into the compiled layout
    else:
        assert be.model.compiled is not None      # below position 16 (the factor is 1 there)
        s = c.rope_scaling
        assert (s.kind, s.factor, s.orig_ctx) == ("yarn", 8.0, 16) and not c.rope_neox
        assert s.attn_factor == pytest.approx(1 / (1 + 0.1 * math.log(8.0)))
        assert (c.attn_temp_scale, c.attn_temp_floor) == (pytest.approx(0.1), 16)


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
    check_batch_and_one_token_agree_on_the_float_path(tiny)


@pytest.mark.parametrize("name", PROMPTS)
def test_greedy_run(tiny, name):
    """llama.cpp's 16 greedy steps fed back one token at a time: the same argmax at every step
    whose top-2 gap is >= 0.5."""
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
    assert checked >= 4


def test_phi3_takes_the_long_factors_beyond_the_original_context():
    """At n_ctx 512 (> rope.scaling.original_context_length 256) llama.cpp rotates by
    rope_factors_long; its logits then differ from the short ones' by up to ~11."""
    d = DATA / "phi3"
    m = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / m["file"])
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=512, int8=True)
    ids = prompt_of(m, "english")["ids"]
    assert_agrees(be.forward(ids, 0, all_logits=True), np.load(d / "top64_english_long.npz"))
    be.kv.clear()
    steps = np.stack([be.forward([t], j).copy() for j, t in enumerate(ids)])
    assert_agrees(steps, np.load(d / "top64_english_long.npz"))


def _fake(arch, metadata, tensors=None):
    return SimpleNamespace(path=Path(f"x-{arch}.gguf"), tensors=tensors or {}, metadata=metadata)


def _opt(md, arch):
    return lambda suffix, default, lo=None, hi=None: md.get(f"{arch}.{suffix}", default)


def test_mistral3_with_experts_is_refused_by_name():
    md = {"mistral3.expert_count": 8}
    with pytest.raises(UnsupportedModelError, match=r"x-mistral3.gguf: mistral3 with experts \(mistral3.expert_count\)"):
        config_fields(_fake("mistral3", md), "mistral3", _opt(md, "mistral3"),
                      {"arch": "mistral3", "n_layer": 2, "rope_scaling": SimpleNamespace(orig_ctx=16)})


def test_phi3_rope_factors_of_the_wrong_length_are_named():
    t = {"rope_factors_long.weight": SimpleNamespace(shape=(8,))}
    with pytest.raises(UnsupportedModelError, match="rope_factors_long.weight has shape"):
        config_fields(_fake("phi3", {}, t), "phi3", _opt({}, "phi3"),
                      {"arch": "phi3", "n_layer": 2, "context_length": 128, "n_rot": 12})


def test_phi3_with_experts_is_refused_by_name():
    md = {"phi3.expert_count": 16}
    with pytest.raises(UnsupportedModelError, match=r"x-phi3.gguf: phi3 with experts \(phi3.expert_count\)"):
        config_fields(_fake("phi3", md), "phi3", _opt(md, "phi3"),
                      {"arch": "phi3", "n_layer": 2, "context_length": 128, "n_rot": 12})


def test_phi3_with_separate_qkv_agrees_with_the_fused_file(tmp_path):
    """Older phi3 files store q, k and v apart; llama.cpp takes either, and so the same weights
    written apart give the same logits."""
    d = DATA / "phi3"
    m = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / m["file"])
    apart = _with_qkv_apart(d / m["file"], tmp_path / "apart.gguf")
    ids = prompt_of(m, "english")["ids"]
    outs = []
    for gg in (g, GGUFFile.open(apart)):
        be = CpuBackend(ModelConfig.from_gguf(gg), gg, n_ctx=128, int8=False)
        outs.append(be.forward(ids, 0))
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-4)


def _with_qkv_apart(src: Path, dst: Path) -> Path:
    """A copy of a phi3 file with each attn_qkv written as attn_q, attn_k, attn_v (row blocks)."""
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), "phi3")
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), f.types[0], sub)
    md = {k: f.contents() for k, f in r.fields.items()}
    q = md["phi3.attention.head_count"] * md["phi3.attention.key_length"]
    kv = md["phi3.attention.head_count_kv"] * md["phi3.attention.key_length"]
    for t in r.tensors:
        data = np.asarray(t.data)
        if t.name.endswith("attn_qkv.weight"):
            for part, (a, b) in zip("qkv", [(0, q), (q, q + kv), (q + kv, q + 2 * kv)]):
                w.add_tensor(t.name.replace("attn_qkv", f"attn_{part}"), data[a:b], raw_dtype=t.tensor_type)
        else:
            w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst
