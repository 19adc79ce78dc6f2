"""MXFP4 dequantization (engine/mxfp4_ref.py) bit for bit against gguf-py's."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.mxfp4_ref import BLOCK_BYTES, dequantize_mxfp4
from hearth.engine.quants import SUPPORTED_TYPES, TYPE_BY_NAME, dequantize

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType


def test_every_exponent_and_code_bit_exact():
    rng = np.random.default_rng(7)
    blocks = rng.integers(0, 256, (512, BLOCK_BYTES), dtype=np.uint8)
    blocks[:256, 0] = np.arange(256)          # every exponent, subnormal halves (0, 1) and 255 included
    with np.errstate(over="ignore"):          # exponent 255 times a code of 12 is inf in both
        want = gguf_quants.dequantize(blocks.reshape(-1), GGMLQuantizationType.MXFP4).reshape(-1, 32)
        got = dequantize_mxfp4(blocks)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))


def test_quantized_values_round_trip_through_the_engine_table():
    """gguf-py's quantizer, then the engine's dequantize (the registered MXFP4): gguf-py's values."""
    assert "MXFP4" in SUPPORTED_TYPES
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    raw = gguf_quants.quantize(x, GGMLQuantizationType.MXFP4)
    got = dequantize(raw, TYPE_BY_NAME["MXFP4"], (64, 4))
    want = gguf_quants.dequantize(raw, GGMLQuantizationType.MXFP4)
    np.testing.assert_array_equal(got, want)
    assert np.abs(got - x).max() < np.abs(x).max() / 2   # a quantization, not noise
