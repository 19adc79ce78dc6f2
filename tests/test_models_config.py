"""ModelConfig from GGUF metadata, clear refusals, and the RoPE variants' semantics."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.errors import UnsupportedModelError
from hearth.engine.gguf import GGUFFile
from hearth.engine.models.layers import Rope, attention, rms_norm

gguf = pytest.importorskip("gguf")  # gguf-py writes the test files (test oracle only)


def write_model(path, arch="llama", extra=None, d=8, n_head=2, n_kv=1, vocab=16, ff=16):
    """A one-layer model; `extra` metadata is added, or replaces the base keys (the tensors keep the
    shapes of d, n_head, n_kv, vocab and ff)."""
    w = gguf.GGUFWriter(str(path), arch)
    keys = {f"{arch}.embedding_length": d, f"{arch}.block_count": 1, f"{arch}.feed_forward_length": ff,
            f"{arch}.attention.head_count": n_head, f"{arch}.attention.head_count_kv": n_kv,
            f"{arch}.attention.layer_norm_rms_epsilon": 1e-5, **(extra or {})}
    for k, v in keys.items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        elif v < 0:
            w.add_int32(k, v)
        else:
            w.add_uint32(k, v)
    rng = np.random.default_rng(0)
    hd = d // n_head
    for name, shape in [("token_embd.weight", (vocab, d)), ("output_norm.weight", (d,)),
                        ("blk.0.attn_norm.weight", (d,)), ("blk.0.attn_q.weight", (n_head * hd, d)),
                        ("blk.0.attn_k.weight", (n_kv * hd, d)), ("blk.0.attn_v.weight", (n_kv * hd, d)),
                        ("blk.0.attn_output.weight", (d, n_head * hd)), ("blk.0.ffn_norm.weight", (d,)),
                        ("blk.0.ffn_gate.weight", (ff, d)), ("blk.0.ffn_up.weight", (ff, d)),
                        ("blk.0.ffn_down.weight", (d, ff))]:
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return GGUFFile.open(path)


def test_unsupported_architecture_is_named(tmp_path):
    g = write_model(tmp_path / "m.gguf", arch="gpt2")
    with pytest.raises(UnsupportedModelError, match="architecture 'gpt2'"):
        ModelConfig.from_gguf(g)


def test_minimal_llama_config_defaults(tmp_path):
    c = ModelConfig.from_gguf(write_model(tmp_path / "m.gguf"))
    assert (c.arch, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_rep, c.n_vocab) == ("llama", 8, 2, 1, 4, 2, 16)
    assert c.rope_base == 10000.0 and c.n_rot == 4 and c.tied_output and c.rope_scaling.kind == "none"
    assert c.attn_scale == pytest.approx(0.5)


def test_missing_metadata_is_named(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(UnsupportedModelError, match="llama.embedding_length"):
        ModelConfig.from_gguf(GGUFFile.open(tmp_path / "m.gguf"))


@pytest.mark.parametrize("key, value, match", [
    ("attention.head_count", 0, "llama.attention.head_count is 0; it must be between 1 and"),
    ("attention.head_count_kv", 0, "llama.attention.head_count_kv is 0; it must be between 1 and 2"),
    ("attention.head_count_kv", 4, "llama.attention.head_count_kv is 4; it must be between 1 and 2"),
    ("embedding_length", 0, "llama.embedding_length is 0"),
    ("embedding_length", 7, "embedding_length 7 does not split into 2 heads"),
    ("embedding_length", 1 << 30, "llama.embedding_length is 1073741824; it must be between 1 and 65536"),
    ("block_count", 0, "llama.block_count is 0"),
    ("block_count", -3, "llama.block_count is -3"),
    ("feed_forward_length", 0, "llama.feed_forward_length is 0"),
    ("attention.key_length", 0, "llama.attention.key_length is 0"),
    ("attention.layer_norm_rms_epsilon", float("nan"), "layer_norm_rms_epsilon is nan; it must be between"),
    ("attention.layer_norm_rms_epsilon", 5.0, "layer_norm_rms_epsilon is 5.0"),
    ("rope.freq_base", 0.0, "llama.rope.freq_base is 0.0"),
    ("rope.freq_base", float("inf"), "llama.rope.freq_base is inf"),
    ("context_length", 0, "llama.context_length is 0"),
    ("rope.dimension_count", 7, "llama.rope.dimension_count is 7; it must be between 0 and 4"),
    ("attention.head_count", "two", "llama.attention.head_count is 'two', not a whole number"),
])
def test_zero_or_absurd_hyper_parameters_are_refused_naming_the_key(tmp_path, key, value, match):
    g = write_model(tmp_path / "m.gguf", extra={f"llama.{key}": value})
    with pytest.raises(UnsupportedModelError, match=re.escape(match)):
        ModelConfig.from_gguf(g)


def test_a_token_embedding_of_the_wrong_width_is_refused(tmp_path):
    g = write_model(tmp_path / "m.gguf", extra={"llama.embedding_length": 16, "llama.attention.key_length": 4})
    with pytest.raises(UnsupportedModelError, match=r"token_embd.weight has shape \[8, 16\]"):
        ModelConfig.from_gguf(g)


def test_rope_scaling_kinds(tmp_path):
    lin = ModelConfig.from_gguf(write_model(tmp_path / "a.gguf", extra={
        "llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}))
    assert lin.rope_scaling.kind == "linear" and lin.rope_scaling.freq_scale == 0.25
    yarn = ModelConfig.from_gguf(write_model(tmp_path / "b.gguf", extra={
        "llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
        "llama.rope.scaling.original_context_length": 4096}))
    assert yarn.rope_scaling.kind == "yarn" and yarn.rope_scaling.orig_ctx == 4096
    with pytest.raises(UnsupportedModelError, match="longrope"):
        ModelConfig.from_gguf(write_model(tmp_path / "c.gguf", extra={
            "llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 4.0}))


def test_rope_pairs_normal_vs_neox():
    x = np.zeros((1, 1, 8), np.float32)
    x[0, 0, 0] = 1.0
    for neox, partner in ((False, 1), (True, 4)):
        r = Rope(8, 10000.0, neox)
        y = x.copy()
        r.apply(y, r.cos_sin(1, 1))
        # dimension 0 (frequency 1) rotates by 1 radian into its pair partner
        assert y[0, 0, 0] == pytest.approx(math.cos(1.0), abs=1e-6)
        assert y[0, 0, partner] == pytest.approx(math.sin(1.0), abs=1e-6)
        assert np.count_nonzero(np.abs(y) > 1e-7) == 2


def test_rope_linear_scaling_divides_positions():
    from hearth.engine.config import RopeScaling
    plain, lin = Rope(8, 10000.0, True), Rope(8, 10000.0, True, RopeScaling("linear", 4.0))
    c1, s1 = plain.cos_sin(3, 1)
    c4, s4 = lin.cos_sin(12, 1)
    np.testing.assert_allclose(c1, c4, atol=1e-6)
    np.testing.assert_allclose(s1, s4, atol=1e-6)


def test_rope_freq_factors_divide_frequencies():
    ff = np.array([1.0, 2.0, 4.0, 8.0])
    r = Rope(8, 10000.0, False, freq_factors=ff)
    np.testing.assert_allclose(r.inv_freq * ff, Rope(8, 10000.0, False).inv_freq)


def test_yarn_keeps_high_frequencies_and_interpolates_low_ones():
    from hearth.engine.config import RopeScaling
    base = Rope(64, 10000.0, True).inv_freq
    y = Rope(64, 10000.0, True, RopeScaling("yarn", 8.0, 4096, ext_factor=1.0))
    assert y.inv_freq[0] == pytest.approx(base[0])            # extrapolated
    assert y.inv_freq[-1] == pytest.approx(base[-1] / 8.0)    # interpolated
    assert y.mscale == pytest.approx(1 + 0.1 * math.log(8.0))


def test_rms_norm():
    x = np.array([[3.0, 4.0]], np.float32)
    np.testing.assert_allclose(rms_norm(x, np.array([1.0, 2.0], np.float32), 0.0),
                               [[3 / math.sqrt(12.5), 8 / math.sqrt(12.5)]], rtol=1e-6)


def test_attention_is_causal_and_windowed():
    """A query sees itself and earlier keys only, and with a window only the last `window`."""
    rng = np.random.default_rng(1)
    n, hd = 6, 4
    k = rng.standard_normal((1, 8, hd)).astype(np.float32)
    v = np.eye(8, hd, dtype=np.float32)[None] * 0 + np.arange(8, dtype=np.float32)[None, :, None]
    q = np.zeros((n, 1, hd), np.float32)  # uniform attention over what is visible
    out = attention(q, k, v, 0, 0)[:, 0]
    np.testing.assert_allclose(out, [np.mean(range(i + 1)) for i in range(n)], rtol=1e-6)
    out = attention(q, k, v, 0, 2)[:, 0]
    np.testing.assert_allclose(out, [np.mean([j for j in (i - 1, i) if j >= 0]) for i in range(n)], rtol=1e-6)
    # decode at position 5 with window 3 sees keys 3, 4, 5 only
    out = attention(q[:1], k, v, 5, 3)[:, 0]
    np.testing.assert_allclose(out, [4.0], rtol=1e-6)


@pytest.mark.parametrize("T", [5, 300])
def test_decode_attention_equals_the_masked_block_path(T):
    """The single-query paths (matrix and matrix-vector) agree with the general masked path."""
    rng = np.random.default_rng(T)
    k = rng.standard_normal((2, 512, 8)).astype(np.float32)
    v = rng.standard_normal((2, 512, 8)).astype(np.float32)
    q = rng.standard_normal((2, 4, 8)).astype(np.float32)
    # two queries through the block path; the second one alone through the decode path
    both = attention(q, k, v, T - 2, 0)
    one = attention(q[1:], k, v, T - 1, 0)
    np.testing.assert_allclose(one, both[1:], rtol=1e-5, atol=1e-6)
    both = attention(q, k, v, T - 2, 4)
    one = attention(q[1:], k, v, T - 1, 4)
    np.testing.assert_allclose(one, both[1:], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("key", ["llama.attention.head_count", "llama.block_count",
                                 "llama.attention.head_count_kv", "llama.embedding_length"])
def test_loading_a_real_model_with_a_zero_hyper_parameter_names_the_key(tmp_path, reference_dir, key):
    from gguf_patch import patch_metadata

    from hearth.engine import Engine
    bad = patch_metadata(reference_dir / "tiny" / "llama" / "tiny-llama.gguf", tmp_path / "bad.gguf", key, 0)
    with pytest.raises(UnsupportedModelError, match=re.escape(f"{key} is 0")):
        Engine.load(bad, n_ctx=64)
