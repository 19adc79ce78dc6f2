"""Int8 tiles (engine/cpu/tiles_int8.py) and their products with many rows of 8-bit x
(engine/cpu/gemm_int8.py), the batch path of the K-quant matrices, against the numpy reference and
against the matrix-vector kernels of one row.

Tolerances: each row's product within 1e-5 of sum |w| |x8| of the float64 product of the reference
weights and the dequantized 8-bit x (the integer sums are exact; the tolerance covers the float32
scaling and accumulation), as the one-row kernels are held to (tests/test_cpu_kernels.py), and
within 1e-6 of the largest |product| of the one-row kernel's (the same integers, float32 sums in
another order).
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu import gemm_int8 as G8
from hearth.engine.cpu import simd
from hearth.engine.cpu import tiles_int8 as T8
from hearth.engine.cpu.linear import INT8_TILES_MAX_ROWS, MATVEC_MAX_ROWS, TILE8_ROWS, Activations, Linear
from hearth.engine.quants import TYPE_BY_NAME

from test_cpu_kernels import (F16_FIELDS, _int8_check, awkward_rows, check_int8_batch, check_spread_same_bits,
                              extreme_matrix, random_matrix)

K_QUANTS = [t for t in F16_FIELDS if t.endswith("_K")]
OTHERS = [t for t in F16_FIELDS if not t.endswith("_K")]


@pytest.mark.parametrize("name", K_QUANTS)
@pytest.mark.parametrize("n,rows", [(MATVEC_MAX_ROWS + 1, TILE8_ROWS + 5), (8, 3), (INT8_TILES_MAX_ROWS - 1, 2 * TILE8_ROWS)])
def test_tiled_int8_products_match_reference_and_one_row_kernel(name, n, rows):
    check_int8_batch(name, n, rows, 768)


@pytest.mark.parametrize("name", K_QUANTS)
@pytest.mark.parametrize("fill", [0x00, 0xFF, 0x80, 0x7F])
def test_tiled_int8_extreme_blocks(name, fill):
    """Every weight byte at an extreme times codes of +-127: the int16 pair sums of pmaddubsw and
    the tiles' scales at their bounds must not saturate or wrap."""
    rows, cols = 9, 512
    w, t = extreme_matrix(name, rows, cols, fill), TYPE_BY_NAME[name]
    x = np.stack([np.full(cols, 0.75, np.float32), np.where(np.arange(cols) % 3, -1.5, 2.0).astype(np.float32),
                  np.full(cols, -1.0, np.float32), np.where(np.arange(cols) % 2, 1.0, -1.0).astype(np.float32),
                  np.full(cols, 2.0, np.float32), np.arange(cols, dtype=np.float32) - cols / 2])
    lin = Linear(w, t, cols, name, int8=True)
    got = lin(Activations(x, int8=True))
    for i in range(len(x)):
        _int8_check(name, w, x[i], got[i])


@pytest.fixture(autouse=True)
def _no_vnni(monkeypatch):
    """These are the batch paths of CPUs without VNNI (engine/cpu/linear.py: vnni_tiles)."""
    monkeypatch.setenv("HEARTH_CPU_VNNI", "0")


@pytest.mark.parametrize("name", OTHERS)
def test_other_types_batches_stay_float(name):
    """Without VNNI the 32-weight types have no int8 tiles: their batches multiply float32 tiles by
    BLAS, with 8-bit x allowed or not (the same bits)."""
    cols = 512
    w = random_matrix(name, 40, cols, seed=2)
    x = awkward_rows(9, cols, 4)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    np.testing.assert_array_equal(lin(Activations(x, int8=True)), lin(Activations(x)))


def test_tiled_int8_spread_over_threads_gives_the_same_bits():
    check_spread_same_bits("Q4_K", 5 * TILE8_ROWS + 3)


