"""A decoded token's fused Gated DeltaNet passes (delta_ops.step_conv + gate_shift: the causal conv
inside the step, the conv state moved on in the gate) against the float64 recurrence on numpy's
conv, token after token from a non-zero conv and delta state; and the tiny qwen35 model decoded one
token at a time with the fusions on and off (HEARTH_GPU_DELTA_FUSE=0, HEARTH_GPU_HYBRID_QG=0: the
attention layers' Q|gate|K|V matvec, HEARTH_GPU_HYBRID_ATTN_GATE=0: the sigmoid gate inside decode
attention, HEARTH_GPU_DELTA_GATE=0: the DeltaNet gate inside ssm_out's matvec), both against llama.cpp's logits and the CPU float path."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import delta_ops as D
from hearth.engine.gpu import ops
from hearth.engine.gpu.kernels import dispatch_once
from hearth.engine.models import delta_net as dn
from tests.gpu_fixtures import dequant_reference, kernels_fixture, poisoned, random_rows, read_f32, rel_err
from tests.test_gpu_qwen35 import cpu_float, files, float_logits, gpu_backend  # noqa: F401  (fixtures)
from tests.test_gpu_qwen35_kernels import KCONV, ODD, REAL, TINY, gpu, layer_inputs, params, reference  # noqa: F401
from tests.tiny_next import check_both_ways, prompt_of


@pytest.mark.parametrize("sh", [TINY, REAL, ODD], ids=["S16", "S128", "S24"])
def test_step_conv_and_gate_shift_equal_conv_step_gate(gpu, sh):
    dev, ks = gpu
    S, HK, HV, CH = sh.S, sh.HK, sh.HV, sh.CH
    n = 3
    rng = np.random.default_rng(31 + S)
    proj, _, da, M0 = layer_inputs(rng, n, sh)
    cw = rng.standard_normal((CH, KCONV)).astype(np.float32)
    st0 = rng.standard_normal((KCONV - 1, CH)).astype(np.float32)
    nw = rng.standard_normal(S).astype(np.float32)
    conv = dn.causal_conv(np.ascontiguousarray(proj[:, :CH]), st0.copy(), cw)
    conv = conv / (1.0 + np.exp(-conv))
    normed = conv.copy()
    normed[:, :2 * HK * S] = dn.l2_norm(conv[:, :2 * HK * S].reshape(n, 2 * HK, S), 1e-6).reshape(n, -1)
    want_o, want_M = reference(proj, normed, da, M0, sh)
    z = proj[:, sh.Z_OFF:sh.Z_OFF + sh.VD].reshape(n, HV, S).astype(np.float64)
    want = z / (1 + np.exp(-z)) * (want_o / np.sqrt((want_o ** 2).mean(-1, keepdims=True) + 1e-6) * nw)
    m_off, st_off = 3 * S * S, 5                         # the layer's state after another layer's
    Mb = dev.upload(np.concatenate([np.zeros(m_off, np.float32), M0.ravel()]), "M")
    stb = dev.upload(np.concatenate([np.zeros(st_off, np.float32), st0.ravel()]), "conv-state")
    db, wb, cwb = dev.upload(da, "da"), dev.upload(nw, "w"), dev.upload(cw, "cw")
    prm = params(1, sh, m_off=m_off, st_off=st_off)
    got = []
    for t in range(n):
        out = poisoned(dev, HV * S)
        pb = dev.upload(proj[t], "proj")
        dispatch_once(dev, D.step_conv(ks, S, KCONV), [pb, db, Mb, out, stb, cwb], D.step_groups(S, HV), **prm)
        dispatch_once(dev, D.gate_shift(ks, S, KCONV), [out, pb, wb, stb], (1, HV, 1), **prm)
        got.append(read_f32(dev, out, HV * S).reshape(HV, S))
    M = read_f32(dev, Mb, HV * S * S, m_off).reshape(HV, S, S)
    state = read_f32(dev, stb, st0.size, st_off).reshape(st0.shape)
    np.testing.assert_array_equal(state, np.concatenate([st0, proj[:, :CH]])[-(KCONV - 1):])
    assert np.abs(np.stack(got) - want).max() < 2e-5
    assert np.abs(M - want_M).max() < 2e-5


SWITCHES = ("HEARTH_GPU_DELTA_FUSE", "HEARTH_GPU_DELTA_GATE", "HEARTH_GPU_HYBRID_QG", "HEARTH_GPU_HYBRID_ATTN_GATE")


@pytest.mark.parametrize("on", ["1111", "0000", "1001", "0110"])
def test_decode_with_the_fusions_on_and_off(files, cpu_float, monkeypatch, on):  # noqa: F811
    """All on: no conv or gate pass (DeltaNet layers: in, step_conv, ssm_out gating its x) and no gate
    matvec or sigmoid pass (attention layers: Q|gate|K|V one matvec, the gate applied by attention);
    all off; and two mixes (the conv fused with the gate pass that then moves its state, and the
    other way round)."""
    d, m, g = files
    fuse, gate, qg, attn_gate = (c == "1" for c in on)
    for name, c in zip(SWITCHES, on):
        monkeypatch.setenv(name, c)
    monkeypatch.delenv("HEARTH_GPU_DELTA_DECODE", raising=False)
    be = gpu_backend(g)
    try:
        labels = [op["label"] for op in be.decode_plan.ops]
        linear = sum(1 for L in be.layers if "w_in" in L)
        attn = len(be.layers) - linear
        assert sum(lb.endswith(".conv") for lb in labels) == (0 if fuse else linear)
        assert sum(lb.endswith(".gate") for lb in labels) == (0 if gate else linear) + (0 if qg else attn)
        assert sum(lb.endswith(".attn_gate") for lb in labels) == (0 if attn_gate else attn)
        ids = prompt_of(m, "chat")["ids"][:10]
        ref = np.load(d / "top64_chat.npz")
        _, one = check_both_ways(be, ids, {"ids": ref["ids"][:10], "logits": ref["logits"][:10]})
        assert np.abs(one - float_logits(cpu_float, ids)).max() < 1e-3
        # past one attention split (64 keys): the split and combine passes, not the direct one
        long = (prompt_of(m, "english")["ids"] + prompt_of(m, "chat")["ids"]) * 3
        be.kv.clear()
        be.forward(long[:66], 0)
        be.forward([long[66]], 66)
        got = be.forward([long[67]], 67)
        assert np.abs(got - float_logits(cpu_float, long[:68], all_logits=False)).max() < 1e-3
    finally:
        be.close()


ks8 = kernels_fixture("int8")


@pytest.mark.parametrize("q8", [True, False], ids=["int8-x", "f32-x"])
@pytest.mark.parametrize("qtype, layout", [("Q4_K", (32, 1)), ("Q6_K", (128, 4))], ids=["Q4_K-c64", "Q6_K"])
def test_ssm_out_matvec_gates_its_x_and_moves_the_conv_state(ks8, q8, qtype, layout):
    """ops.matvec gated (Qwen3.5-4B's S 128, 32 heads): x += W (RMSNorm(o per head) * w * silu(z)),
    against numpy's gate and gguf-py's weights; int8 x (64-weight chunks with Q4_K at 32 lanes) to
    8-bit x's error, f32 x to the f32 kernels'; the conv state [3, ch] moved on by proj[:ch]."""
    dev = ks8.dev
    rng = np.random.default_rng(5)
    S, HV, CH, KM1 = 128, 32, 96, 3
    k, m = S * HV, 2 * ops.matvec_rows(layout) + 8
    z_off = CH + 4
    raw = random_rows(rng, qtype, m, k)
    o = (rng.standard_normal((HV, S)) * rng.uniform(0.1, 5.0, (HV, 1))).astype(np.float32)
    proj = rng.standard_normal(z_off + k).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, S).astype(np.float32)
    st0 = rng.standard_normal((KM1, CH)).astype(np.float32)
    y0 = rng.standard_normal(m).astype(np.float32)
    ybuf, stb = dev.upload(y0), dev.upload(st0)
    z = proj[z_off:].reshape(HV, S).astype(np.float64)
    xg = z / (1 + np.exp(-z)) * (o / np.sqrt((o.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * nw)
    dispatch_once(dev, ops.matvec(ks8, [qtype], residual=True, layout=layout, q8x=k if q8 else 0,
                                  gated=(S, HV, CH, KM1)),
                  [dev.upload(o), ybuf, dev.upload(raw), dev.upload(proj), dev.upload(nw), stb],
                  ops.matvec_groups(m, layout), **dict(ops.matvec_params([qtype], k, [m], eps=1e-6), a1=z_off))
    want = y0 + dequant_reference(raw, qtype, k) @ xg.reshape(-1)
    assert rel_err(read_f32(dev, ybuf, m) - y0, want - y0) < (2e-2 if q8 else 1e-4)
    np.testing.assert_array_equal(read_f32(dev, stb, st0.size).reshape(st0.shape),
                                  np.concatenate([st0, proj[None, :CH]])[1:])
