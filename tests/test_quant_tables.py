"""engine/quants/tables.py: the i-quant grids, sign table and codebooks equal gguf-py's copies (and
llama.cpp's ggml-common.h, their source: `./dev test` fetches it into build/ggml/ and names it in
HEARTH_GGML_COMMON_H; elsewhere the test reads a llama.cpp source tree where one is at hand)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gguf import quants as gq

from hearth.engine.quants import tables as T

_HEADER = Path(os.environ.get("HEARTH_GGML_COMMON_H", "/work/cache/llama-cpp/llama_cpp_python-0.3.36/vendor/"
                                                       "llama.cpp/ggml/src/ggml-common.h"))


@pytest.mark.parametrize(("ours", "cls"), [
    (T.IQ2_GRIDS["iq2xxs"], gq.IQ2_XXS), (T.IQ2_GRIDS["iq2xs"], gq.IQ2_XS), (T.IQ2_GRIDS["iq2s"], gq.IQ2_S),
    (T.IQ3XXS_GRID, gq.IQ3_XXS), (T.IQ3S_GRID, gq.IQ3_S)])
def test_grids_equal_gguf_py(ours, cls):
    cls.init_grid()
    ref = np.asarray(cls.grid, np.float32).reshape(cls.grid_shape)
    assert ours.dtype == np.uint8 and ours.shape == ref.shape
    assert np.array_equal(ours.astype(np.float32), ref)


def test_signs_and_codebooks_equal_gguf_py():
    assert np.array_equal(T.KSIGNS, np.frombuffer(gq.IQ2_XXS.ksigns, np.uint8))
    # every sign byte has an even count of set bits: the 8th sign is implied by the 7 stored
    assert not (np.unpackbits(T.KSIGNS).reshape(128, 8).sum(1) % 2).any()
    assert T.KVALUES_IQ4NL.tolist() == list(gq.IQ4_NL.kvalues) and T.KVALUES_IQ4NL.dtype == np.int8
    assert T.KVALUES_MXFP4.tolist() == list(gq.MXFP4.kvalues) and T.KVALUES_MXFP4.dtype == np.int8
    assert T.sign_table()[3].tolist() == [-1, -1, 1, 1, 1, 1, 1, 1]   # ksigns[3] = 0b00000011


def test_the_data_file_is_what_the_generator_makes_of_ggml_common_h():
    if not _HEADER.is_file() and "HEARTH_GGML_COMMON_H" in os.environ:   # ./dev test fetches it: a miss is a failure
        pytest.fail(f"HEARTH_GGML_COMMON_H names {_HEADER}, which is not a file")
    if not _HEADER.is_file():
        pytest.skip(f"no llama.cpp source at {_HEADER} (HEARTH_GGML_COMMON_H); gguf-py's copies checked above")
    parsed = T.parse_header(_HEADER.read_text())
    with np.load(T._FILE) as z:
        assert sorted(z.files) == sorted(parsed)
        for k, v in parsed.items():
            assert z[k].dtype == v.dtype and np.array_equal(z[k], v), k
