"""engine/quants.py: every supported GGML type dequantizes bit for bit like gguf-py (llama.cpp's
own Python reader), on random blocks and on every tensor of real models; other types are refused
with an error naming the tensor and the type, when the model is opened.

Equality is on float32 bit patterns (`.view(np.uint32)`), so -0.0 vs 0.0 or a one-ulp difference
fails. Random bytes can make an f16/f32 scale inf or NaN; `test_random_blocks` therefore compares
NaN-aware (where the oracle is NaN ours must be NaN, payload free; everywhere else the bits must
match), and `test_random_blocks_finite_scales` overwrites every scale field with a finite value
and then demands identical bits everywhere.
"""

from __future__ import annotations

import secrets
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from gguf import quants as gq

from hearth.engine.errors import UnsupportedModelError
from hearth.engine.gguf import GGUFFile
from hearth.engine.quants import (GGML_TYPES, SUPPORTED_TYPES, TYPE_BY_NAME, dequantize, dequantize_blocks,
                           dequantize_rows, dequantize_tensor)

REQUIRED = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
            "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
            "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "MXFP4"]

# Where each type keeps its float scales: (byte offset in the block, "f16" | "bf16" | "f32").
SCALE_FIELDS = {
    "F32": [(0, "f32")], "F16": [(0, "f16")], "BF16": [(0, "bf16")],
    "Q8_0": [(0, "f16")], "Q4_0": [(0, "f16")], "Q4_1": [(0, "f16"), (2, "f16")],
    "Q5_0": [(0, "f16")], "Q5_1": [(0, "f16"), (2, "f16")],
    "Q2_K": [(80, "f16"), (82, "f16")], "Q3_K": [(108, "f16")], "Q4_K": [(0, "f16"), (2, "f16")],
    "Q5_K": [(0, "f16"), (2, "f16")], "Q6_K": [(208, "f16")], "Q8_K": [(0, "f32")],
    "IQ2_XXS": [(0, "f16")], "IQ2_XS": [(0, "f16")], "IQ2_S": [(0, "f16")], "IQ3_XXS": [(0, "f16")],
    "IQ3_S": [(0, "f16")], "IQ4_NL": [(0, "f16")], "IQ4_XS": [(0, "f16")],
    "MXFP4": [],   # an e8m0 byte: every value is a finite power of two (2^127 for 0xFF, as llama.cpp)
}


def _q8_k_reference(blocks: np.ndarray) -> np.ndarray:
    """gguf-py has no Q8_K dequantizer; this is ggml's dequantize_row_q8_K, one weight at a time:
    block = { float d; int8 qs[256]; int16 bsums[16]; },  y[j] = d * qs[j]."""
    out = np.empty((len(blocks), 256), np.float32)
    for i, blk in enumerate(blocks):
        d = np.float32(struct.unpack_from("<f", blk, 0)[0])
        qs = struct.unpack_from("<256b", blk, 4)
        with np.errstate(invalid="ignore", over="ignore"):
            out[i] = [d * np.float32(q) for q in qs]
    return out


def reference(blocks: np.ndarray, type_name: str) -> np.ndarray:
    """The oracle: gguf-py's dequantizer, float32 [n_blocks, block_size]. For a quantized type we
    call gguf-py's per-type kernel (`dequantize_blocks`) on all blocks at once: `gq.dequantize`
    runs the same kernel over groups of 16 rows, which makes whole models take minutes."""
    qtype = GGMLQuantizationType[type_name]
    traits = getattr(gq, "_type_traits", {})
    try:
        with np.errstate(all="ignore"):
            if qtype in traits:
                traits[qtype].init_grid()   # the i-quants' grids (gq.dequantize does this first)
                ref = traits[qtype].dequantize_blocks(np.ascontiguousarray(blocks).reshape(-1, traits[qtype].type_size))
            else:
                ref = gq.dequantize(blocks, qtype)
    except NotImplementedError:
        assert type_name == "Q8_K", f"gguf-py cannot dequantize {type_name}"
        ref = _q8_k_reference(blocks)
    return np.asarray(ref, np.float32).reshape(len(blocks), -1)


