"""The hybrid layers' GPU kernels (engine/gpu/delta_ops.py) against numpy: the causal convolution
and its carried state (delta_net.causal_conv), the q/k L2 norm, the delta rule one token at a time
(decode: norms, update and output gate fused) and chunked (prefill: prep + scan) against the float64
recurrence (delta_net.reference_float64) across chunk edges, from a non-zero state and with strong
decays, and the output gates. Inputs are laid out as the model lays them out: one projection row per token
[conv input | z | beta | alpha], conv rows [q heads | k heads | v heads]."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import delta_ops as D
from hearth.engine.gpu.kernels import Kernels, dispatch_once
from hearth.engine.models import delta_net as dn
from tests.gpu_fixtures import make_test_device, poisoned, read_f32, rng  # noqa: F401  (fixture)

S, HK, HV, KCONV = 16, 2, 4, 4
CH, VD = 2 * HK * S + HV * S, HV * S
LDP = CH + VD + 2 * HV
Z_OFF, B_OFF, A_OFF = CH, CH + VD, CH + VD + HV


class Shape:
    """A layer's sizes: the tiny model's (S 16) or the real models' state size (S 128: two
    workgroups of 64 value dims a head, a row of 128 in registers)."""

    def __init__(self, s, hk=2, hv=4):
        self.S, self.HK, self.HV = s, hk, hv
        self.CH, self.VD = 2 * hk * s + hv * s, hv * s
        self.LDP = self.CH + self.VD + 2 * hv
        self.Z_OFF, self.B_OFF, self.A_OFF = self.CH, self.CH + self.VD, self.CH + self.VD + hv


TINY, REAL, ODD = Shape(16), Shape(128), Shape(24, hk=1, hv=3)   # ODD: the scan's blocks of 8 value dims


@pytest.fixture(scope="module")
def gpu():
    dev = make_test_device()
    yield dev, Kernels(dev)
    dev.destroy()


def params(n, sh=TINY, **kw):
    p = dict(S=sh.S, hv=sh.HV, hk=sh.HK, ch=sh.CH, ldp=sh.LDP, a_off=sh.A_OFF, b_off=sh.B_OFF, z_off=sh.Z_OFF, n=n,
             st_off=0, m_off=0, K=KCONV, eps=1e-6)
    p.update(kw)
    return p


def layer_inputs(rng, n, sh=TINY, decay=1.0):
    """(proj [n, LDP], conv rows [n, CH] with q/k normalized, da [2 HV], M0 [HV, S, S])."""
    S, HK, HV = sh.S, sh.HK, sh.HV
    proj = rng.standard_normal((n, sh.LDP)).astype(np.float32)
    conv = rng.standard_normal((n, sh.CH)).astype(np.float32)
    qk = conv[:, :2 * HK * S].reshape(n, 2 * HK, S)
    conv[:, :2 * HK * S] = dn.l2_norm(qk, 1e-6).reshape(n, -1)
    da = np.concatenate([rng.standard_normal(HV) * 0.5, -rng.uniform(0.05, 2.0, HV) * decay]).astype(np.float32)
    M0 = (rng.standard_normal((HV, S, S)) * 0.3).astype(np.float32)
    return proj, conv, da, M0


def reference(proj, conv, da, M0, sh=TINY):
    S, HK, HV = sh.S, sh.HK, sh.HV
    n = proj.shape[0]
    q = dn.heads_for_values(conv[:, :HK * S].reshape(n, HK, S), HV)
    k = dn.heads_for_values(conv[:, HK * S:2 * HK * S].reshape(n, HK, S), HV)
    v = conv[:, 2 * HK * S:].reshape(n, HV, S)
    g = dn.softplus(proj[:, sh.A_OFF:sh.A_OFF + HV] + da[:HV]) * da[HV:]
    beta = 1.0 / (1.0 + np.exp(-proj[:, sh.B_OFF:sh.B_OFF + HV].astype(np.float64)))
    return dn.reference_float64(M0, q, k, v, g, beta)


@pytest.mark.parametrize("form", ["serial", "parallel"])
def test_conv_and_its_state(gpu, rng, form):
    """serial: a thread a channel over the tokens (decode's); parallel: conv_rows + conv_state (prefill's)."""
    dev, ks = gpu
    w = rng.standard_normal((CH, KCONV)).astype(np.float32)
    st0 = rng.standard_normal((KCONV - 1, CH)).astype(np.float32)
    pieces = [rng.standard_normal((n, LDP)).astype(np.float32) for n in (5, 1, 2)]
    st_buf = dev.upload(np.concatenate([np.zeros(7, np.float32), st0.ravel()]), "state")   # at an offset
    wb = dev.upload(w, "w")
    ref_state = st0.copy()
    for proj in pieces:
        n = proj.shape[0]
        want = dn.causal_conv(np.ascontiguousarray(proj[:, :CH]), ref_state, w)
        want = want / (1.0 + np.exp(-want))
        out = poisoned(dev, n * CH)
        bufs = [dev.upload(proj, "proj"), out, st_buf, wb]
        if form == "serial":
            dispatch_once(dev, D.conv(ks, KCONV), bufs, D.conv_groups(CH), **params(n, st_off=7))
        else:
            dispatch_once(dev, D.conv_rows(ks, KCONV), bufs, D.conv_rows_groups(n, CH), **params(n, st_off=7))
            dispatch_once(dev, D.conv_state(ks, KCONV), bufs, D.conv_groups(CH), **params(n, st_off=7))
        np.testing.assert_allclose(read_f32(dev, out, n * CH).reshape(n, CH), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(read_f32(dev, st_buf, ref_state.size, 7).reshape(ref_state.shape), ref_state,
                               rtol=0, atol=0)


def test_l2norm_of_q_and_k_only(gpu, rng):
    dev, ks = gpu
    n = 3
    conv = rng.standard_normal((n, CH)).astype(np.float32)
    b = dev.upload(conv, "conv")
    dispatch_once(dev, D.l2norm(ks, S), [b], D.l2norm_groups(n, HK), **params(n))
    got = read_f32(dev, b, n * CH).reshape(n, CH)
    want = conv.copy()
    want[:, :2 * HK * S] = dn.l2_norm(conv[:, :2 * HK * S].reshape(n, 2 * HK, S), 1e-6).reshape(n, -1)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def run_delta(dev, ks, proj, conv, da, M0, sh=TINY, form="solve"):
    """The chunked form over all n tokens at once: (o [n, HV, S], M after them). form "solve": gram,
    solve (every chunk's triangular system) and scan_u; "old": prep and scan (the solve inside it)."""
    S, HV = sh.S, sh.HV
    n = proj.shape[0]
    off = 5 * S * S                                      # the layer's state after another layer's
    Mb = dev.upload(np.concatenate([np.zeros(off, np.float32), M0.ravel()]), "M")
    out = poisoned(dev, n * HV * S)
    pb, cb, db = dev.upload(proj, "proj"), dev.upload(conv, "conv"), dev.upload(da, "da")
    prm = params(n, sh, m_off=off)
    gb, mat = poisoned(dev, n * HV * 2), poisoned(dev, D.mat_floats(n, HV))
    first = D.prep(ks, S) if form == "old" else D.gram(ks, S)
    dispatch_once(dev, first, [cb, pb, db, gb, mat], D.prep_groups(n, HV), **prm)
    if form == "old":
        dispatch_once(dev, D.scan(ks, S), [cb, gb, mat, Mb, out], D.scan_groups(S, HV), **prm)
    else:
        wt, qt = poisoned(dev, D.tw_floats(n, HV, S)), poisoned(dev, D.tw_floats(n, HV, S))
        dispatch_once(dev, D.solve(ks, S), [cb, gb, mat, wt, qt, out], D.solve_groups(n, S, HV), **prm)
        dispatch_once(dev, D.scan_u(ks, S), [cb, gb, mat, wt, qt, Mb, out], D.scan_u_groups(S, HV), **prm)
    o = read_f32(dev, out, n * HV * S).reshape(n, HV, S)
    M = read_f32(dev, Mb, HV * S * S, off).reshape(HV, S, S)
    assert np.isfinite(o).all() and np.isfinite(M).all()
    return o, M


@pytest.mark.parametrize("sh, n", [(TINY, 1), (TINY, 20), (REAL, 3), (ODD, 2)], ids=["1", "20", "S128", "S24"])
@pytest.mark.parametrize("form", ["split", "head", "old"])
def test_decode_pass_equals_the_recurrence_with_norms_and_gate(gpu, sh, n, form):
    """Token after token, q/k L2 norms, the update, RMSNorm(o) * w * silu(z) against the float64
    recurrence on normalized q/k, then numpy's gate: "split" the step (rows over workgroups: 16 a
    head at S 128) and gate passes, "head" both in one workgroup of S x 8 threads a head, "old" the
    one fused pass (a workgroup of S threads a head)."""
    dev, ks = gpu
    S, HK, HV = sh.S, sh.HK, sh.HV
    rng = np.random.default_rng(7 + n)
    proj, conv, da, M0 = layer_inputs(rng, n, sh)
    conv[:, :2 * HK * S] *= rng.uniform(0.5, 3.0, (n, 2 * HK * S)).astype(np.float32)   # not normalized
    w = rng.standard_normal(S).astype(np.float32)
    normed = conv.copy()
    normed[:, :2 * HK * S] = dn.l2_norm(conv[:, :2 * HK * S].reshape(n, 2 * HK, S), 1e-6).reshape(n, -1)
    want_o, want_M = reference(proj, normed, da, M0, sh)
    z = proj[:, sh.Z_OFF:sh.Z_OFF + sh.VD].reshape(n, HV, S).astype(np.float64)
    want = z / (1 + np.exp(-z)) * (want_o / np.sqrt((want_o ** 2).mean(-1, keepdims=True) + 1e-6) * w)
    off = 3 * S * S
    Mb = dev.upload(np.concatenate([np.zeros(off, np.float32), M0.ravel()]), "M")
    db, wb = dev.upload(da, "da"), dev.upload(w, "w")
    got = []
    for t in range(n):
        out = poisoned(dev, HV * S)
        cb, pb = dev.upload(conv[t], "conv"), dev.upload(proj[t], "proj")
        if form == "old":
            dispatch_once(dev, D.decode(ks, S), [cb, pb, db, Mb, out, wb], (1, HV, 1), **params(1, sh, m_off=off))
        elif form == "head":
            dispatch_once(dev, D.head_step(ks, S), [cb, pb, db, Mb, out, wb], (1, HV, 1), **params(1, sh, m_off=off))
        else:
            dispatch_once(dev, D.step(ks, S), [cb, pb, db, Mb, out], D.step_groups(S, HV), **params(1, sh, m_off=off))
            dispatch_once(dev, D.gate(ks, S), [out, pb, wb], (1, HV, 1), **params(1, sh, m_off=off))
        got.append(read_f32(dev, out, HV * S).reshape(HV, S))
    M = read_f32(dev, Mb, HV * S * S, off).reshape(HV, S, S)
    assert np.abs(np.stack(got) - want).max() < 2e-5     # outputs up to ~6 here; lavapipe's error ~2e-6
    assert np.abs(M - want_M).max() < 2e-5


@pytest.mark.parametrize("sh, n", [(TINY, 1), (TINY, 2), (TINY, 63), (TINY, 64), (TINY, 65), (TINY, 150),
                                   (REAL, 70), (ODD, 70)], ids=["1", "2", "63", "64", "65", "150", "S128", "S24"])
@pytest.mark.parametrize("form", ["solve", "solve-u1", "solve-u16", "solve-vb8", "old"])
def test_chunked_equals_the_recurrence(gpu, sh, n, form, monkeypatch):
    """solve-uN: scan_u issuing N loads before their products (the default 8; 16 leaves S24's state rows
    and every chunk's tokens a remainder loop); solve-vb8: 8 value dims a workgroup (the default 4)."""
    dev, ks = gpu
    if form.startswith("solve-u"):
        monkeypatch.setenv("HEARTH_GPU_DELTA_UNROLL", form[7:])
    if form == "solve-vb8":
        monkeypatch.setenv("HEARTH_GPU_DELTA_VB", "8")
    form = "old" if form == "old" else "solve"
    proj, conv, da, M0 = layer_inputs(np.random.default_rng(100 + n), n, sh)
    want_o, want_M = reference(proj, conv, da, M0, sh)
    o, M = run_delta(dev, ks, proj, conv, da, M0, sh=sh, form=form)
    assert np.abs(o - want_o).max() < 5e-5
    assert np.abs(M - want_M).max() < 5e-5


@pytest.mark.parametrize("form", ["solve", "old"])
def test_chunked_strong_decay_stays_finite(gpu, form):
    """exp of a chunk's cumulative decay underflows to 0: every exponent used is <= 0."""
    dev, ks = gpu
    proj, conv, da, M0 = layer_inputs(np.random.default_rng(9), 130, decay=40.0)
    want_o, want_M = reference(proj, conv, da, M0)
    o, M = run_delta(dev, ks, proj, conv, da, M0, form=form)
    assert np.abs(o - want_o).max() < 5e-5
    assert np.abs(M - want_M).max() < 5e-5


def test_output_gates(gpu, rng):
    dev, ks = gpu
    n = 3
    o = rng.standard_normal((n, HV, S)).astype(np.float32)
    proj = rng.standard_normal((n, LDP)).astype(np.float32)
    w = rng.standard_normal(S).astype(np.float32)
    ob = dev.upload(o, "o")
    dispatch_once(dev, D.norm_silu(ks), [ob, dev.upload(proj, "proj"), dev.upload(w, "w")],
                  D.threads_groups(n * HV), **params(n))
    z = proj[:, Z_OFF:Z_OFF + VD].reshape(n, HV, S)
    normed = o / np.sqrt((o * o).mean(-1, keepdims=True) + 1e-6) * w
    want = z / (1 + np.exp(-z)) * normed
    np.testing.assert_allclose(read_f32(dev, ob, o.size).reshape(o.shape), want, rtol=1e-5, atol=1e-6)
    ob = dev.upload(o, "o")                     # delta_step.wgsl's gate: a workgroup a (token, head)
    dispatch_once(dev, D.gate(ks, S), [ob, dev.upload(proj, "proj"), dev.upload(w, "w")], (n, HV, 1), **params(n))
    np.testing.assert_allclose(read_f32(dev, ob, o.size).reshape(o.shape), want, rtol=1e-5, atol=1e-6)
    y = rng.standard_normal((n, 40)).astype(np.float32)
    gate = rng.standard_normal((n, 40)).astype(np.float32)
    yb = dev.upload(y, "y")
    gb = dev.upload(np.concatenate([np.full(5, 9.0, np.float32), gate.ravel()]), "gate")   # at an offset
    dispatch_once(dev, D.sigmoid_gate(ks), [yb, gb], D.threads_groups(y.size), **params(n, ch=40, z_off=5))
    np.testing.assert_allclose(read_f32(dev, yb, y.size).reshape(y.shape), y / (1 + np.exp(-gate)), rtol=1e-5,
                               atol=1e-7)
