"""The mixture-of-experts FFN (engine/models/moe.py) and attention with sinks
(engine/models/attention_sinks.py) against plain numpy references, on the tiny models' weights."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu.linear import Linear
from hearth.engine.gguf import GGUFFile
from hearth.engine.models.attention_sinks import attention_sinks
from hearth.engine.models.layers import attention
from hearth.engine.models.moe import MoeFfn, OnTheFly, swiglu_oai
from hearth.engine.quants import dequantize_tensor


def open_tiny(reference_dir, arch):
    g = GGUFFile.open(reference_dir / "tiny-next" / arch / f"tiny-{arch}.gguf")
    return g, ModelConfig.from_gguf(g)


def reference_moe(g, cfg, p, h):
    """Every token, every expert computed from the dequantized 3-D tensors, float64."""
    h = h.astype(np.float64)
    router = dequantize_tensor(g.tensors[p + "ffn_gate_inp.weight"]).astype(np.float64)      # [E, d]
    gate, up, down = (dequantize_tensor(g.tensors[p + f"ffn_{n}_exps.weight"]).astype(np.float64)
                      for n in ("gate", "up", "down"))                                      # [E, out, in]
    bias = {n: dequantize_tensor(g.tensors[p + n]).astype(np.float64) if p + n in g.tensors else None
            for n in ("ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias")}
    out = np.zeros_like(h)
    for t in range(len(h)):
        logits = router @ h[t] + (bias["ffn_gate_inp.bias"] if bias["ffn_gate_inp.bias"] is not None else 0)
        if cfg.expert_gating == "softmax":
            prob = np.exp(logits - logits.max())
            prob /= prob.sum()
            top = np.argsort(-prob, kind="stable")[:cfg.n_expert_used]
            w = prob[top] / prob[top].sum() if cfg.expert_weights_norm else prob[top]
        else:
            top = np.argsort(-logits, kind="stable")[:cfg.n_expert_used]
            w = np.exp(logits[top] - logits[top].max())
            w /= w.sum()
        for e, we in zip(top, w):
            gg, uu = gate[e] @ h[t], up[e] @ h[t]
            if cfg.activation == "swiglu_oai":
                gg, uu = gg + bias["ffn_gate_exps.bias"][e], uu + bias["ffn_up_exps.bias"][e]
                x = np.minimum(gg, 7.0)
                a = x / (1 + np.exp(-1.702 * x)) * (np.clip(uu, -7, 7) + 1)
            else:
                a = gg / (1 + np.exp(-gg)) * uu
            y = down[e] @ a
            if bias["ffn_down_exps.bias"] is not None:
                y += bias["ffn_down_exps.bias"][e]
            out[t] += we * y
    return out


@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss"])
def test_moe_ffn_matches_the_numpy_reference_for_a_batch_and_one_row(reference_dir, arch):
    g, cfg = open_tiny(reference_dir, arch)
    moe = MoeFfn(g, cfg, "blk.1.")
    h = np.random.default_rng(3).standard_normal((40, cfg.n_embd)).astype(np.float32)
    want = reference_moe(g, cfg, "blk.1.", h)
    got = moe(h, i8=False)
    np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())
    for t in (0, 17, 39):
        np.testing.assert_allclose(moe(h[t:t + 1], i8=False)[0], got[t], atol=1e-4 * np.abs(want).max())


def test_experts_are_views_of_the_mapped_file(reference_dir):
    """Nothing is copied to float at load: every expert matrix reads the file's own bytes."""
    for arch in ("qwen3moe", "gpt-oss"):
        g, cfg = open_tiny(reference_dir, arch)
        moe = MoeFfn(g, cfg, "blk.0.")
        file_bytes = g.file_bytes()
        parts = [p for m in [*moe.gate_up, *moe.down] for p in m.parts]
        assert len(parts) >= 2 * cfg.n_expert
        for p in parts:
            assert isinstance(p, (Linear, OnTheFly))
            assert all(w.dtype == np.uint8 and np.shares_memory(w, file_bytes) for w in p.ws)
        # a type with a CPU kernel (every type of these files, MXFP4 included: cpu/kernels_iq.py)
        # multiplies through Linear; OnTheFly is only for a type without one
        assert all(isinstance(p, Linear) for p in parts)


