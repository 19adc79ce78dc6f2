"""MXFP4 in groups of 8 rows (engine/cpu/mxfp4_x8.py, kernels_mxfp4_x8.py, linear_x8.py).

The repack moves the file's bytes: the compiled repack gives the numpy reference's bytes, and the
repacked matrix dequantizes to the file's weights exactly. The decode kernel computes every block's
int32 sum exactly and differs from the row kernel (kernels_mxfp4) only in the order of its float32
sums (per block one float term a row here, eight there), so it is checked against the float64
reference within the recursive-summation bound of float32:
    |y - y64| <= (nb + 8) * 2^-24 * sum_b |term_b|          (nb float32 additions and the scale's
                                                              and conversions' roundings per term)
and against the row kernel within twice that. The VNNI tiles read from the groups are the row
layout's tiles, so prefill products are the row layout's to the bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu import kernels_mxfp4 as KM
from hearth.engine.cpu import kernels_mxfp4_x8 as KX
from hearth.engine.cpu import mxfp4_x8 as X8
from hearth.engine.cpu import quant_activations as QA
from hearth.engine.cpu import simd_vnni as SV
from hearth.engine.cpu.linear import Activations, Linear
from hearth.engine.cpu.linear_x8 import LinearX8
from hearth.engine.quants import TYPE_BY_NAME
from tests.test_cpu_kernels_iq import iq_matrix, reference

MXFP4 = TYPE_BY_NAME["MXFP4"]
EPS32 = 2.0 ** -24


def _x8(raw):
    out = np.empty(X8.repacked_shape(raw.shape[0], raw.shape[1] // 17 * 32), np.uint8)
    X8.repack(raw, out)
    return out


def _q8(x):
    q, d, s = QA.q8_0(x)
    return q.astype(np.int8), d, s


def _check_bound(got, x8, q, d, factor=1.0):
    want, mag = X8.reference_product(x8, q, d)
    nb = x8.shape[1] // X8.GROUP_BLOCK
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= factor * (nb + 8) * EPS32 * mag + 1e-37), err.max()


@pytest.mark.parametrize("rows,cols", [(8, 32), (16, 96), (24, 2880)])
def test_repack_equals_numpy_and_keeps_the_weights(rows, cols):
    raw = iq_matrix("MXFP4", rows, cols, seed=cols)
    x8 = _x8(raw)
    np.testing.assert_array_equal(x8, X8.repack_numpy(raw))
    assert x8.nbytes == raw.nbytes
    np.testing.assert_array_equal(X8.dequant(x8).view(np.uint32), reference("MXFP4", raw).view(np.uint32))
    out = np.full((rows - 3, cols), np.nan, np.float32)
    KX.dequant_mxfp4_x8(x8, 3, rows, out)
    np.testing.assert_array_equal(out.view(np.uint32), reference("MXFP4", raw)[3:].view(np.uint32))


def test_repack_layout_by_hand():
    """Row 5's code 8c + i in chunk c byte 20 + i's low nibble, code 8c + 4 + i in its high one."""
    raw = np.zeros((8, 17), np.uint8)
    raw[:, 0] = np.arange(8) + 100
    raw[5, 1 + 9] = 0x3A          # code 9 = 0xA (chunk 1, i = 1, low), code 25 = 0x3 (chunk 3, i = 1, low)
    raw[5, 1 + 13] = 0x70         # code 29 = 0x7 (chunk 3, i = 1, high)
    x8 = X8.repack_numpy(raw)[0]
    want = np.zeros(136, np.uint8)
    want[:8] = np.arange(8) + 100
    want[8 + 32 * 1 + 20 + 1] = 0x0A
    want[8 + 32 * 3 + 20 + 1] = 0x73
    np.testing.assert_array_equal(x8, want)


@pytest.mark.parametrize("cols", [32, 96, 2880])
def test_decode_within_the_float_bound(cols):
    raw = iq_matrix("MXFP4", 40, cols, seed=cols + 1)
    x8 = _x8(raw)
    x = np.random.default_rng(cols).standard_normal(cols).astype(np.float32) * 4
    q, d, s = _q8(x)
    got = np.full(40, np.nan, np.float32)
    KX.matvec8_mxfp4_x8((x8,), q, d, s, got, np.ones(1, np.float32))
    _check_bound(got, x8, q, d)
    row = np.full(40, np.nan, np.float32)
    KM.matvec8_mxfp4((raw,), q, d, s, row, np.ones(1, np.float32))
    want, mag = X8.reference_product(x8, q, d)
    assert np.all(np.abs(got.astype(np.float64) - row) <= 2 * (cols // 32 + 8) * EPS32 * mag + 1e-37)
    # stacked matrices with their scales
    other = _x8(iq_matrix("MXFP4", 16, cols, seed=3))
    out = np.full(56, np.nan, np.float32)
    KX.matvec8_mxfp4_x8((x8, other), q, d, s, out, np.array([0.5, 2.0], np.float32))
    np.testing.assert_array_equal(out[:40], got * np.float32(0.5))
    _check_bound(out[40:] / 2, other, q, d)


@pytest.mark.parametrize("fill", [0x00, 0x77, 0xFF])
def test_extreme_codes(fill):
    """Codes all 0, all +12 (0x77) or all -12 (0xFF), times x codes of +-127: the +12 offset of u and
    the -12 sum x start of each block cancel exactly."""
    cols = 256
    raw = iq_matrix("MXFP4", 8, cols, seed=fill, fill=fill)
    x8 = _x8(raw)
    for x in (np.full(cols, 0.75, np.float32), np.where(np.arange(cols) % 3, -1.5, 2.0).astype(np.float32)):
        q, d, s = _q8(x)
        got = np.full(8, np.nan, np.float32)
        KX.matvec8_mxfp4_x8((x8,), q, d, s, got, np.ones(1, np.float32))
        _check_bound(got, x8, q, d)


def test_every_scale_byte():
    """Scales made in the register ((e << 23) as float, e = 0 apart) equal kernels_iq._E8M0 for every
    e: one block a row, so the float sum has one term and must equal the float64 product rounded."""
    raw = iq_matrix("MXFP4", 256, 32, seed=5)
    raw[:, 0] = np.arange(256)
    x8 = _x8(raw)
    x = np.random.default_rng(5).standard_normal(32).astype(np.float32)
    q, d, s = _q8(x)
    got = np.full(256, np.nan, np.float32)
    KX.matvec8_mxfp4_x8((x8,), q, d, s, got, np.ones(1, np.float32))
    codes, sc = X8.codes_and_scales(x8)
    t = (codes.astype(np.int64) * q).sum(-1).astype(np.float32)
    with np.errstate(over="ignore"):         # e near 255 overflows to inf, as in the kernel
        want = t * (sc[:, 0] * d[0])         # float(t) * (E8M0[e] * xd), each rounded to float32
    np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))


def test_generic_ir_equals_the_vnni_instruction(monkeypatch):
    from numba import njit
    raw = iq_matrix("MXFP4", 24, 320, seed=7)
    x8 = _x8(raw)
    q, d, s = _q8(np.random.default_rng(7).standard_normal(320).astype(np.float32))
    want = np.full(24, np.nan, np.float32)
    KX.matvec8_mxfp4_x8((x8,), q, d, s, want, np.ones(1, np.float32))
    for lanes in sorted({0, SV.LANES} | ({8} if SV.LANES == 16 else set())):
        monkeypatch.setattr(SV, "LANES", lanes)
        fresh = njit(nogil=True)(KX.matvec8_mxfp4_x8.py_func)
        got = np.full(24, np.nan, np.float32)
        fresh((x8,), q, d, s, got, np.ones(1, np.float32))
        np.testing.assert_array_equal(got, want)
        assert ("vpdpbusd" in "\n".join(fresh.inspect_asm().values())) == bool(lanes)


@pytest.mark.parametrize("n", [1, 3, 8, 37])
def test_linear_x8_against_the_row_layout(n, monkeypatch):
    """LinearX8 (gate and up side by side) against Linear on the file's rows: batches through the
    VNNI tiles to the bit (where VNNI tiles run), one to four rows within the decode bound, float32 x
    to float rounding."""
    monkeypatch.setenv("HEARTH_CPU_VNNI", "1")
    rows, cols = 48, 2880
    gate, up = iq_matrix("MXFP4", rows, cols, seed=11), iq_matrix("MXFP4", rows, cols, seed=12)
    old = Linear([gate, up], MXFP4, cols, "gu", int8=True)
    new = LinearX8([_x8(gate), _x8(up)], MXFP4, cols, "gu", int8=True)
    assert new.n_out == old.n_out == 2 * rows and new.nbytes == old.nbytes
    x = np.random.default_rng(n).standard_normal((n, cols)).astype(np.float32)
    got, want = new(Activations(x, True)), old(Activations(x, True))
    if n > 4:
        np.testing.assert_array_equal(got, want)
    else:
        q, d, _ = Activations(x, True).q8(False)
        for i in range(n):
            for part, w in ((slice(0, rows), gate), (slice(rows, 2 * rows), up)):
                _check_bound(got[i, part], _x8(w), q[i], d[i])
    fx = Activations(x, False)
    np.testing.assert_allclose(new(fx), old(fx), rtol=2e-5, atol=2e-4 * np.abs(x).max())


def test_rejects_other_shapes():
    with pytest.raises(ValueError, match="repacked rows"):
        LinearX8([np.zeros((1, 17), np.uint8)], MXFP4, 32)
    assert X8.applies(16, 64) and not X8.applies(12, 64) and not X8.applies(16, 48)
