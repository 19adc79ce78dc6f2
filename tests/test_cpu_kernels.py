"""The compiled CPU kernels against the numpy reference (engine.quants) for every weight type.

Random blocks (random bytes, sane float16 scales), odd row counts. Tolerances:
- dequantization: exactly the reference's float32 values;
- matrix-vector products: within 1e-5 of sum |w| |x| of the float64 product of the reference
  weights and the activations (float32 accumulation in 8 lanes and per-block partial sums);
- block sums: float32 rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu import kernels as K
from hearth.engine.cpu.linear import Activations, Linear
from hearth.engine.quants import TYPE_BY_NAME, dequantize_blocks

# byte offsets of the float16 scale fields in each block
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
              "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
TYPES = [*F16_FIELDS, "F32", "F16", "BF16"]


def random_matrix(name: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """uint8 [rows, bytes per row] of a valid tensor of type `name`."""
    rng = np.random.default_rng(seed)
    t = TYPE_BY_NAME[name]
    if name == "F32":
        return rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint8)
    if name == "F16":
        return rng.standard_normal((rows, cols)).astype(np.float16).view(np.uint8)
    if name == "BF16":
        u = rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint32)
        return (u >> 16).astype(np.uint16).view(np.uint8)
    nb = rows * cols // t.block_size
    b = rng.integers(0, 256, (nb, t.type_size), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        scale = (rng.uniform(0.5, 1.5, nb) * rng.choice([-1, 1], nb) * 0.01).astype(np.float16)
        b[:, off:off + 2] = scale.view(np.uint8).reshape(nb, 2)
    return b.reshape(rows, -1)


def reference(name: str, w: np.ndarray) -> np.ndarray:
    t = TYPE_BY_NAME[name]
    return dequantize_blocks(w.reshape(-1, t.type_size), t).reshape(w.shape[0], -1)


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("rows", [1, 7, 33])
def test_dequantize_rows_equal_reference(name, rows):
    cols = 512
    w = random_matrix(name, rows, cols, seed=rows)
    out = np.full((rows, cols), np.nan, np.float32)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name)
    lin.dequant(1, rows, out[1:])
    np.testing.assert_array_equal(out[1:], reference(name, w)[1:])


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("rows,cols", [(1, 256), (37, 768), (64, 2048)])
def test_matvec_matches_reference(name, rows, cols):
    w = random_matrix(name, rows, cols, seed=cols)
    x = np.random.default_rng(1).standard_normal((1, cols)).astype(np.float32) * 3
    lin = Linear(w, TYPE_BY_NAME[name], cols, name)
    act = Activations(x)
    xv = x
    ref = reference(name, w).astype(np.float64)
    want = ref @ xv[0].astype(np.float64)
    bound = np.abs(ref) @ np.abs(xv[0].astype(np.float64))
    got = lin(act)
    assert got.shape == (1, rows) and got.dtype == np.float32
    assert np.all(np.abs(got[0] - want) <= 1e-5 * bound + 1e-30)
    # with a scale folded in
    lin.scale = 0.125
    np.testing.assert_allclose(lin(act)[0], got[0] * np.float32(0.125), rtol=1e-6)


@pytest.mark.parametrize("name", ["Q4_1", "Q4_K", "Q6_K", "F16"])
def test_matmul_rows_match_matvec(name):
    """Prefill (tiles dequantized into BLAS products) and decode (one row at a time) compute the
    same function: equal to float rounding."""
    rows, cols = 300, 512
    w = random_matrix(name, rows, cols)
    x = np.random.default_rng(2).standard_normal((40, cols)).astype(np.float32)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, tile_floats=64 * cols)  # several tiles
    whole = lin(Activations(x))
    for i in (0, 17, 39):
        one = lin(Activations(x[i:i + 1]))[0]
        np.testing.assert_allclose(whole[i], one, rtol=1e-5, atol=1e-5 * np.abs(one).max())


def test_block_sums():
    x = np.random.default_rng(3).standard_normal((3, 128)).astype(np.float32)
    xs = np.empty((3, 8), np.float32)
    K.block_sums(x, xs)
    np.testing.assert_allclose(xs, x.astype(np.float64).reshape(3, 8, 16).sum(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "BF16"])
@pytest.mark.parametrize("n", [1, 9])
def test_stacked_matrices_equal_each_alone(name, n):
    """q/k/v in one launch (and in tiles): each matrix's outputs, with its own scale, equal the
    matrix alone."""
    cols = 512
    ws = [random_matrix(name, r, cols, seed=r) for r in (40, 7, 13)]
    x = np.random.default_rng(4).standard_normal((n, cols)).astype(np.float32)
    t = TYPE_BY_NAME[name]
    stacked = Linear(ws, t, cols, name)
    stacked.scales[0] = 0.5
    got = stacked(Activations(x))
    c = 0
    for i, w in enumerate(ws):
        alone = Linear(w, t, cols, name)
        alone.scale = 0.5 if i == 0 else 1.0
        np.testing.assert_array_equal(got[:, c:c + w.shape[0]], alone(Activations(x)))
        c += w.shape[0]
