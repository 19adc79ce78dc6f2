"""engine/cpu/kernels_iq.py (through engine/cpu/linear.Linear, as the model uses it): the i-quants'
and MXFP4's CPU kernels against the numpy reference (engine.quants), with test_cpu_kernels.py's
tolerances: dequantized rows exactly the reference's float32 values; products with float32 x within
1e-5 of sum |w| |x| of the float64 product of the reference weights; products with 8-bit x (x
quantized as llama.cpp does: Q8_K for the 256-weight types, Q8_0 for IQ4_NL and MXFP4) within 1e-5
of sum |w| |x8| of the float64 product with the dequantized 8-bit x, and really another product
than the float one. Random blocks: random bytes with a sane float16 scale (MXFP4: an e8m0 byte near
2^0), and blocks with every other byte at an extreme.
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu import quant_activations as QA
from hearth.engine.cpu import kernels_iq as KQ
from hearth.engine.cpu.linear import Activations, Linear
from hearth.engine.quants import TYPE_BY_NAME, dequantize_blocks

IQ = sorted(KQ.TYPES)


def iq_matrix(name: str, rows: int, cols: int, seed: int = 0, fill: int | None = None) -> np.ndarray:
    """uint8 [rows, bytes per row]: random blocks (or every byte `fill`) with a valid scale."""
    rng = np.random.default_rng(seed)
    t = TYPE_BY_NAME[name]
    nb = rows * cols // t.block_size
    b = rng.integers(0, 256, (nb, t.type_size), dtype=np.uint8)
    if fill is not None:
        b[:] = fill
    if name == "MXFP4":
        b[:, 0] = rng.integers(120, 132, nb)    # 2^-8 .. 2^3
    else:
        scale = (rng.uniform(0.5, 1.5, nb) * rng.choice([-1, 1], nb) * 0.01).astype(np.float16)
        b[:, 0:2] = scale.view(np.uint8).reshape(nb, 2)
    return b.reshape(rows, -1)


def reference(name: str, w: np.ndarray) -> np.ndarray:
    t = TYPE_BY_NAME[name]
    return dequantize_blocks(w.reshape(-1, t.type_size), t).reshape(w.shape[0], -1)


def x8_of(name: str, x: np.ndarray) -> np.ndarray:
    q, d, _ = (QA.q8_k if name in KQ.Q8_K_TYPES else QA.q8_0)(x)
    return QA.dequantized(q, d)


def check_int8(name: str, w: np.ndarray, x: np.ndarray, got: np.ndarray) -> None:
    x8 = x8_of(name, x)
    ref = reference(name, w).astype(np.float64)
    want, bound = ref @ x8, np.abs(ref) @ np.abs(x8)
    assert np.all(np.abs(got - want) <= 1e-5 * bound + 1e-30)


def test_every_type_has_its_kernels():
    from hearth.engine.cpu.linear import KERNEL_TYPES
    assert KQ.TYPES == {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "MXFP4"}
    assert KQ.TYPES <= KERNEL_TYPES
    for name in KQ.TYPES:
        lin = Linear(iq_matrix(name, 1, 256), TYPE_BY_NAME[name], 256, name, int8=True)
        assert lin.int8 and lin.quantized


@pytest.mark.parametrize("name", IQ)
def test_dequantize_rows_equal_reference(name):
    rows, cols = 7, 512
    w = iq_matrix(name, rows, cols, seed=rows)
    out = np.full((rows, cols), np.nan, np.float32)
    Linear(w, TYPE_BY_NAME[name], cols, name).dequant(1, rows, out[1:])
    np.testing.assert_array_equal(out[1:].view(np.uint32), reference(name, w)[1:].view(np.uint32))


@pytest.mark.parametrize("name", IQ)
def test_matvec_float_and_int8_match_reference(name):
    rows, cols = 37, 768
    w = iq_matrix(name, rows, cols, seed=cols)
    x = np.random.default_rng(1).standard_normal((1, cols)).astype(np.float32) * 3
    x[0, 32:64] = 0.0
    ref = reference(name, w).astype(np.float64)
    exact, bound = ref @ x[0].astype(np.float64), np.abs(ref) @ np.abs(x[0].astype(np.float64))
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    got = lin(Activations(x))                        # float32 x
    assert got.shape == (1, rows) and got.dtype == np.float32
    assert np.all(np.abs(got[0] - exact) <= 1e-5 * bound + 1e-30)
    got8 = lin(Activations(x, int8=True))[0]         # 8-bit x
    check_int8(name, w, x[0], got8)
    assert np.abs(got8 - exact).max() > 1e-4 * bound.max()   # the 8-bit check has teeth
    lin.scale = 0.125
    np.testing.assert_allclose(lin(Activations(x, int8=True))[0], got8 * np.float32(0.125), rtol=1e-6)


@pytest.mark.parametrize("name", IQ)
@pytest.mark.parametrize("fill", [0x00, 0xFF])
def test_int8_matvec_extreme_blocks(name, fill):
    """Every byte but the scale at 0x00 or 0xFF (the largest grid indices, scales and sign patterns)
    times codes of +-127."""
    rows, cols = 5, 512
    w = iq_matrix(name, rows, cols, seed=fill, fill=fill)
    for x in (np.full(cols, 0.75, np.float32), np.where(np.arange(cols) % 3, -1.5, 2.0).astype(np.float32)):
        lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
        check_int8(name, w, x, lin(Activations(x[None, :], int8=True))[0])


@pytest.mark.parametrize("name", ["IQ2_XS", "MXFP4"])   # each compiles its kernels for 3 matrices
def test_stacked_matrices_equal_each_alone(name):
    cols = 512
    ws = [iq_matrix(name, r, cols, seed=r) for r in (40, 7, 13)]
    x = np.random.default_rng(4).standard_normal((1, cols)).astype(np.float32)
    t = TYPE_BY_NAME[name]
    for int8 in (False, True):
        stacked = Linear(ws, t, cols, name, int8=True)
        stacked.scales[0] = 0.5
        got = stacked(Activations(x, int8=int8))
        c = 0
        for i, w in enumerate(ws):
            alone = Linear(w, t, cols, name, int8=True)
            alone.scale = 0.5 if i == 0 else 1.0
            np.testing.assert_array_equal(got[:, c:c + w.shape[0]], alone(Activations(x, int8=int8)))
            c += w.shape[0]


# --- batches: VNNI tiles (engine/cpu/tiles_vnni_iq.py), on any CPU with HEARTH_CPU_VNNI=1 (generic
# vector IR where the CPU has no VNNI: the same integers) ------------------------------------------

def _cols(name: str) -> int:
    return 768 if name in KQ.Q8_K_TYPES else 672   # 672 = 64 x 10 + 32: the tiles' bytewise tail


@pytest.mark.parametrize("name", IQ)
@pytest.mark.parametrize("n,rows", [(5, 16), (8, 3), (13, 101)])
def test_vnni_batch_matches_reference_and_one_row_kernel(name, n, rows, monkeypatch):
    """Each row of x within the one-row kernels' bound of the reference, within 1e-6 of the largest
    product of the one-row kernel (the same integers, float32 sums in another order), and not the
    float32 product (really the 8-bit path); rows past a group of 16 padded."""
    monkeypatch.setenv("HEARTH_CPU_VNNI", "1")
    cols = _cols(name)
    w = iq_matrix(name, rows, cols, seed=rows + n)
    x = np.random.default_rng(n).standard_normal((n, cols)).astype(np.float32) * 2
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    assert lin._vnni
    got = lin(Activations(x, int8=True))
    assert got.shape == (n, rows) and got.dtype == np.float32
    for i in range(n):
        check_int8(name, w, x[i], got[i])
    one = np.stack([lin(Activations(x[i:i + 1], int8=True))[0] for i in range(n)])
    assert np.abs(got - one).max() <= 1e-6 * np.abs(one).max()
    flt = lin(Activations(x))
    assert np.abs(flt - got).max() > 1e-4 * np.abs(got).max()


@pytest.mark.parametrize("name", IQ)
@pytest.mark.parametrize("fill", [0x00, 0xFF])
def test_vnni_extreme_blocks(name, fill, monkeypatch):
    monkeypatch.setenv("HEARTH_CPU_VNNI", "1")
    rows, cols = 19, 512
    w = iq_matrix(name, rows, cols, seed=fill, fill=fill)
    x = np.stack([np.full(cols, 0.75, np.float32), np.where(np.arange(cols) % 3, -1.5, 2.0).astype(np.float32),
                  np.full(cols, -1.0, np.float32), np.arange(cols, dtype=np.float32) - cols / 2,
                  np.full(cols, 2.0, np.float32)])
    got = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)(Activations(x, int8=True))
    for i in range(len(x)):
        check_int8(name, w, x[i], got[i])


@pytest.mark.parametrize("name", ["IQ2_XS", "IQ4_XS", "IQ4_NL"])
def test_vnni_rows_product_does_not_depend_on_its_batch(name, monkeypatch):
    monkeypatch.setenv("HEARTH_CPU_VNNI", "1")
    cols = _cols(name)
    w = iq_matrix(name, 70, cols, seed=5)
    x = np.random.default_rng(3).standard_normal((11, cols)).astype(np.float32)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    whole = lin(Activations(x, int8=True))
    for a, b in ((0, 5), (6, 11), (3, 10)):
        np.testing.assert_array_equal(lin(Activations(x[a:b], int8=True)), whole[a:b])
    stacked = Linear([w[:40], w[40:]], TYPE_BY_NAME[name], cols, name, int8=True)
    np.testing.assert_array_equal(stacked(Activations(x, int8=True)), whole)


@pytest.mark.parametrize("name", ["IQ4_XS", "IQ2_S"])   # the codebook lookup; the 64-bit grid words
def test_int8_generic_ir_equals_x86_path(name, monkeypatch):
    """The codebook lookup (pshufb with AVX2, compares and selects in generic IR) and the products
    compiled here in a fresh kernel for each instruction path: the same bits as the default kernel,
    within the reference's bound; where the host has AVX2 the default kernel uses pshufb."""
    from numba import njit

    from hearth.engine.cpu import simd
    rows, cols = 21, 512
    w = iq_matrix(name, rows, cols, seed=3)
    x = np.random.default_rng(5).standard_normal(cols).astype(np.float32)
    q, d, s = (QA.q8_k if name in KQ.Q8_K_TYPES else QA.q8_0)(x)
    q = q.astype(np.int8)
    default = getattr(KQ, f"matvec8_{name.lower()}")
    ws, ones = (w,), np.ones(1, np.float32)
    want = np.empty(rows, np.float32)
    default(ws, q, d, s, want, ones)
    check_int8(name, w, x, want)
    x86 = simd.use_avx2()
    for avx2 in {False, x86}:
        monkeypatch.setattr(simd, "AVX2", avx2)
        fresh = njit(nogil=True)(default.py_func)
        got = np.empty(rows, np.float32)
        fresh(ws, q, d, s, got, ones)
        np.testing.assert_array_equal(got, want)
        if name != "IQ2_S":
            assert ("vpshufb" in "\n".join(fresh.inspect_asm().values())) == avx2