def assert_same_bits(ours: np.ndarray, ref: np.ndarray, what: str, nan_aware: bool = False) -> None:
    assert ours.dtype == np.float32, what
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != {ref.shape}"
    a, b = ours.view(np.uint32).reshape(-1), ref.view(np.uint32).reshape(-1)
    if nan_aware:
        nan = np.isnan(ref).reshape(-1)
        assert np.array_equal(np.isnan(ours).reshape(-1), nan), f"{what}: NaNs in different places"
        a, b = a[~nan], b[~nan]
    else:
        assert not np.isnan(ref).any(), f"{what}: the oracle produced NaN in a strict comparison"
    bad = np.flatnonzero(a != b)
    assert bad.size == 0, (f"{what}: {bad.size} of {a.size} weights differ, first at {bad[0]}: "
                           f"{a[bad[0]]:#010x} vs {b[bad[0]]:#010x}")


def random_blocks(type_name: str, n_blocks: int, seed: int, finite_scales: bool) -> np.ndarray:
    t = TYPE_BY_NAME[type_name]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (n_blocks, t.type_size), dtype=np.uint8)
    if finite_scales:
        # Clearing the top exponent bit keeps an f16/bf16/f32 finite (and still of any sign,
        # subnormal or zero); the other bits stay random.
        for off, kind in SCALE_FIELDS[type_name]:
            hi = off + (3 if kind == "f32" else 1)
            blocks[:, hi] &= np.uint8(0xBF)
    return blocks


def test_every_required_type_is_supported():
    assert sorted(REQUIRED) == sorted(SUPPORTED_TYPES)
    assert set(SCALE_FIELDS) == set(REQUIRED)


@pytest.mark.parametrize("type_name", REQUIRED)
def test_random_blocks(type_name):
    seed = secrets.randbits(64)  # fresh bytes every run; the seed is in any failure message
    blocks = random_blocks(type_name, 300, seed, finite_scales=False)
    ours = dequantize_blocks(blocks, TYPE_BY_NAME[type_name])
    assert_same_bits(ours, reference(blocks, type_name), f"{type_name} seed={seed}", nan_aware=True)


@pytest.mark.parametrize("type_name", REQUIRED)
def test_random_blocks_finite_scales(type_name):
    seed = secrets.randbits(64)
    blocks = random_blocks(type_name, 300, seed, finite_scales=True)
    ours = dequantize_blocks(blocks, TYPE_BY_NAME[type_name])
    assert_same_bits(ours, reference(blocks, type_name), f"{type_name} seed={seed}")


@pytest.mark.parametrize("type_name", [t for t in REQUIRED if t != "Q8_K"])
def test_many_blocks_take_the_chunked_threaded_path(type_name):
    """Large tensors are cut into chunks run on a thread pool; the result must not change."""
    t = TYPE_BY_NAME[type_name]
    n_blocks = (3 << 20) // t.type_size + 7  # several chunks and a ragged last one
    seed = secrets.randbits(64)
    blocks = random_blocks(type_name, n_blocks, seed, finite_scales=True)
    ours = dequantize_blocks(blocks, t)
    assert_same_bits(ours, reference(blocks, type_name), f"{type_name} seed={seed}")


def test_known_values():
    """A hand-built Q4_1 block and a Q8_0 block, independent of any oracle."""
    q41 = np.frombuffer(np.float16(0.5).tobytes() + np.float16(-1.0).tobytes()
                        + bytes((j % 16) | ((15 - j % 16) << 4) for j in range(16)), np.uint8)
    w = dequantize(q41, TYPE_BY_NAME["Q4_1"], (32,))
    assert w.tolist() == [0.5 * (j % 16) - 1 for j in range(16)] + [0.5 * (15 - j % 16) - 1 for j in range(16)]
    q80 = np.frombuffer(np.float16(2.0).tobytes() + np.arange(-16, 16, dtype=np.int8).tobytes(), np.uint8)
    assert dequantize(q80, TYPE_BY_NAME["Q8_0"], (32,)).tolist() == [2.0 * q for q in range(-16, 16)]


def test_dequantize_returns_numpy_order():
    # GGUF shape [ne0=64, ne1=3] (3 rows of 64) comes back as numpy [3, 64].
    blocks = random_blocks("Q8_0", 6, 1, finite_scales=True)
    out = dequantize(blocks.reshape(-1), TYPE_BY_NAME["Q8_0"], (64, 3), "m")
    assert out.shape == (3, 64)
    assert_same_bits(out.reshape(6, 32), reference(blocks, "Q8_0"), "Q8_0 shape")