def test_a_pass_multiplies_only_the_chosen_experts_each_once(reference_dir):
    g, cfg = open_tiny(reference_dir, "qwen3moe")
    moe = MoeFfn(g, cfg, "blk.0.")
    calls: list[tuple[int, int]] = []
    moe.gate_up = [_Counting(m, e, calls) for e, m in enumerate(moe.gate_up)]
    h = np.random.default_rng(5).standard_normal((24, cfg.n_embd)).astype(np.float32)
    top, _ = moe.route(h)
    moe(h, i8=False)
    experts = [e for e, _ in calls]
    assert sorted(experts) == sorted(set(top.reshape(-1).tolist()))          # each chosen one, once
    assert sum(n for _, n in calls) == h.shape[0] * cfg.n_expert_used        # with all of its rows
    calls.clear()
    moe(h[:1], i8=True)                                                       # decode: k experts, one row
    assert sorted(e for e, _ in calls) == sorted(top[0].tolist()) and all(n == 1 for _, n in calls)


class _Counting:
    def __init__(self, fn, e, calls):
        self.fn, self.e, self.calls = fn, e, calls

    def __call__(self, act, work=None):
        self.calls.append((self.e, act.n))
        return self.fn(act, work)


def test_swiglu_oai_clamps_gate_above_and_up_on_both_sides():
    g = np.array([[-10.0, 0.5, 7.0, 30.0]], np.float32)
    u = np.array([[-30.0, 0.5, 7.0, 30.0]], np.float32)
    x = np.minimum(g.astype(np.float64), 7)
    want = x / (1 + np.exp(-1.702 * x)) * (np.clip(u, -7, 7) + 1)
    np.testing.assert_allclose(swiglu_oai(g, u), want, rtol=1e-6, atol=1e-6)
    assert swiglu_oai(g, u)[0, 3] == swiglu_oai(g, u)[0, 2]


def naive_sink_attention(q, k, v, pos, window, sinks):
    n, nh, hd = q.shape
    rep = nh // k.shape[0]
    out = np.zeros((n, nh, hd))
    for i in range(n):
        p = pos + i
        for h in range(nh):
            keys = [j for j in range(p + 1) if not (window and p - j >= window)]
            s = np.array([q[i, h] @ k[h // rep, j] for j in keys] + [sinks[h]], np.float64)
            e = np.exp(s - s.max())
            out[i, h] = (e[:-1] @ v[h // rep, keys]) / e.sum()
    return out.reshape(n, nh * hd)


@pytest.mark.parametrize("window", [0, 4])
@pytest.mark.parametrize("f16", [False, True])
@pytest.mark.parametrize("nh, nkv, hd, T", [(4, 2, 8, 13), (16, 2, 64, 150)])
def test_attention_with_sinks(window, f16, nh, nkv, hd, T):
    """The batch (numpy) and the last query alone (decode: cpu/attention.py's compiled heads; the
    larger shape takes its parallel launch and 64-column value sums) against float64."""
    rng = np.random.default_rng(11)
    k = rng.standard_normal((nkv, T + 19, hd)).astype(np.float16 if f16 else np.float32)
    v = rng.standard_normal((nkv, T + 19, hd)).astype(np.float16 if f16 else np.float32)
    q = (rng.standard_normal((T, nh, hd)) * hd ** -0.5).astype(np.float32)
    sinks = rng.standard_normal(nh).astype(np.float32) * 2
    want = naive_sink_attention(q, k.astype(np.float64), v.astype(np.float64), 0, window, sinks)
    np.testing.assert_allclose(attention_sinks(q, k, v, 0, window, sinks), want, atol=1e-5)
    # the last query alone (decode) sees the same keys
    np.testing.assert_allclose(attention_sinks(q[-1:], k, v, T - 1, window, sinks), want[-1:], atol=1e-5)
    # sinks of -inf are no sinks: the plain attention
    none = np.full(nh, -np.inf, np.float32)
    np.testing.assert_allclose(attention_sinks(q, k, v, 0, window, none), attention(q, k, v, 0, window), atol=1e-5)
    np.testing.assert_allclose(attention_sinks(q[-1:], k, v, T - 1, window, none),
                               attention(q[-1:], k, v, T - 1, window), atol=1e-5)
