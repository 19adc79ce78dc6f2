"""VNNI tiles (engine/cpu/tiles_vnni.py) and their products with many rows of 8-bit x
(engine/cpu/gemm_vnni.py), the batch path of every quantized type on CPUs with VNNI, against the numpy
reference, the one-row kernels and themselves on every instruction path.

HEARTH_CPU_VNNI=1 makes Linear use the tiles on any CPU (generic vector IR where the CPU has no VNNI:
the same integers, so the same bits), so these tests check the same code on every machine.
Tolerances are those of the one-row 8-bit kernels (tests/test_cpu_kernels.py's _int8_check: within
1e-5 of sum |w| |x8| of the float64 product; the integer sums are exact, the tolerance covers the
float32 scaling and accumulation), and within 1e-6 of the largest |product| of the one-row kernel's
(the same integers, float32 sums in another order).
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu import gemm_vnni as GV
from hearth.engine.cpu import simd_vnni
from hearth.engine.cpu import tiles_vnni as TV
from hearth.engine.cpu.linear import MATVEC_MAX_ROWS, Activations, Linear, vnni_tiles
from hearth.engine.quants import TYPE_BY_NAME

from test_cpu_kernels import (F16_FIELDS, _int8_check, awkward_rows, check_int8_batch, check_spread_same_bits,
                              extreme_matrix, random_matrix)

QUANTS = list(F16_FIELDS)


@pytest.fixture(autouse=True)
def _vnni_on(monkeypatch):
    monkeypatch.setenv("HEARTH_CPU_VNNI", "1")


def _cols(name: str) -> int:
    return 768 if name.endswith("_K") else 672   # 672 = 64 x 10 + 32: the tiles' bytewise tail


def test_the_switch_and_the_default():
    assert vnni_tiles()
    import os
    os.environ["HEARTH_CPU_VNNI"] = "0"
    assert not vnni_tiles()
    os.environ["HEARTH_CPU_VNNI"] = ""
    assert vnni_tiles() == (simd_vnni.lanes() != 0)


@pytest.mark.parametrize("name", QUANTS)
@pytest.mark.parametrize("n,rows", [(MATVEC_MAX_ROWS + 1, 16), (8, 3), (13, GV.SUB + 37), (40, 2 * GV.SUB),
                                    (GV.NX, 5)])
def test_vnni_products_match_reference_and_one_row_kernel(name, n, rows):
    check_int8_batch(name, n, rows, _cols(name))


@pytest.mark.parametrize("name", QUANTS)
@pytest.mark.parametrize("fill", [0x00, 0xFF, 0x80, 0x7F])
def test_vnni_extreme_blocks(name, fill):
    """Every weight byte at an extreme times codes of +-127: the int32 sums at their bounds (Q8_0's
    codes as q + 128 up to 255, Q6_K's chunk sums times int8 scales) must not wrap."""
    rows, cols = 19, 512
    w, t = extreme_matrix(name, rows, cols, fill), TYPE_BY_NAME[name]
    x = np.stack([np.full(cols, 0.75, np.float32), np.where(np.arange(cols) % 3, -1.5, 2.0).astype(np.float32),
                  np.full(cols, -1.0, np.float32), np.where(np.arange(cols) % 2, 1.0, -1.0).astype(np.float32),
                  np.full(cols, 2.0, np.float32), np.arange(cols, dtype=np.float32) - cols / 2])
    got = Linear(w, t, cols, name, int8=True)(Activations(x, int8=True))
    for i in range(len(x)):
        _int8_check(name, w, x[i], got[i])


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q4_1", "Q8_0"])
def test_a_rows_product_does_not_depend_on_its_batch(name):
    """Rows of x in steps of GV.NX, the last step overlapping the one before: each row's bits are the
    same alone in a small batch, at any place in a larger one, and with stacked matrices' outputs."""
    cols = _cols(name)
    w = random_matrix(name, 70, cols, seed=5)
    x = awkward_rows(11, cols, 3)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    whole = lin(Activations(x, int8=True))
    for a, b in ((0, 5), (6, 11), (3, 10), (2, 7)):
        np.testing.assert_array_equal(lin(Activations(x[a:b], int8=True)), whole[a:b])
    stacked = Linear([w[:40], w[40:]], TYPE_BY_NAME[name], cols, name, int8=True)
    np.testing.assert_array_equal(stacked(Activations(x, int8=True)), whole)


def test_spread_over_threads_gives_the_same_bits():
    check_spread_same_bits("Q5_K", 5 * GV.SUB + 3)


def test_output_with_a_row_stride_and_scale():
    cols = 512
    w = random_matrix("Q4_0", 48, cols, seed=2)
    x = awkward_rows(7, cols, 1)
    lin = Linear(w, TYPE_BY_NAME["Q4_0"], cols, "Q4_0", int8=True)
    want = lin(Activations(x, int8=True))
    lin.scale = 0.5
    big = np.full((7, 100), np.nan, np.float32)
    lin(Activations(x, int8=True), out=big[:, 10:58])
    np.testing.assert_array_equal(big[:, 10:58], want * np.float32(0.5))
    assert np.isnan(big[:, :10]).all() and np.isnan(big[:, 58:]).all()


def _tile_of(name: str, w: np.ndarray, cols: int):
    code, sc, mo, d, e, gb = TV.regions(name, cols)
    groups = (w.shape[0] + 15) // 16
    tile = np.zeros((groups + groups % 2) * gb, np.uint8)
    rows16 = np.empty(16 * cols, np.uint8)
    getattr(TV, f"tile_{name.lower()}")(w, 0, w.shape[0], tile, rows16, cols, sc, mo, d, e, gb)
    return tile, groups, (code, sc, mo, d, e, gb)


def test_tile_layout_interleaves_16_rows_by_4_bytes():
    """Step k of a group holds weights 4k..4k+3 of each row: the codes of Q8_0 (its bytes + 128) read
    back in row order; a padded row's scale is zero."""
    cols = 640
    w = random_matrix("Q8_0", 21, cols, seed=4)
    tile, groups, (code, _, _, d, _, gb) = _tile_of("Q8_0", w, cols)
    blocks = w.reshape(21, -1, 34)
    q = blocks[:, :, 2:].reshape(21, cols).view(np.int8).astype(np.int16) + 128
    for g in range(groups):
        codes = tile[g * gb + code:g * gb + code + 16 * cols].reshape(cols // 4, 16, 4)
        rows = codes.transpose(1, 0, 2).reshape(16, cols)
        real = min(16, 21 - 16 * g)
        np.testing.assert_array_equal(rows[:real], q[16 * g:16 * g + real])
        assert (rows[real:] == 0).all()
        dd = tile[g * gb + d:g * gb + d + 64 * (cols // 32)].view(np.float32).reshape(-1, 16)
        scales = blocks[16 * g:16 * g + real, :, :2].copy().view(np.float16)[..., 0]
        np.testing.assert_array_equal(dd[:, :real].T, scales)
        assert (dd[:, real:] == 0).all()


@pytest.mark.parametrize("name", ["Q4_K", "Q2_K", "Q3_K", "Q6_K", "Q5_0", "Q4_1", "Q8_0"])
def test_every_instruction_path_gives_the_same_bits(name, monkeypatch):
    """The products compiled here in fresh kernels for the generic vector IR, AVX-VNNI (two 32-byte
    halves) and AVX-512 VNNI, those the host has: the same bits (exact integers), and the instructions
    each is meant to use."""
    from numba import njit
    cols, n = _cols(name), 7
    w = random_matrix(name, 40, cols, seed=9)
    x = awkward_rows(n, cols, 2)
    q, d, xc = Activations(x, int8=True).vnni_x(name)
    tile, groups, (code, sc, mo, dd, e, gb) = _tile_of(name, w, cols)
    fam = GV.FAMILY[name]

    def run(fn) -> np.ndarray:
        out = np.empty((n, 40), np.float32)
        fn(tile, groups, gb, code, sc, mo, dd, e, q, d, xc, out, 0, 40, np.float32(1.0))
        return out
    want = run(fam)
    host = simd_vnni.LANES
    for lanes in sorted({0, 8, host} if host else {0}):
        monkeypatch.setattr(simd_vnni, "LANES", lanes)
        fresh = njit(nogil=True)(fam.py_func)
        np.testing.assert_array_equal(run(fresh), want)
        asm = "\n".join(fresh.inspect_asm().values())
        dots = [line.split(",")[-1].strip() for line in asm.splitlines() if "vpdpbusd" in line]
        assert bool(dots) == (lanes != 0)
        assert all(r.startswith({8: "%ymm", 16: "%zmm"}.get(lanes, "")) for r in dots)
    _int8_check(name, w, x[0], want[0])


def test_x_sums_for_each_family():
    """What each family reads of x's code sums (Activations.vnni_x), against numpy."""
    cols = 512
    x = awkward_rows(3, cols, 6)
    act = Activations(x, int8=True)
    qk, _, bs16 = act.q8(True)
    q0, _, s = act.q8(False)
    codes16 = qk.astype(np.int64).reshape(3, -1, 16).sum(-1)
    np.testing.assert_array_equal(bs16, codes16)
    _, _, k4 = act.vnni_x("Q4_K")
    sums32 = qk.astype(np.int64).reshape(3, -1, 32).sum(-1)
    np.testing.assert_array_equal(k4.view(np.int16).reshape(3, -1), sums32)
    _, _, k2 = act.vnni_x("Q2_K")
    np.testing.assert_array_equal(k2.view(np.int16).reshape(3, -1), codes16)
    _, _, k6 = act.vnni_x("Q6_K")
    np.testing.assert_array_equal(k6, codes16)
    _, _, o = act.vnni_x("Q8_0")
    np.testing.assert_array_equal(o, q0.astype(np.int64).reshape(3, -1, 32).sum(-1))
    _, _, m = act.vnni_x("Q4_1")
    assert m is s