@pytest.mark.parametrize("name", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_k_block_sums_equal_on_every_instruction_path(name, monkeypatch):
    """The K-quant product compiled here in fresh kernels for the generic vector IR (no AVX2), the
    AVX2 arrangement and, where the host has it, AVX-512 VNNI: the same bits on every path (the
    integer sums are exact), and the instructions each path is meant to use."""
    from numba import njit
    rows, cols, n = 11, 768, 3
    w = random_matrix(name, rows, cols, seed=7)
    x = awkward_rows(n, cols, 9)
    act = Activations(x, int8=True)
    q, d, _ = act.q8(True)
    codes, scv, dd, mw = T8.tile_arrays(rows, cols)
    getattr(T8, f"tile_{name.lower()}")(w, 0, rows, codes, scv, dd, mw)

    def run(fn) -> np.ndarray:
        out = np.empty((n, rows), np.float32)
        fn(codes, scv, dd, mw, rows, q, d, act.x_sums(), out, 0, np.float32(1.0))
        return out
    want = run(G8.gemm_k)
    host_avx2, host_vnni = simd.AVX2, simd.AVX512_VNNI
    for avx2, vnni in {(False, False), (host_avx2, False), (host_avx2, host_vnni)}:
        monkeypatch.setattr(simd, "AVX2", avx2)
        monkeypatch.setattr(simd, "AVX512_VNNI", vnni)
        fresh = njit(nogil=True)(G8.gemm_k.py_func)
        np.testing.assert_array_equal(run(fresh), want)
        asm = "\n".join(fresh.inspect_asm().values())
        assert ("pmaddubsw" in asm) == avx2
        # vpdpwssd where asked for; LLVM may also fuse multiplies and adds into it by itself where
        # the CPU has VNNI (it does for AMD Zen 5, even from the generic IR)
        assert ("vpdpwssd" in asm) >= (avx2 and vnni)
    for i in range(n):
        _int8_check(name, w, x[i], want[i])


@pytest.mark.parametrize("vnni", ["0", "1"])
def test_decoder_batches_use_int8_tiles_unless_switched_off(monkeypatch, reference_dir, vnni):
    """A prefill of Gemma 3 270M multiplies in int8 (its K-quant matrices' int8 tiles, or every
    quantized matrix's VNNI tiles) by default (describe says so, for the prefix-image keys), and in
    float32 BLAS tiles with HEARTH_CPU_INT8_BATCH=0; both agree as 8-bit x agrees with float32 x.
    Gemma 3 is the model most moved by 8-bit x (bench/README.md): on its first reference prompt, 8-bit
    against float32 batches measured a centered mean |dlogit| of at most 0.16 (VNNI tiles) and 0.14
    (int8 tiles), top-1 changes only where the top-2 gap is under 0.06."""
    import json

    from model_paths import gemma3_model_path

    from hearth.engine.config import ModelConfig
    from hearth.engine.cpu_backend import CpuBackend
    from hearth.engine.gguf import GGUFFile

    monkeypatch.setenv("HEARTH_CPU_VNNI", vnni)
    g = GGUFFile.open(gemma3_model_path())
    ref = json.loads((reference_dir / "gemma3" / "reference.json").read_text())
    ids = np.array(ref["prompts"][0]["ids"], np.int64)
    outs, kvs = {}, {}
    for flag in ("", "0"):
        monkeypatch.setenv("HEARTH_CPU_INT8_BATCH", flag)
        be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128)
        assert ("batch_x" in be.describe()) == (flag == "")
        outs[flag] = be.forward(ids, 0, all_logits=True)
        kvs[flag] = be.kv.k[3][:, :len(ids)].copy()
        be.close()
    a, b = outs[""], outs["0"]
    assert not np.array_equal(kvs[""], kvs["0"])            # the batch path really changed
    assert np.abs(kvs[""] - kvs["0"]).max() < 0.05 * np.abs(kvs["0"]).max()
    srt = np.sort(b, axis=-1)
    sure = srt[:, -1] - srt[:, -2] >= 0.5
    assert sure.sum() >= 3 and (a.argmax(-1) == b.argmax(-1))[sure].all()
    d = a.astype(np.float64) - b
    d -= d.mean(-1, keepdims=True)
    assert np.abs(d).mean(-1).max() <= 0.25


def test_int8_tiles_only_up_to_their_row_limit():
    """Above INT8_TILES_MAX_ROWS a K-quant batch multiplies float32 tiles by BLAS (measured faster
    for prefill chunks), with 8-bit x allowed or not; at the limit it is in int8."""
    cols = 512
    w = random_matrix("Q4_K", 40, cols, seed=6)
    lin = Linear(w, TYPE_BY_NAME["Q4_K"], cols, "Q4_K", int8=True)
    for n, tiled in ((INT8_TILES_MAX_ROWS, True), (INT8_TILES_MAX_ROWS + 1, False)):
        x = awkward_rows(n, cols, 8)
        got, flt = lin(Activations(x, int8=True)), lin(Activations(x))
        assert np.array_equal(got, flt) != tiled
        if tiled:
            for i in (0, n - 1):
                _int8_check("Q4_K", w, x[i], got[i])


@pytest.mark.parametrize("vnni", ["0", "1"])
def test_gemma3_chunked_prefill_with_int8_tiles_stays_near_one_pass(reference_dir, monkeypatch, vnni):
    """Gemma 3 270M's K-quant matrices multiply short inputs in int8 tiles, whose rows do not depend
    on the batch; its other matrices (Q5_0, Q8_0) multiply float32 tiles by BLAS, whose bits move
    with the batch's shape by float rounding, and 8-bit rounding in the next products makes more of
    that (a code of x moved by one step), as in llama.cpp between batch sizes. The first reference
    prompt (33 tokens) in chunks of 7 against one pass, measured: centered mean |dlogit| per position
    at most 0.13 (8-bit against float32 x: 0.15), max 0.87; bounds as for decode against prefill
    (tests/test_models_smollm2.py)."""
    import json

    from model_paths import gemma3_model_path

    from hearth.engine.config import ModelConfig
    from hearth.engine.cpu_backend import CpuBackend
    from hearth.engine.gguf import GGUFFile

    monkeypatch.setenv("HEARTH_CPU_VNNI", vnni)
    g = GGUFFile.open(gemma3_model_path())
    ref = json.loads((reference_dir / "gemma3" / "reference.json").read_text())
    ids = np.array(ref["prompts"][0]["ids"], np.int64)
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=True)
    whole = be.forward(ids, 0, all_logits=True)
    be.kv.clear()
    be.chunk = 7
    parts = be.forward(ids, 0, all_logits=True)
    be.close()
    d = parts.astype(np.float64) - whole
    d -= d.mean(-1, keepdims=True)
    assert np.abs(d).mean(-1).max() <= 0.25
    assert np.abs(parts - whole).max() <= 2.0
    srt = np.sort(whole, axis=-1)
    sure = srt[:, -1] - srt[:, -2] >= 0.5
    assert sure.sum() >= 3 and (parts.argmax(-1) == whole.argmax(-1))[sure].all()