def test_dequantize_rejects_a_byte_count_that_does_not_match_the_shape():
    with pytest.raises(ValueError, match="blk.0.w"):
        dequantize(np.zeros(34 * 3, np.uint8), TYPE_BY_NAME["Q8_0"], (64, 2), "blk.0.w")


@pytest.mark.parametrize("type_name", ["IQ1_S", "TQ1_0", "NVFP4", "Q8_1", "IQ1_M"])
def test_dequantize_refuses_unsupported_types(type_name):
    t = TYPE_BY_NAME[type_name]
    with pytest.raises(UnsupportedModelError, match=f"blk.7.ffn_up.*{type_name}"):
        dequantize(np.zeros(t.type_size * 2, np.uint8), t, (t.block_size * 2,), "blk.7.ffn_up")


def _real_models(default_model_path, reference_dir) -> list[Path]:
    """The default model, the tiny reference models, and Gemma 3 270M Q4_K_M (Q4_K, Q6_K) where
    its test package is installed (./dev installs it)."""
    from model_paths import gemma3_model_path
    gemma = gemma3_model_path()
    return [default_model_path, *sorted((reference_dir / "tiny").glob("*/*.gguf")), *([gemma] if gemma else [])]


def test_the_fast_oracle_path_is_gguf_py_dequantize():
    """`reference` shortcuts gguf-py's row grouping; check once that it changes nothing."""
    for type_name in ["Q4_1", "Q6_K"]:
        blocks = random_blocks(type_name, 40, secrets.randbits(64), finite_scales=True)
        slow = gq.dequantize(blocks, GGMLQuantizationType[type_name]).reshape(40, -1)
        assert_same_bits(reference(blocks, type_name), slow, type_name)


def test_every_tensor_of_real_models(default_model_path, reference_dir):
    """The default model (Q4_1, Q8_0, F32), the tiny reference models (adding Q4_0, Q5_0, F16) and
    Gemma 3 270M where installed (adding Q4_K, Q6_K).
    The bytes come from our reader (tests/test_gguf.py proves them equal to GGUFReader's; building
    a GGUFReader costs seconds per model because it parses every vocabulary string)."""
    seen = set()
    paths = _real_models(default_model_path, reference_dir)
    for path in paths:
        for info in GGUFFile.open(path).tensors.values():
            ours = dequantize_tensor(info)
            assert ours.shape == tuple(reversed(info.shape)), info.name
            ref = reference(info.data.reshape(-1, info.type.type_size), info.type.name)
            assert_same_bits(ours.reshape(-1), ref.reshape(-1), f"{path.name}: {info.name}")
            rows = dequantize_rows(info)
            assert rows.shape == (ours.size // info.shape[0], info.shape[0])
            seen.add(info.type.name)
    assert {"Q4_1", "Q8_0", "F32", "F16", "Q4_0", "Q5_0"} <= seen, seen
    if len(paths) > 5:
        assert {"Q4_K", "Q6_K"} <= seen, seen


def _write_gguf_with(path: Path, type_name: str) -> None:
    t = TYPE_BY_NAME[type_name]
    w = GGUFWriter(path, "llama")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.add_tensor("blk.3.attn_q.weight", np.zeros((2, 2 * t.type_size), np.uint8),
                 raw_dtype=GGMLQuantizationType[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("type_name", ["IQ1_S", "TQ1_0", "TQ2_0", "IQ1_M", "Q8_1"])
def test_opening_a_model_with_an_unsupported_type_fails_naming_tensor_and_type(tmp_path, type_name):
    path = tmp_path / f"model-{type_name}.gguf"
    _write_gguf_with(path, type_name)
    with pytest.raises(UnsupportedModelError) as err:
        GGUFFile.open(path)
    msg = str(err.value)
    assert path.name in msg and "blk.3.attn_q.weight" in msg and type_name in msg, msg
    # Without the check the file still indexes (tools may list what they cannot run).
    g = GGUFFile.open(path, check_types=False)
    assert g.tensors["blk.3.attn_q.weight"].type is TYPE_BY_NAME[type_name]


def test_type_table_agrees_with_gguf_py():
    from gguf.constants import GGML_QUANT_SIZES
    for t in GGML_TYPES.values():
        try:
            qt = GGMLQuantizationType(t.id)
        except ValueError:
            continue  # newer than this gguf-py
        assert qt.name == t.name
        assert GGML_QUANT_SIZES[qt] == (t.block_size, t.type_size), t.name
