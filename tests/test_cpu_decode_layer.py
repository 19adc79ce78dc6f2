"""engine/cpu/decode_layer.py: a decoded token's layers as compiled calls, against the per-operation
path (decoder.py's norms, products, RoPE, store, attention and FFN one numpy/kernel call at a time).

Both paths quantize x with the same functions, sum every row of a product with the same block code
in the same order, and share the one-token attention, RMSNorm, RoPE and SiLU kernels, so the
compiled layers must give the same bits: logits and every K/V value, float16 and float32 caches,
straight after a prefill and with the attention spanning hundreds of positions (the heads then run
in parallel). The shared one-token attention is checked against numpy (tests/test_kv_f16.py and
below), the whole pass against llama.cpp by the agreement tests (test_models_smollm2.py,
test_models_tiny.py), which run through the compiled layers now.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.config import ModelConfig
from hearth.engine.cpu import decode_layer as D
from hearth.engine.cpu.attention import attend_one
from hearth.engine.cpu.linear import Activations, Linear
from hearth.engine.cpu.rows import silu_mul_rows
from hearth.engine.cpu_backend import CpuBackend
from hearth.engine.gguf import GGUFFile
from hearth.engine.models.compiled_layers import CompiledLayers
from hearth.engine.models.layers import attend_one_numpy
from hearth.engine.quants import TYPE_BY_NAME

from test_cpu_kernels import random_matrix


def _count_runs(be, monkeypatch) -> list:
    """Calls of the compiled layers' run (the test must know the fast path ran)."""
    calls = []
    comp = be.model.compiled
    assert comp is not None
    real = comp.run

    def run(*a, **k):
        calls.append(a[:2])
        return real(*a, **k)
    monkeypatch.setattr(comp, "run", run)
    return calls


def _decode(be, compiled: bool, ids, n_prefill: int, steps: int):
    """Prefill ids[:n_prefill] on the per-operation path, then `steps` one-token passes on the path
    asked for: (logits of each step, K and V of every layer as float32)."""
    dec = be.model
    dec.compiled_on = False
    be.kv.clear()
    if n_prefill:
        be.forward(ids[:n_prefill], 0)
    dec.compiled_on = compiled
    try:
        out = [be.forward([ids[n_prefill + j]], n_prefill + j) for j in range(steps)]
    finally:
        dec.compiled_on = True
    n = n_prefill + steps
    k = np.stack([be.kv.k[i][:, :n] for i in range(be.cfg.n_layer)]).astype(np.float32)
    v = np.stack([be.kv.v[i][:, :n] for i in range(be.cfg.n_layer)]).astype(np.float32)
    return out, k, v


@pytest.fixture(scope="module", params=["f16", "f32"])
def default_backend(request, default_model_path):
    g = GGUFFile.open(default_model_path)
    return CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=512, kv_dtype=request.param, int8=True)


@pytest.mark.parametrize("n_prefill", [0, 7, 300])
def test_compiled_layers_give_the_per_operation_bits_on_the_default_model(default_backend, n_prefill, monkeypatch):
    be = default_backend
    assert be.model.compiled_reason is None
    ids = [int(i) for i in np.random.default_rng(n_prefill).integers(0, be.cfg.n_vocab, n_prefill + 4)]
    calls = _count_runs(be, monkeypatch)
    got, k1, v1 = _decode(be, True, ids, n_prefill, 4)
    assert len(calls) >= 4                         # every step went through the compiled layers
    calls.clear()
    want, k0, v0 = _decode(be, False, ids, n_prefill, 4)
    assert not calls
    for a, b in zip(got, want):
        assert np.array_equal(a, b)
    assert np.array_equal(k1, k0) and np.array_equal(v1, v0)
    assert np.abs(k1[:, :, -1]).max() > 0          # the last step's K was stored


def test_a_prompt_s_last_token_runs_compiled_block_by_block(default_backend, monkeypatch):
    """A short input's last token (Decoder.forward's `tail`) runs one compiled layer after each
    block of the others: the same bits as the per-operation tail."""
    be = default_backend
    ids = list(range(200, 220))
    calls = _count_runs(be, monkeypatch)
    be.kv.clear()
    got = be.forward(ids, 0)
    assert calls == [(i, i + 1) for i in range(be.cfg.n_layer)]
    be.model.compiled_on = False
    try:
        be.kv.clear()
        want = be.forward(ids, 0)
    finally:
        be.model.compiled_on = True
    assert np.array_equal(got, want)


