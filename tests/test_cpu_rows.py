"""The compiled one-token element-wise kernels (engine/cpu/rows.py) against numpy: RMSNorm against
a float64 reference (float32 rounding: 2e-6 relative), RoPE against the numpy rotation that
multi-row inputs take (the same float32 operations: equal to 1 ulp)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu.rows import rms_norm_rows, rope_rows
from hearth.engine.models.layers import Rope, rms_norm


@pytest.mark.parametrize("rw", [1, 5])
def test_rms_norm_rows(rw):
    rng = np.random.default_rng(rw)
    x = (rng.standard_normal((5, 96)) * 4).astype(np.float32)
    w = rng.standard_normal((rw, 96)).astype(np.float32)
    got = rms_norm_rows(x, w, 1e-5)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    # the decode branch of layers.rms_norm: one token, one weight row or one per head
    one = rms_norm(x[None, :1], w[0], 1e-5)
    np.testing.assert_array_equal(one[0], got[:1])
    heads = rms_norm(x[None], w, 1e-5)[0]
    np.testing.assert_allclose(heads, want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("n_rot", [64, 32])
def test_rope_rows_equal_numpy(neox, n_rot):
    rope = Rope(n_rot, 10000.0, neox)
    x = np.random.default_rng(0).standard_normal((2, 6, 64)).astype(np.float32)
    c, s = rope.cos_sin(37, 2)
    c[1], s[1] = c[0], s[0]                    # both rows at position 37
    want = x.copy()
    rope.apply(want, (c, s))                   # two rows: numpy
    got = x[:1].copy()
    rope.apply(got, (c[:1], s[:1]))            # one row: compiled
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=2e-7 * np.abs(x).max())
    assert not np.array_equal(got[0], x[0])    # it did rotate
    if n_rot < 64:
        np.testing.assert_array_equal(got[0, :, n_rot:], x[0, :, n_rot:])   # past n_rot: untouched
    direct = x[0].copy()
    rope_rows(direct, c[0, 0], s[0, 0], n_rot, neox)
    np.testing.assert_array_equal(direct, got[0])
