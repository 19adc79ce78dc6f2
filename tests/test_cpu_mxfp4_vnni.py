"""MXFP4's one-vpdpbusd decode product (engine/cpu/kernels_mxfp4.py) against the pshufb / pmaddubsw
kernel (engine/cpu/kernels_iq.py's matvec8_mxfp4, itself tested against the numpy reference in
tests/test_cpu_kernels_iq.py): the same bits on random blocks, on blocks of extreme codes times x
codes of +-127 (the offset u = code + 12 and the -12 sum x start of each lane must cancel exactly),
on stacked matrices and row lengths of 1, 3 and 90 blocks; within the reference's bound; and the
generic vector IR (CPUs without VNNI) the same bits as the VNNI instruction."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu import kernels_iq as KQ
from hearth.engine.cpu import kernels_mxfp4 as KM
from hearth.engine.cpu import quant_activations as QA
from hearth.engine.cpu import simd_vnni as SV
from tests.test_cpu_kernels_iq import check_int8, iq_matrix


def _both(ws, x, kernel=KM.matvec8_mxfp4):
    q, d, s = QA.q8_0(x)
    q = q.astype(np.int8)
    n = sum(w.shape[0] for w in ws)
    scales = np.array([1.0, 0.5, 2.0][:len(ws)], np.float32)
    want, got = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    KQ.matvec8_mxfp4(ws, q, d, s, want, scales)
    kernel(ws, q, d, s, got, scales)
    return want, got


@pytest.mark.parametrize("cols", [32, 96, 2880])
def test_same_bits_as_the_pmaddubsw_kernel(cols):
    w = iq_matrix("MXFP4", 13, cols, seed=cols)
    x = np.random.default_rng(cols).standard_normal(cols).astype(np.float32) * 4
    want, got = _both((w,), x)
    np.testing.assert_array_equal(got, want)
    check_int8("MXFP4", w, x, got)
    stacked = (w[:5], iq_matrix("MXFP4", 7, cols, seed=1), w[5:])
    np.testing.assert_array_equal(*_both(stacked, x))


@pytest.mark.parametrize("fill", [0x00, 0x77, 0xFF])
def test_extreme_codes(fill):
    """Codes all 0, all +12 (0x77) or all -12 (0xFF), times x codes of +-127."""
    cols = 256
    w = iq_matrix("MXFP4", 4, cols, seed=fill, fill=fill)
    for x in (np.full(cols, 0.75, np.float32), np.where(np.arange(cols) % 3, -1.5, 2.0).astype(np.float32)):
        want, got = _both((w,), x)
        np.testing.assert_array_equal(got, want)
        check_int8("MXFP4", w, x, got)


def test_generic_ir_equals_the_vnni_instruction(monkeypatch):
    from numba import njit
    w = iq_matrix("MXFP4", 9, 320, seed=7)
    x = np.random.default_rng(7).standard_normal(320).astype(np.float32)
    # 0: generic IR; 8 (AVX-VNNI) and 16 (AVX-512 VNNI): the 256-bit vpdpbusd, which an AVX-512 VNNI
    # CPU runs for both
    for lanes in sorted({0, SV.LANES} | ({8} if SV.LANES == 16 else set())):
        monkeypatch.setattr(SV, "LANES", lanes)
        fresh = njit(nogil=True)(KM.matvec8_mxfp4.py_func)
        want, got = _both((w,), x, fresh)
        np.testing.assert_array_equal(got, want)
        assert ("vpdpbusd" in "\n".join(fresh.inspect_asm().values())) == bool(lanes)