ARCHS = ["llama", "qwen2", "qwen3", "gemma3"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["f16", "f32"])
def test_tiny_models(reference_dir, arch, kv_dtype):
    """llama (Q4_0 Q4_1 Q5_0 Q8_0 F16 matrices, head size 16), qwen2 (q/k/v biases), qwen3 (q/k
    norms): the per-operation bits; gemma3 stays on the per-operation path."""
    d = reference_dir / "tiny" / arch
    manifest = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / manifest["file"])
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, kv_dtype=kv_dtype, int8=True)
    if arch == "gemma3":
        assert be.model.compiled_reason is not None and be.model.compiled is None
        return
    assert be.model.compiled_reason is None
    ids = next(p for p in manifest["prompts"] if p["name"] == "english")["ids"]
    ids = (list(ids) * 8)[:90]
    got, k1, v1 = _decode(be, True, ids, 80, 10)
    want, k0, v0 = _decode(be, False, ids, 80, 10)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)
    assert np.array_equal(k1, k0) and np.array_equal(v1, v0)


def test_float_x_and_the_switch_turn_the_compiled_layers_off(default_backend):
    be = default_backend
    assert be.model.compiled is not None
    with be.float_activations():
        assert be.model.compiled is None
    be.model.compiled_on = False
    assert be.model.compiled is None
    be.model.compiled_on = True


@pytest.mark.parametrize("types", [("Q4_1", "Q4_1", "Q8_0"), ("Q4_K", "Q4_K", "Q6_K"), ("Q2_K", "Q3_K", "Q5_K"),
                                   ("Q4_0", "Q5_0", "Q5_1"), ("F32", "F16", "BF16"), ("Q8_0", "F16", "Q4_K")])
def test_products_of_mixed_types_equal_the_linear_kernels(types):
    """The compiled layer's products (matrices of any types stacked, found by byte offset in one
    buffer) against Linear's one-row products of each matrix: the same bits."""
    cols, rows = 512, [37, 5, 64]
    mats = [random_matrix(t, r, cols, seed=i) for i, (t, r) in enumerate(zip(types, rows))]
    buf = np.concatenate([np.zeros(3, np.uint8)] + [m.reshape(-1) for m in mats])   # odd offsets
    meta = np.zeros((7, 3), np.int64)
    off = 3
    for j, m in enumerate(mats):
        meta[j] = (off, m.shape[0], m.shape[1])
        off += m.size
    tl = np.array([D.TYPE_CODES[t] for t in types] + [0] * 4, np.int64)
    sl = np.array([0.5, 1.0, 2.0, 1, 1, 1, 1], np.float32)
    x = np.random.default_rng(1).standard_normal(cols).astype(np.float32)
    q0, d0, s0 = np.empty(cols, np.int8), np.empty(cols // 32, np.float32), np.empty(cols // 32, np.float32)
    qk, dk, sk = np.empty(cols, np.int8), np.empty(cols // 256, np.float32), np.empty(cols // 16, np.int32)
    D.quantize_q8_0(x, q0, d0, s0)
    D.quantize_q8_k(x, qk, dk, sk)
    got = np.full(sum(rows), np.nan, np.float32)
    D._product(buf, meta, tl, sl, 0, 3, x, q0, d0, s0, qk, dk, sk, got)
    want = []
    for t, m, s in zip(types, mats, sl):
        lin = Linear(m, TYPE_BY_NAME[t], cols, int8=True)
        lin.scale = s
        want.append(lin(Activations(x[None], int8=True))[0])
    assert np.array_equal(got, np.concatenate(want))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("n_keys,start,hd,rep", [(1, 0, 64, 3), (21, 0, 64, 3), (700, 0, 64, 3), (300, 150, 64, 1),
                                                 (50, 0, 48, 2), (129, 0, 256, 4), (90, 3, 16, 2)])
def test_one_token_attention_against_numpy(dtype, n_keys, start, hd, rep):
    rng = np.random.default_rng(n_keys)
    nkv, max_ctx = 2, 1024
    k = rng.standard_normal((nkv, max_ctx, hd)).astype(dtype)
    v = rng.standard_normal((nkv, max_ctx, hd)).astype(dtype)
    q = (rng.standard_normal((1, nkv * rep, hd)) / np.sqrt(hd)).astype(np.float32)
    pos = start + n_keys - 1
    window = n_keys if start else 0
    ref = attend_one_numpy(q, k, v, pos, window)
    for parallel in (True, False):
        got = attend_one(q, k, v, start, n_keys, parallel)
        np.testing.assert_allclose(got, ref[0], rtol=1e-5, atol=1e-6)   # float32 sums in another order


def test_silu_rows_against_float64():
    g = np.concatenate([np.linspace(-100, 100, 1001), [-1e30, 1e30, -88.5, 88.5, 0.0]]).astype(np.float32)[None]
    u = np.random.default_rng(0).standard_normal(g.shape).astype(np.float32)
    got = silu_mul_rows(g, u)
    g64 = g.astype(np.float64)
    with np.errstate(over="ignore"):
        ref = g64 / (1.0 + np.exp(-g64)) * u
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-30)


def test_gemma3_shapes_are_refused_with_a_reason(reference_dir):
    d = reference_dir / "tiny" / "gemma3"
    manifest = json.loads((d / "manifest.json").read_text())
    g = GGUFFile.open(d / manifest["file"])
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=64)
    assert "gemma3" in CompiledLayers.reason(be.model, g.file_bytes())
