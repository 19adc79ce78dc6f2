"""engine/cpu/softmax.py: the attention softmax kernel against a float64 numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu.softmax import softmax_rows


@pytest.mark.parametrize("T", [1, 7, 8, 13, 64, 3786])
def test_softmax_rows_matches_float64_and_masked_positions_are_exactly_zero(T):
    rng = np.random.default_rng(T)
    s = (rng.standard_normal((9, T)) * 6).astype(np.float32)
    s[0] *= 40                                      # scores far apart: most exp underflow to 0
    if T > 1:
        s[1:, T // 2:] = np.where(rng.random((8, T - T // 2)) < 0.5, -np.inf, s[1:, T // 2:])
    ref = s.astype(np.float64)
    ref = np.exp(ref - ref.max(axis=-1, keepdims=True))
    out, sums = s.copy(), np.full(9, np.nan, np.float32)
    softmax_rows(out, sums)
    big = ref > 1e-30
    assert np.all(np.abs(out - ref)[big] <= 4e-6 * ref[big])
    assert np.all(out[~big] <= 1e-30) and np.all(out[np.isneginf(s)] == 0.0)
    np.testing.assert_allclose(sums, ref.sum(axis=-1), rtol=1e-5)
    assert np.all(out.max(axis=-1) == 1.0)         # each row's max gives exp(0), exactly
