"""gpt-oss's decoded MoE block in one compiled call (engine/cpu/moe_mxfp4.py) against numpy: the
per-operation path (models/moe.py, the same 8-bit x and MXFP4 rows), a float64 reference of the
tiny model's layer with the same 8-bit inputs, and its pieces (top k with its softmax, the clamped SwiGLU) on their own."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.cpu.moe_mxfp4 import swiglu_oai_row, top_k_softmax
from hearth.engine.cpu.simd_vnni import lanes
from hearth.engine.models.layers import rms_norm
from hearth.engine.models.moe import MoeFfn, swiglu_oai
from hearth.engine.quants import dequantize_tensor
from tests.test_moe_layer import open_tiny


def q8_0(v: np.ndarray) -> np.ndarray:
    """v float64 [n] rounded to llama.cpp's Q8_0 values (blocks of 32: codes rint(v / d), d = amax / 127
    as float16), the input its MXFP4 dot products read."""
    b = v.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    inv = np.where(amax > 0, 127.0 / np.where(amax > 0, amax, 1), 0.0)
    return (np.rint(b * inv) * (amax / 127.0).astype(np.float16).astype(np.float64)).reshape(-1)


def reference_8bit(g, cfg, p, x, norm_w):
    """x [d] after gpt-oss's MoE block in float64 from the dequantized tensors, with the products'
    inputs (the normed x, each expert's activation) rounded to Q8_0 as the 8-bit path reads them."""
    t = {n: dequantize_tensor(g.tensors[p + n]).astype(np.float64) for n in (
        "ffn_gate_inp.weight", "ffn_gate_inp.bias", "ffn_gate_exps.weight", "ffn_gate_exps.bias",
        "ffn_up_exps.weight", "ffn_up_exps.bias", "ffn_down_exps.weight", "ffn_down_exps.bias")}
    x = x.astype(np.float64)
    h = x / np.sqrt(np.mean(x * x) + cfg.rms_eps) * norm_w
    logits = t["ffn_gate_inp.weight"] @ h + t["ffn_gate_inp.bias"]
    top = np.argsort(-logits, kind="stable")[:cfg.n_expert_used]
    w = np.exp(logits[top] - logits[top].max())
    w /= w.sum()
    hq, out = q8_0(h), x.copy()
    for e, we in zip(top, w):
        gg = t["ffn_gate_exps.weight"][e] @ hq + t["ffn_gate_exps.bias"][e]
        uu = t["ffn_up_exps.weight"][e] @ hq + t["ffn_up_exps.bias"][e]
        a = np.minimum(gg, 7.0)
        a = a / (1 + np.exp(-1.702 * a)) * (np.clip(uu, -7, 7) + 1)
        out += we * (t["ffn_down_exps.weight"][e] @ q8_0(a) + t["ffn_down_exps.bias"][e])
    return out


def _both(moe, norm_w, eps, x):
    """x float32 [1, d] after the block: (per-operation path, compiled call)."""
    old, new = x.copy(), x.copy()
    old += moe(rms_norm(old, norm_w, eps), True)
    assert moe.decode_residual(new[0], norm_w, eps, True)
    return old, new


def _layer(reference_dir, layer, x8):
    g, cfg = open_tiny(reference_dir, "gpt-oss")
    moe = MoeFfn(g, cfg, f"blk.{layer}.")
    assert moe.fused or lanes() == 0
    assert moe.x8_pending == moe.fused
    moe.fused = True          # the kernel on any CPU (without VNNI its MXFP4 rows are generic IR)
    moe.x8_pending = x8
    moe.repack_experts()
    assert moe.x8 == x8
    return g, cfg, moe


@pytest.mark.parametrize("x8", [False, True])
@pytest.mark.parametrize("layer", [0, 1])
def test_fused_block_matches_the_per_operation_path_and_a_float64_reference(reference_dir, layer, x8):
    """Both layouts: the file's rows, or the experts repacked in groups of 8 rows (cpu/mxfp4_x8.py;
    the per-operation path then runs linear_x8.LinearX8, the same 8-row kernel)."""
    g, cfg, moe = _layer(reference_dir, layer, x8)
    p = f"blk.{layer}."
    norm_w = dequantize_tensor(g.tensors[p + "post_attention_norm.weight"]).astype(np.float32)   # [d]
    rng = np.random.default_rng(layer)
    for _ in range(6):
        x = (rng.standard_normal((1, cfg.n_embd)) * 2).astype(np.float32)
        old, new = _both(moe, norm_w, cfg.rms_eps, x)
        delta = np.abs(old - x).max()
        # the same codes and rows: only the router's sum order and exp's last bits differ
        np.testing.assert_allclose(new, old, rtol=0, atol=1e-5 * delta)
        want = reference_8bit(g, cfg, p, x[0], norm_w)
        np.testing.assert_allclose(new[0], want, rtol=0, atol=1e-3 * delta)


def test_repacked_layer_prefill_and_decode_match_the_file_layout(reference_dir):
    """The same layer repacked: prefill rows (each expert's rows through the VNNI tiles, to the bit,
    or the 8-row decode kernel for up to 4 rows) and one decoded row agree with the file's layout
    within the decode kernel's float-order difference; nothing of the repacked layer reads the file's
    map any more."""
    _, cfg, old = _layer(reference_dir, 0, False)
    g, _, new = _layer(reference_dir, 0, True)
    mapped = g.file_bytes()
    for m in new.matrices():
        for part in m.parts:
            assert not any(np.shares_memory(w, mapped) for w in part.ws)
    assert not any(np.shares_memory(a, mapped) for a in new._raw[2:5])
    rng = np.random.default_rng(3)
    for n in (1, 3, 40):
        h = (rng.standard_normal((n, cfg.n_embd)) * 2).astype(np.float32)
        want, got = old(h, True), new(h, True)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


def test_repack_drops_each_tensors_pages(reference_dir):
    g, cfg = open_tiny(reference_dir, "gpt-oss")
    moe = MoeFfn(g, cfg, "blk.1.")
    dropped = []
    moe._drop = dropped.append
    moe.x8_pending = True
    moe.repack_experts()
    names = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")
    assert [a.ctypes.data for a in dropped] == [g.tensors["blk.1." + n].data.ctypes.data for n in names]
    data = g.tensors["blk.1.ffn_up_exps.weight"].data
    before = data.copy()
    g.drop_pages(data)                                   # the real madvise: the data reads the same
    np.testing.assert_array_equal(data, before)
    with pytest.raises(ValueError, match="one span"):
        g.drop_pages(np.zeros(4096, np.uint8))


def test_switch_off_leaves_the_per_operation_path(reference_dir, monkeypatch):
    g, cfg = open_tiny(reference_dir, "gpt-oss")
    moe = MoeFfn(g, cfg, "blk.0.")
    moe.fused = True
    x = np.ones(cfg.n_embd, np.float32)
    assert moe.decode_residual(x.copy(), np.ones_like(x), cfg.rms_eps, True)     # on by default
    monkeypatch.setenv("HEARTH_CPU_MOE_FUSED", "0")
    assert not moe.decode_residual(x, np.ones_like(x), cfg.rms_eps, True)
    monkeypatch.delenv("HEARTH_CPU_MOE_FUSED")
    assert not moe.decode_residual(x, np.ones_like(x), cfg.rms_eps, False)   # float x: not this kernel
    moe.down[0].parts[0].int8 = False                                       # the backend's float path
    assert not moe.decode_residual(x, np.ones_like(x), cfg.rms_eps, True)
    assert np.all(x == 1.0)
    g2, cfg2 = open_tiny(reference_dir, "qwen3moe")
    assert not MoeFfn(g2, cfg2, "blk.0.").fused                             # Q-type experts, SiLU


@pytest.mark.parametrize("n, k", [(32, 4), (8, 2), (5, 5)])
def test_top_k_softmax_matches_numpy_ties_to_the_lower_index(n, k):
    rng = np.random.default_rng(n)
    for trial in range(20):
        logits = rng.standard_normal(n).astype(np.float32)
        if trial % 2:
            logits = np.round(logits).astype(np.float32)                   # many ties
        top, w = top_k_softmax(logits, k)
        want = np.argsort(-logits, kind="stable")[:k]
        np.testing.assert_array_equal(top, want)
        e = np.exp(logits[want].astype(np.float64) - logits[want].max())
        np.testing.assert_allclose(w, e / e.sum(), rtol=1e-6)


@pytest.mark.parametrize("n", [2880, 64, 13])
def test_swiglu_oai_row_matches_numpy_with_clamps(n):
    rng = np.random.default_rng(n)
    g = (rng.standard_normal(n) * 6).astype(np.float32)
    u = (rng.standard_normal(n) * 6).astype(np.float32)
    g[:4] = [100.0, -100.0, 7.0, 6.99]
    u[:4] = [-50.0, 50.0, -7.0, 7.5]
    out = np.empty(n, np.float32)
    swiglu_oai_row(g, u, out)
    with np.errstate(over="ignore"):
        want = swiglu_oai(g, u)
    np.testing.assert_allclose(out, want, rtol=4e-7, atol=1e-30)      # exp within ~2 ulp of numpy's


def test_x8_switch_off_keeps_the_mapped_rows(reference_dir, monkeypatch):
    g, cfg = open_tiny(reference_dir, "gpt-oss")
    monkeypatch.setenv("HEARTH_CPU_MXFP4_X8", "0")
    moe = MoeFfn(g, cfg, "blk.0.")
    assert not moe.x8_pending
    moe.repack_experts()
    assert not moe.x8 and np.shares_memory(moe._raw[2], g.file_bytes())


@pytest.mark.parametrize("switch", ["1", "0"])
def test_repacked_experts_are_part_of_the_prefix_key(reference_dir, monkeypatch, switch):
    """The 8-row experts sum in another float order, so K/V they computed never serve an engine
    reading the mapped rows (prefix-image keys hold backend.describe())."""
    from hearth.engine.cpu_backend import CpuBackend   # noqa: PLC0415
    from hearth.engine.prefix.key import key_digest    # noqa: PLC0415
    monkeypatch.setenv("HEARTH_CPU_MXFP4_X8", switch)
    g, cfg = open_tiny(reference_dir, "gpt-oss")
    backend = CpuBackend(cfg, g, n_ctx=32, int8=True)
    repacked = switch == "1" and lanes() != 0
    assert (backend.describe().get("experts") == "mxfp4-x8") == repacked
    assert ("experts" in backend.describe()) == repacked
    plain = {k: v for k, v in backend.describe().items() if k != "experts"}
    keys = {key_digest(backend=d, model=b"m", ids=[1, 2]) for d in (backend.describe(), plain)}
    assert len(keys) == (2 if repacked else 1)
