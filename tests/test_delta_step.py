"""The compiled one-token Gated DeltaNet step (engine/cpu/delta_step.py) against its numpy
reference (delta_net.gated_delta_layer, itself checked against the float64 recurrence in
test_delta_net.py): tokens one after another from a non-zero state, so a state written back wrong
shows in the next token; tiled key heads (H_v = 2 H_k); strong and weak decays."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu.delta_step import gdn_decode
from hearth.engine.models import delta_net as dn


def layer(hk=2, hv=4, S=16, K=4, seed=0):
    rng = np.random.default_rng(seed)
    ch = 2 * hk * S + hv * S
    return dict(
        conv_w=(rng.standard_normal((ch, K)) * 0.5).astype(np.float32),
        dt_bias=rng.standard_normal(hv).astype(np.float32),
        a=(-np.exp(rng.standard_normal(hv))).astype(np.float32),
        ssm_norm=(1.0 + 0.1 * rng.standard_normal(S)).astype(np.float32),
        conv=rng.standard_normal((K - 1, ch)).astype(np.float32),
        M=(rng.standard_normal((hv, S, S)) * 0.3).astype(np.float32),
        proj=(rng.standard_normal((8, ch + hv * S + 2 * hv)) * 2).astype(np.float32),
    )


@pytest.mark.parametrize("hk,hv,S,K", [(2, 4, 16, 4), (3, 3, 32, 4), (1, 2, 128, 2)])
def test_compiled_step_equals_the_numpy_layer(hk, hv, S, K):
    p = layer(hk, hv, S, K, seed=hv * S + K)
    conv_a, M_a = p["conv"].copy(), p["M"].copy()
    conv_b, M_b = p["conv"].copy(), p["M"].copy()
    args = (p["conv_w"], p["dt_bias"], p["a"], p["ssm_norm"])
    for t in range(len(p["proj"])):
        want = dn.gated_delta_layer(p["proj"][t:t + 1], conv_a, M_a, *args, hk, 1e-6)[0]
        got = np.full(hv * S, np.nan, np.float32)
        gdn_decode(p["proj"][t], conv_b, np.ascontiguousarray(p["conv_w"].T), p["dt_bias"], p["a"], p["ssm_norm"], M_b, hk, 1e-6, got)
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= 1e-5 * scale, t
        assert np.array_equal(conv_a, conv_b)
        assert np.abs(M_a - M_b).max() <= 1e-5 * np.abs(M_a).max(), t


def test_the_state_moves_as_the_recurrence_says():
    """Against the float64 recurrence directly (q, k, v, g, beta recomputed from the projection):
    catches an error the numpy layer and the kernel might share."""
    hk, hv, S = 2, 4, 16
    p = layer(hk, hv, S, 4, seed=7)
    conv, M = p["conv"].copy(), p["M"].copy()
    got = np.empty(hv * S, np.float32)
    proj = p["proj"][0]
    ch = 2 * hk * S + hv * S
    full = np.concatenate([conv, proj[None, :ch]]).astype(np.float64)
    x = (full * p["conv_w"].T.astype(np.float64)).sum(0)
    x = x / (1 + np.exp(-x))
    q = x[:hk * S].reshape(hk, S)
    k = x[hk * S:2 * hk * S].reshape(hk, S)
    q, k = (u / np.sqrt((u * u).sum(1, keepdims=True) + 1e-6) for u in (q, k))
    v = x[2 * hk * S:].reshape(hv, S)
    beta = 1 / (1 + np.exp(-proj[ch + hv * S:ch + hv * S + hv].astype(np.float64)))
    g = np.log1p(np.exp(proj[ch + hv * S + hv:] + p["dt_bias"].astype(np.float64))) * p["a"]
    want_o, want_M = dn.reference_float64(M, q[np.arange(hv) % hk][None], k[np.arange(hv) % hk][None], v[None],
                                          g[None], beta[None])
    gdn_decode(proj, conv, np.ascontiguousarray(p["conv_w"].T), p["dt_bias"], p["a"], p["ssm_norm"], M, hk, 1e-6, got)
    assert np.abs(M - want_M).max() < 1e-5
    o = want_o[0]
    o = o / np.sqrt((o * o).mean(1, keepdims=True) + 1e-6) * p["ssm_norm"]
    z = proj[ch:ch + hv * S].astype(np.float64)
    want = (z / (1 + np.exp(-z))) * o.reshape(-1)
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_one_and_two_threads_give_the_same_bits():
    import numba
    p = layer(2, 8, 32, 4, seed=3)
    outs = []
    for n in (1, 2):
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        conv, M = p["conv"].copy(), p["M"].copy()
        o = np.empty(8 * 32, np.float32)
        for t in range(3):
            gdn_decode(p["proj"][t], conv, np.ascontiguousarray(p["conv_w"].T), p["dt_bias"], p["a"], p["ssm_norm"], M, 2, 1e-6, o)
        outs.append((o.copy(), M))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
