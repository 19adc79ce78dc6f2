"""Gated DeltaNet's kernels against a float64 numpy reference of the recurrence
(engine/models/delta_net.py): the chunked prefill form and the one-token step give the
recurrence's outputs and final state, across chunk boundaries, from a non-zero state, and with
strong decays (every exponent of the chunked form is <= 0, so nothing overflows)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.models import delta_net as dn


def inputs(n, H=4, S=16, seed=0, decay=0.5):
    rng = np.random.default_rng(seed)
    q = dn.l2_norm(rng.standard_normal((n, H, S)).astype(np.float32), 1e-6)
    k = dn.l2_norm(rng.standard_normal((n, H, S)).astype(np.float32), 1e-6)
    v = rng.standard_normal((n, H, S)).astype(np.float32)
    g = (-dn.softplus(rng.standard_normal((n, H)).astype(np.float32)) * np.float32(decay)).astype(np.float32)
    beta = (1.0 / (1.0 + np.exp(-rng.standard_normal((n, H))))).astype(np.float32)
    M0 = (rng.standard_normal((H, S, S)) * 0.3).astype(np.float32)
    return M0, q, k, v, g, beta


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 150])
def test_chunked_equals_the_recurrence(n):
    M0, q, k, v, g, beta = inputs(n, seed=n)
    want_o, want_M = dn.reference_float64(M0, q, k, v, g, beta)
    M = M0.copy()
    o = dn.chunked(M, q, k, v, g, beta)
    assert o.dtype == np.float32 and M.dtype == np.float32
    assert np.abs(o - want_o).max() < 2e-5
    assert np.abs(M - want_M).max() < 2e-5


def test_small_chunks_give_the_same_numbers():
    M0, q, k, v, g, beta = inputs(40, seed=3)
    a, b = M0.copy(), M0.copy()
    oa = dn.chunked(a, q, k, v, g, beta, chunk=64)
    ob = dn.chunked(b, q, k, v, g, beta, chunk=7)
    assert np.abs(oa - ob).max() < 2e-5 and np.abs(a - b).max() < 2e-5


def test_recurrent_step_equals_the_recurrence():
    M0, q, k, v, g, beta = inputs(30, seed=5)
    want_o, want_M = dn.reference_float64(M0, q, k, v, g, beta)
    M = M0.copy()
    o = np.stack([dn.recurrent_step(M, q[t], k[t], v[t], g[t], beta[t]) for t in range(30)])
    assert np.abs(o - want_o).max() < 2e-5
    assert np.abs(M - want_M).max() < 2e-5


def test_strong_decay_stays_finite():
    M0, q, k, v, g, beta = inputs(128, seed=9, decay=80.0)   # exp(cumsum) underflows to 0 in a chunk
    want_o, want_M = dn.reference_float64(M0, q, k, v, g, beta)
    M = M0.copy()
    o = dn.chunked(M, q, k, v, g, beta)
    assert np.isfinite(o).all() and np.isfinite(M).all()
    assert np.abs(o - want_o).max() < 2e-5


def test_a_wrong_head_mapping_is_caught():
    """The reference tells tiled from interleaved key heads (what the tiny model's ablation breaks)."""
    x = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)   # [n, H_k=2, S]
    tiled = dn.heads_for_values(x, 4)
    assert [int(tiled[0, h, 0]) for h in range(4)] == [0, 3, 0, 3]


def test_causal_conv_carries_its_state():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((10, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    whole = dn.causal_conv(x, np.zeros((3, 6), np.float32), w)
    padded = np.concatenate([np.zeros((3, 6)), x])
    want = np.stack([(padded[t:t + 4].T * w).sum(1) for t in range(10)])
    assert np.abs(whole - want).max() < 1e-5
    st = np.zeros((3, 6), np.float32)
    parts = np.concatenate([dn.causal_conv(x[:4], st, w), dn.causal_conv(x[4:5], st, w), dn.causal_conv(x[5:], st, w)])
    assert np.abs(parts - whole).max() < 1e-6
    assert np.array_equal(st, x[-3:])


class _Threads:
    """work.map on two threads (as the CPU backend's pool spreads pieces)."""

    def map(self, fn, items):
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(fn, items))


def test_head_pieces_on_threads_give_the_same_bits():
    M0, q, k, v, g, beta = inputs(70, H=20, seed=11)
    a, b = M0.copy(), M0.copy()
    oa = dn.chunked(a, q, k, v, g, beta)
    ob = dn.chunked(b, q, k, v, g, beta, work=_Threads())
    assert np.array_equal(oa, ob) and np.array_equal(a, b)
