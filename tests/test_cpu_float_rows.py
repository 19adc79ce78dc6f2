"""The float matrices' one-row products (engine/cpu/kernels.py's row_f32 / row_f16 / row_bf16, also
the compiled layers') on row lengths (multiples of 32, as engine/cpu/linear.py takes them) whose
16-value steps do not fill the kernel's 64-value main loop, so that its last steps run too: within
1e-5 of sum |w| |x| of the float64 product of the reference weights (tests/test_cpu_kernels.py's
tolerance), and each weight read exactly once (a one-hot x reads back its column)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu.linear import Activations, Linear
from hearth.engine.quants import TYPE_BY_NAME
from tests.test_cpu_kernels import random_matrix, reference


@pytest.mark.parametrize("name", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("cols", [32, 96, 160, 1056])
def test_float_rows_with_a_tail_match_the_reference(name, cols):
    rows = 9
    w = random_matrix(name, rows, cols, seed=cols)
    x = np.random.default_rng(cols).standard_normal((1, cols)).astype(np.float32)
    got = Linear(w, TYPE_BY_NAME[name], cols, name)(Activations(x))
    ref = reference(name, w).astype(np.float64)
    want = ref @ x[0].astype(np.float64)
    bound = np.abs(ref) @ np.abs(x[0].astype(np.float64))
    assert np.all(np.abs(got[0] - want) <= 1e-5 * bound + 1e-30)


@pytest.mark.parametrize("name", ["F16", "BF16"])
def test_every_value_of_a_row_counts(name):
    """A one-hot x at each position of a 224-value row (three full 64-value steps, two 16-value ones)
    reads back that weight: no step is skipped or read twice."""
    cols = 224
    w = random_matrix(name, 4, cols, seed=3)
    ref = reference(name, w)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name)
    for j in range(cols):
        x = np.zeros((1, cols), np.float32)
        x[0, j] = 1.0
        np.testing.assert_array_equal(lin(Activations(x))[0], ref[:, j])
