"""The compiled CPU kernels against the numpy reference (engine.quants) for every weight type.

Random blocks (random bytes, sane float16 scales), odd row counts. Tolerances:
- dequantization: exactly the reference's float32 values;
- matrix-vector products: within 1e-5 of sum |w| |x| of the float64 product of the reference
  weights and the activations (float32 accumulation in 8 lanes and per-block partial sums);
- block sums: float32 rounding;
- 8-bit x (the decode kernels, x quantized as llama.cpp does): the codes, scales and sums exactly
  those of the numpy reference (engine/cpu/quant_activations.py); the products within 1e-5 of
  sum |w| |x8| of the float64 product of the reference weights and the dequantized 8-bit x (the
  integer sums are exact; the tolerance covers the float32 scaling and accumulation), also with
  every weight byte at an extreme (the int16 bounds of pmaddubsw), and on the generic vector IR
  (CPUs without AVX2) bit for bit equal to the default kernel.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from hearth.engine.cpu import quant_activations as QA
from hearth.engine.cpu import kernels as K
from hearth.engine.cpu import kernels_int8 as K8
from hearth.engine.cpu.linear import SWAP_MAX_ROWS, Activations, Linear
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


@pytest.mark.parametrize("name", ["Q4_1", "Q6_K", "F16"])
@pytest.mark.parametrize("n", [5, 19, SWAP_MAX_ROWS, SWAP_MAX_ROWS + 1])
def test_tiled_products_match_the_reference_on_both_sides_of_the_swap(name, n):
    """Tiled products of few rows (W x^T, copied out transposed) and of many (x W^T), several tiles
    with a scaled matrix: within float32 accumulation of the float64 product of the reference."""
    rows, cols = 300, 512
    w = random_matrix(name, rows, cols, seed=n)
    x = np.random.default_rng(n).standard_normal((n, cols)).astype(np.float32)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, tile_floats=64 * cols)
    lin.scale = 0.5
    got = lin(Activations(x))
    ref = x.astype(np.float64) @ reference(name, w).astype(np.float64).T * 0.5
    bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(reference(name, w)).astype(np.float64).T)
    assert got.shape == (n, rows)
    assert np.all(np.abs(got - ref) <= bound + 1e-30)


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


def _awkward_x(k: int, seed: int) -> np.ndarray:
    """float32 [k]: normal values, a block of zeros, ties on the 8-bit grid, extremes of either sign
    (Q8_K's scale takes the sign of its block's extreme)."""
    x = np.random.default_rng(seed).standard_normal(k).astype(np.float32) * 3
    x[32:64] = 0.0                                          # a Q8_0 block of zeros
    x[64:96] = np.arange(32, dtype=np.float32) - 15.5       # max 15.5: x * 127 / 15.5 hits halves
    x[200] = -40.0                                          # the first Q8_K block's extreme: negative
    if k > 512:
        x[600] = 50.0                                       # the third's: positive
    return x


@pytest.mark.parametrize("k", [256, 768])
def test_quantize_x_equals_reference(k):
    x = _awkward_x(k, k)
    q, d, s = np.empty(k, np.int16), np.empty(k // 32, np.float32), np.empty(k // 32, np.float32)
    K8.quantize_q8_0(x, q, d, s)
    rq, rd, rs = QA.q8_0(x)
    assert np.array_equal(q, rq) and np.array_equal(d, rd) and np.array_equal(s, rs)
    assert np.abs(q).max() == 127 and not q[32:64].any()
    q, d, b = np.empty(k, np.int16), np.empty(k // 256, np.float32), np.empty(k // 16, np.int32)
    K8.quantize_q8_k(x, q, d, b)
    rq, rd, rb = QA.q8_k(x)
    assert np.array_equal(q, rq) and np.array_equal(d, rd) and np.array_equal(b, rb)
    assert q[200] == -127 and d[0] > 0   # q = rint(-127 / m * x): the extreme maps to -127
    if k > 512:
        assert q[600] == -127 and d[2] < 0
    zero = np.zeros(256, np.float32)
    K8.quantize_q8_k(zero, q[:256], d[:1], b[:16])
    assert not q[:256].any() and d[0] == 0 and not b[:16].any()


@pytest.mark.parametrize("name", list(F16_FIELDS))
@pytest.mark.parametrize("rows,cols", [(1, 256), (37, 768), (64, 2048)])
def test_int8_matvec_matches_reference(name, rows, cols):
    w = random_matrix(name, rows, cols, seed=cols)
    x = _awkward_x(cols, 1)[None, :]
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    assert lin.int8
    q, d, _ = (QA.q8_k if name.endswith("_K") else QA.q8_0)(x[0])
    x8 = QA.dequantized(q, d)
    ref = reference(name, w).astype(np.float64)
    want, bound = ref @ x8, np.abs(ref) @ np.abs(x8)
    got = lin(Activations(x, int8=True))
    assert got.shape == (1, rows) and got.dtype == np.float32
    assert np.all(np.abs(got[0] - want) <= 1e-5 * bound + 1e-30)
    # the 8-bit product really differs from the float one (the check above has teeth) ...
    exact = ref @ x[0].astype(np.float64)
    assert np.abs(got[0] - exact).max() > 1e-4 * bound.max()
    # ... and an input that does not allow 8 bits (prefill, float path) gets the float kernel
    lin.scale = 0.125
    np.testing.assert_allclose(lin(Activations(x, int8=True))[0], got[0] * np.float32(0.125), rtol=1e-6)
    flt = lin(Activations(x))[0] / np.float32(0.125)
    assert np.all(np.abs(flt - exact) <= 1e-5 * (np.abs(ref) @ np.abs(x[0].astype(np.float64))) + 1e-30)


@pytest.mark.parametrize("name", ["Q4_1", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("n", [1, 6])   # a one-token pass; a short input (the K-quants' int8 tiles)
def test_int8_stacked_matrices_equal_each_alone(name, n):
    cols = 512
    ws = [random_matrix(name, r, cols, seed=r) for r in (40, 7, 13)]
    x = np.random.default_rng(4).standard_normal((n, cols)).astype(np.float32)
    t = TYPE_BY_NAME[name]
    stacked = Linear(ws, t, cols, name, int8=True)
    stacked.scales[0] = 0.5
    got = stacked(Activations(x, int8=True))
    c = 0
    for i, w in enumerate(ws):
        alone = Linear(w, t, cols, name, int8=True)
        alone.scale = 0.5 if i == 0 else 1.0
        np.testing.assert_array_equal(got[:, c:c + w.shape[0]], alone(Activations(x, int8=True)))
        c += w.shape[0]


def _int8_check(name: str, w: np.ndarray, x: np.ndarray, got: np.ndarray) -> None:
    """got float32 [rows]: the 8-bit product of w with x against the float64 reference. Q4_1/Q5_1's
    offset terms m * sum(x) are m times the Q8_1 block sum s, which llama.cpp rounds to float16
    (engine/cpu/quant_activations.py): the reference takes them so, or a block of zero nibbles (all
    offset) would differ by that rounding (2^-11), not by the kernel."""
    q, d, s = (QA.q8_k if name.endswith("_K") else QA.q8_0)(x)
    x8 = QA.dequantized(q, d)
    ref = reference(name, w).astype(np.float64)
    want, bound = ref @ x8, np.abs(ref) @ np.abs(x8)
    if name in ("Q4_1", "Q5_1"):
        t = TYPE_BY_NAME[name]
        no_m = w.reshape(-1, t.type_size).copy()
        m = no_m[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(w.shape[0], -1)
        no_m[:, 2:4] = 0
        want = reference(name, no_m.reshape(w.shape)).astype(np.float64) @ x8 + m @ s.astype(np.float64)
    assert np.all(np.abs(got - want) <= 1e-5 * bound + 1e-30)


def awkward_rows(n: int, cols: int, seed: int) -> np.ndarray:
    """n rows of _awkward_x: a batch of x."""
    return np.stack([_awkward_x(cols, seed + i) for i in range(n)])


def one_row(lin: Linear, x: np.ndarray) -> np.ndarray:
    """Each row of x alone through the one-row (matrix-vector) kernel."""
    return np.stack([lin(Activations(x[i:i + 1], int8=True))[0] for i in range(len(x))])


def check_int8_batch(name: str, n: int, rows: int, cols: int) -> None:
    """A batch of n rows of 8-bit x times a random (rows, cols) matrix: each row within the one-row
    kernels' bound of the numpy reference, within 1e-6 of the largest product of the one-row kernel
    (the same integers, float32 sums in another order), and really another path than float32 x."""
    w = random_matrix(name, rows, cols, seed=rows + n)
    x = awkward_rows(n, cols, n)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    got = lin(Activations(x, int8=True))
    assert got.shape == (n, rows) and got.dtype == np.float32
    for i in range(n):
        _int8_check(name, w, x[i], got[i])
    one = one_row(lin, x)
    assert np.abs(got - one).max() <= 1e-6 * np.abs(one).max()
    flt = lin(Activations(x))            # float32 x: BLAS tiles, really another path
    assert np.abs(flt - got).max() > 1e-4 * np.abs(got).max()


def check_spread_same_bits(name: str, rows: int, cols: int = 512) -> None:
    """A batch of 8-bit x whose tiles are spread over pool threads (the CPU backend's SpreadPieces)
    gives the same bits as on this thread: each tile is one call on one thread's scratch."""
    w = random_matrix(name, rows, cols, seed=11)
    x = awkward_rows(12, cols, 5)
    lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
    want = lin(Activations(x, int8=True))
    with pool_work() as work:
        np.testing.assert_array_equal(lin(Activations(x, int8=True), work=work), want)


@contextmanager
def pool_work(threads: int = 2):
    """What the CPU backend's SpreadPieces gives a product to spread its tiles: an object with
    map(fn, items), over `threads` pool threads and this one."""
    from concurrent.futures import ThreadPoolExecutor

    from hearth.engine.system.shared_work import share

    class Work:
        n_threads = threads + 1

        def map(self, fn, items):
            share(fn, items, pool.submit, threads)
    pool = ThreadPoolExecutor(threads)
    try:
        yield Work()
    finally:
        pool.shutdown()


def extreme_matrix(name: str, rows: int, cols: int, fill: int) -> np.ndarray:
    """random_matrix with every byte but the float16 scales set to `fill`."""
    w = random_matrix(name, rows, cols, seed=fill)
    t = TYPE_BY_NAME[name]
    keep = np.zeros(t.type_size, bool)
    for off in F16_FIELDS[name]:
        keep[off:off + 2] = True
    w.reshape(-1, t.type_size)[:, ~keep] = fill
    return w


@pytest.mark.parametrize("name", list(F16_FIELDS))
@pytest.mark.parametrize("fill", [0x00, 0xFF, 0x80, 0x7F])
def test_int8_matvec_extreme_blocks(name, fill):
    """Every weight byte at an extreme (largest unsigned values, Q8_0's -128 and 127) times codes of
    +-127: the int16 pair sums of pmaddubsw at their bounds (2 x 128 x 127 for Q8_0, 2 x 63 x 127
    for Q6_K) must not saturate."""
    rows, cols = 5, 512
    w, t = extreme_matrix(name, rows, cols, fill), TYPE_BY_NAME[name]
    for x in (np.full(cols, 0.75, np.float32), np.where(np.arange(cols) % 3, -1.5, 2.0).astype(np.float32)):
        lin = Linear(w, t, cols, name, int8=True)
        _int8_check(name, w, x, lin(Activations(x[None, :], int8=True))[0])


def _kernel_asm(fn) -> str:
    return "\n".join(fn.inspect_asm().values())


@pytest.mark.parametrize("name", list(F16_FIELDS))
def test_int8_generic_ir_equals_x86_path(name, monkeypatch):
    """The generic vector IR (CPUs without AVX2; HEARTH_CPU_SIMD=generic) compiled here in a fresh
    kernel: the same products as the default kernel, bit for bit (the integer sums are exact on
    both, the float steps the same), and the reference's; where the host has AVX2 the default
    kernel uses pmaddubsw and the generic one does not."""
    from numba import njit

    from hearth.engine.cpu import simd
    rows, cols = 37, 768
    w = random_matrix(name, rows, cols, seed=cols)
    x = _awkward_x(cols, 2)
    kb = name.endswith("_K")
    q, d, s = (K8.q8_k_rows if kb else K8.q8_0_rows)(x[None, :])
    default = getattr(K8, f"matvec_{name.lower()}")
    ws, ones = (w,), np.ones(1, np.float32)
    want = np.empty(rows, np.float32)
    default(ws, q[0], d[0], s[0], want, ones)
    x86 = simd.use_avx2()
    for avx2 in {False, x86}:
        monkeypatch.setattr(simd, "AVX2", avx2)
        fresh = njit(nogil=True)(default.py_func)
        got = np.empty(rows, np.float32)
        fresh(ws, q[0], d[0], s[0], got, ones)
        np.testing.assert_array_equal(got, want)
        _int8_check(name, w, x, got)
        asm = _kernel_asm(fresh)
        assert ("pmaddubsw" in asm) == avx2 and ("psignb" in asm) == (avx2 and name in ("Q4_0", "Q5_0", "Q8_0"))


def test_int8_one_row_buffers_follow_their_activations():
    """One-row inputs share this thread's quantization buffers: an Activations used again after
    another one of the same size still multiplies its own x."""
    cols = 512
    w = random_matrix("Q4_K", 9, cols)
    lin = Linear(w, TYPE_BY_NAME["Q4_K"], cols, "Q4_K", int8=True)
    rng = np.random.default_rng(5)
    xa, xb = (rng.standard_normal((1, cols)).astype(np.float32) for _ in range(2))
    a, b = Activations(xa, int8=True), Activations(xb, int8=True)
    ya, yb = lin(a), lin(b)
    np.testing.assert_array_equal(lin(a), ya)
    np.testing.assert_array_equal(lin(Activations(xa.copy(), int8=True)), ya)
    assert not np.array_equal(ya, yb)
    _int8_check("Q4_K", w, xb[0], lin(b)[0])
