"""The i-quants and MXFP4 on the GPU (engine/wgsl/quant.wgsl `_deq8`, `_dq8`, `_iq8`; grids in
the table buffer of gpu/iq_grids.py): their codebook constants and table words equal
engine/quants/tables.py's; the prefill matmul,
the embedding, and decode matvecs with f32 and int8 x (mixed with K-quants in one kernel, the
64-weight-chunk fallback included) against float64 references on gguf-py's dequantization; weights
uploaded in their blocks. The per-type matvec, int8, f16 and int8-prefill checks of every GPU type
(test_gpu_kernels.py, test_gpu_int8.py, test_gpu_matmul16.py, test_gpu_matmul8.py) cover these types
too. Runs on lavapipe in CI."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hearth.engine.quants import tables as QT
from hearth.engine.gpu import probe
from hearth.engine.gpu.shaders import source

GPU_IQ = ["IQ4_NL", "IQ4_XS", "MXFP4", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S"]
SUPER = {"IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S"}     # blocks of 256 weights


def _const_words(name: str) -> np.ndarray:
    m = re.search(rf"const {name} = vec4<u32>\(([^)]*)\);", source("quant.wgsl"))
    return np.array([int(v.strip().rstrip("u"), 16) for v in m.group(1).split(",")], "<u4")


def test_codebook_constants_equal_the_tables():
    assert np.array_equal(_const_words("KV_IQ4").view(np.int8), QT.KVALUES_IQ4NL)
    assert np.array_equal(_const_words("KV_FP4").view(np.int8), QT.KVALUES_MXFP4)


def test_table_offsets_and_words_equal_the_tables():
    """quant.wgsl's offsets into `iq_tab` are gpu/iq_grids.py's, and the words there are the grids
    of engine/quants/tables.py (byte i of a word = value i) and the IQ4 pairs."""
    from hearth.engine.gpu import iq_grids
    text = source("quant.wgsl")
    assert iq_grids.DECLARATION in text
    words, offsets = iq_grids.layout()
    for name, o in offsets.items():
        assert int(re.search(rf"const {name}: u32 = (\d+)u;", text).group(1)) == o, name
    for name, grid in iq_grids.GRIDS:
        o = offsets[name]
        got = words[o:o + grid.size // 4].view(np.uint8).reshape(grid.shape)
        assert np.array_equal(got, grid), name
    pairs = words[offsets["IQ4_PAIRS"]:]
    assert pairs.size == 256
    kv = QT.KVALUES_IQ4NL
    b = np.arange(256)
    assert np.array_equal((pairs & 255).astype(np.uint8).view(np.int8), kv[b & 15])
    assert np.array_equal(((pairs >> 16) & 255).astype(np.uint8).view(np.int8), kv[b >> 4])
    assert not (pairs & 0xFF00FF00).any()


if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.gpu import ops  # noqa: E402
from hearth.engine.gpu.kernels import dispatch_once  # noqa: E402
from gpu_fixtures import (  # noqa: E402, F401 (rng: a fixture)
    RTOL, dequant_reference, kernels_fixture, poisoned, random_rows, read_f32, rel_err, rng, safe_x)
from test_gpu_int8 import check_concat_with_norm_and_bias  # noqa: E402

pytestmark = pytest.mark.gpu


ks = kernels_fixture()


def test_every_iquant_has_kernels():
    """The library's "runs" (engine/library/support.py reads quants.SUPPORTED_TYPES) holds on the GPU
    too: every type it accepts but BF16 (an F16 copy) and Q8_K (no file stores it) is read in its blocks."""
    from hearth.engine.quants import SUPPORTED_TYPES
    assert set(SUPPORTED_TYPES) - set(ops.GPU_TYPES) <= {"BF16", "Q8_K"}
    assert set(GPU_IQ) <= set(ops.GPU_TYPES) and set(GPU_IQ) <= set(ops.INT8_TYPES)
    assert set(GPU_IQ) - {"MXFP4"} <= set(ops.INT8_MM_TYPES)


def test_kernels_of_grid_types_bind_the_tables(ks):
    """A kernel reading an IQ2 / IQ3 type declares the table binding (Kernels adds it to the layout,
    Plan binds the device's buffer); the other kernels have no such binding."""
    assert ops.matvec(ks, ["Q4_K", "IQ2_XS"]).tables
    assert ops.embed(ks, "IQ3_S").tables and ops.matmul(ks, ["IQ2_XXS"]).tables
    assert not ops.matvec(ks, ["Q4_K", "IQ4_NL", "MXFP4"]).tables and not ops.embed(ks, "Q8_0").tables


@pytest.mark.parametrize("qtype", GPU_IQ)
def test_matmul_and_embedding(ks, rng, qtype):
    """The prefill product within RTOL of float64 on gguf-py's weights; the embedding (a row's
    dequantization) equal to gguf-py's float32 bit for bit."""
    dev = ks.dev
    k, m, n = 768, 71, 37                  # 3 blocks of 256 a row, odd row and token counts
    raw = random_rows(rng, qtype, m, k)
    w = dequant_reference(raw, qtype, k)
    x = rng.standard_normal((n, k)).astype(np.float32)
    y = poisoned(dev, n * m)
    dispatch_once(dev, ops.matmul(ks, [qtype]), [dev.upload(x), y, dev.upload(raw)], ops.matmul_groups(m, n),
                  **ops.matmul_params([qtype], k, m, n, ldy=m))
    assert rel_err(read_f32(dev, y, n * m).reshape(n, m), x.astype(np.float64) @ w.T) < RTOL
    ids = rng.integers(0, m, 5).astype(np.uint32)
    e = poisoned(dev, 5 * k)
    dispatch_once(dev, ops.embed(ks, qtype), [dev.upload(ids), e, dev.upload(raw)], ops.rows_groups(5),
                  d=k, row_bytes=ops.row_bytes(qtype, k), scale=1.0, n=5)
    # the embedding is the dequantization itself: bit for bit gguf-py's float32 values
    np.testing.assert_array_equal(read_f32(dev, e, 5 * k).reshape(5, k), w[ids])


@pytest.mark.parametrize("layout", [(32, 1), (64, 2, 2)])
@pytest.mark.parametrize("types", [("IQ4_XS", "IQ4_NL", "MXFP4"), ("Q4_K", "IQ4_XS", "MXFP4"),
                                   ("IQ2_XXS", "IQ2_XS", "IQ2_S"), ("Q4_K", "IQ3_XXS", "IQ3_S")])
@pytest.mark.parametrize("k", [736, 4096])      # 736: rows of an odd count of MXFP4 / IQ4_NL blocks
def test_int8_concat_with_norm_and_bias(ks, rng, layout, types, k):
    if not ks.dev.int8:
        pytest.skip("the adapter has no 4-way int8 dot products")
    if k % 256 and SUPER & set(types):
        k = 768
    rpw = ops.matvec_rows(layout)
    check_concat_with_norm_and_bias(ks, rng, layout, list(types), k, [rpw, rpw, rpw + 3])


@pytest.mark.parametrize("qtype", GPU_IQ)
def test_f32_matvec_odd_block_count(ks, rng, qtype):
    """Rows of 23 blocks of 32 (MXFP4: 391 bytes a row, so rows start at every byte alignment)."""
    dev = ks.dev
    k = 768 if qtype in SUPER else 736
    m = 29
    raw = random_rows(rng, qtype, m, k)
    x = rng.standard_normal(k).astype(np.float32)
    y = poisoned(dev, m)
    dispatch_once(dev, ops.matvec(ks, [qtype]), [dev.upload(x), y, dev.upload(raw)], ops.matvec_groups(m),
                  **ops.matvec_params([qtype], k, [m]))
    assert rel_err(read_f32(dev, y, m), dequant_reference(raw, qtype, k) @ x) < RTOL


def test_weights_upload_blocks_and_other_types_an_f16_copy(ks, rng, tmp_path):
    """Every i-quant is uploaded as its file's blocks (GPU memory = the tensor's bytes + 4 of padding,
    rounded up to 16 as buffers are sized);
    a type with no kernel (BF16) still becomes an F16 copy."""
    import gguf

    from hearth.engine.gguf import GGUFFile
    from hearth.engine.gpu.weights import GpuWeights
    k, m = 256, 4
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for qtype in GPU_IQ:
        w.add_tensor(f"{qtype}.weight", random_rows(rng, qtype, m, k), raw_dtype=gguf.GGMLQuantizationType[qtype])
    bf16 = (rng.standard_normal((m, k)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("BF16.weight", bf16.view(np.uint8), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    g = GGUFFile.open(path)
    gw = GpuWeights(ks.dev, g)
    for qtype in GPU_IQ:
        before = gw.nbytes
        assert gw.matrix(f"{qtype}.weight", m, k).qtype == qtype
        assert gw.nbytes - before <= -(-(ops.row_bytes(qtype, k) * m + 4) // 16) * 16
    assert gw.matrix("BF16.weight", m, k).qtype == "F16"
    assert gw.fallbacks == ["BF16.weight (BF16 -> F16)"]
    gw.destroy()
    g.close()
