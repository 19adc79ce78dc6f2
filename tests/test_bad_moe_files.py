"""Damaged or inconsistent MoE files through Engine.load on both backends: an MXFP4 block whose
E8M0 scale byte is 0xFF (NaN in the spec; without the check the GPU gives NaN logits and the CPU
all-zero ones for tokens routed there), expert metadata that contradicts the tensors, expert tensors
or biases of the wrong shape. Each is refused naming the file and the tensor or metadata key, and
the engine loads and runs a good file afterwards. The bad files are the tiny gpt-oss rewritten
(tests/gguf_rewrite.py, tests/gguf_patch.py)."""

from __future__ import annotations

import pytest
from gguf_patch import patch_metadata
from gguf_rewrite import replaced, rewrite

from hearth.engine import Engine
from hearth.engine.errors import EngineError, GGUFError
from hearth.engine.gguf import GGUFFile

BACKENDS = ["cpu", "gpu"]


@pytest.fixture(scope="module")
def good(reference_dir):
    return reference_dir / "tiny-next" / "gpt-oss" / "tiny-gpt-oss.gguf"


def load_fails(path, backend, kind=EngineError) -> str:
    with pytest.raises(kind) as e:
        Engine.load(path, backend=backend, n_ctx=32).close()
    return str(e.value)


def runs(path, backend) -> None:
    eng = Engine.load(path, backend=backend, n_ctx=32)
    try:
        assert len(list(eng.generate("Hi there", max_tokens=3))) >= 1
    finally:
        eng.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_mxfp4_scale_of_0xff_is_refused_naming_file_tensor_and_block(tmp_path, good, backend):
    # ffn_down_exps [8 experts, 64 rows, 2 blocks of 17 bytes]: expert 3, row 5, block 1
    block = (3 * 64 + 5) * 2 + 1
    bad = rewrite(good, tmp_path / "nan-scale.gguf", tensors=replaced("blk.1.ffn_down_exps.weight",
                                                                     poke=[17 * block]))
    msg = load_fails(bad, backend, GGUFError)
    assert msg.startswith("nan-scale.gguf: tensor blk.1.ffn_down_exps.weight (MXFP4)")
    assert f"block {block} (expert 3, row 5) has the scale byte 0xFF" in msg and "NaN" in msg
    runs(good, backend)


def test_0xff_among_the_codes_is_not_a_bad_scale(good):
    """Only byte 0 of each 17 is a scale: the good file has 0xFF code bytes (and loads, above)."""
    g = GGUFFile.open(good)
    blocks = g.tensors["blk.0.ffn_gate_exps.weight"].data.reshape(-1, 17)
    assert (blocks[:, 1:] == 0xFF).any() and not (blocks[:, 0] == 0xFF).any()
    g.close()


BAD_METADATA = [("gpt-oss.expert_used_count", 9, "gpt-oss.expert_used_count is 9, more than gpt-oss.expert_count (8)"),
                ("gpt-oss.expert_used_count", 0, "metadata gpt-oss.expert_used_count is 0"),
                ("gpt-oss.expert_count", 4, "4 (gpt-oss.expert_count)"),
                ("gpt-oss.expert_feed_forward_length", 32, "32 (gpt-oss.expert_feed_forward_length)")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_expert_metadata_that_contradicts_the_file_is_refused_naming_the_key(tmp_path, good, backend):
    for key, value, words in BAD_METADATA:
        bad = patch_metadata(good, tmp_path / "bad-meta.gguf", key, value)
        msg = load_fails(bad, backend)
        assert msg.startswith("bad-meta.gguf: ") and words in msg, msg
    runs(good, backend)


BAD_TENSORS = [
    (replaced("blk.0.ffn_down_exps.weight", ne=(32, 128, 8)),
     "tensor blk.0.ffn_down_exps.weight has shape [32, 128, 8] (GGUF order); the metadata says "
     "[64 (gpt-oss.expert_feed_forward_length), 64 (gpt-oss.embedding_length), 8 (gpt-oss.expert_count)]"),
    (replaced("blk.1.ffn_up_exps.weight", ne=(64, 64, 4), keep=64 * 2 * 17 * 4),
     "tensor blk.1.ffn_up_exps.weight has shape [64, 64, 4]"),
    (replaced("blk.0.ffn_gate_exps.bias", ne=(64, 4), keep=64 * 4 * 4),
     "tensor blk.0.ffn_gate_exps.bias has shape [64, 4] (GGUF order); the metadata says "
     "[64 (gpt-oss.expert_feed_forward_length), 8 (gpt-oss.expert_count)]"),
    (replaced("blk.1.ffn_gate_inp.bias", ne=(4,), keep=16),
     "tensor blk.1.ffn_gate_inp.bias has shape [4] (GGUF order); the metadata says [8 (gpt-oss.expert_count)]"),
    (replaced("blk.1.ffn_down_exps.bias", ne=(32, 8), keep=32 * 8 * 4),
     "tensor blk.1.ffn_down_exps.bias has shape [32, 8] (GGUF order); the metadata says "
     "[64 (gpt-oss.embedding_length), 8 (gpt-oss.expert_count)]"),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_expert_tensors_of_the_wrong_shape_are_refused_naming_the_tensor(tmp_path, good, backend):
    for change, words in BAD_TENSORS:
        bad = rewrite(good, tmp_path / "bad-shape.gguf", tensors=change)
        msg = load_fails(bad, backend)
        assert msg.startswith("bad-shape.gguf: ") and words in msg, msg
    runs(good, backend)


def test_the_scan_reads_every_block(tmp_path, good):
    """The last block of the last MXFP4 tensor too (the scan steps over the tensor in chunks)."""
    from hearth.engine.quants import scale_check
    g = GGUFFile.open(good)
    last = [n for n, t in g.tensors.items() if t.type.name == "MXFP4"][-1]
    n_blocks = g.tensors[last].data.nbytes // 17
    g.close()
    bad = rewrite(good, tmp_path / "last.gguf", tensors=replaced(last, poke=[17 * (n_blocks - 1)]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scale_check, "CHUNK_BLOCKS", 7)
        g = GGUFFile.open(bad)
        with pytest.raises(GGUFError, match=f"tensor {last} .* block {n_blocks - 1} "):
            scale_check.check_scales(g)
        g.close()
