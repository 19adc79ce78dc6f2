"""Gemma 4's GPU kernels against numpy (wgsl/gemma4.wgsl through gpu/gemma4.py's builder, and the
attention kernels at Gemma 4's global head dim 512): q/k head norms with their weights, v's norm
without one, NeoX RoPE over part of the head, the K/V store (v from attn_v or from k's projection;
a layer that shares K/V writes q only), the per-layer inputs, GELU times the layer's input, the
layer output scale and the logits' soft-cap. On lavapipe."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.gpu import ops  # noqa: E402
from hearth.engine.gpu.gemma4 import decode_attn_chunk, elementwise_groups, g4_kernel  # noqa: E402
from hearth.engine.gpu.kernels import dispatch_once  # noqa: E402
from hearth.engine.gpu.backend import rope_table  # noqa: E402
from hearth.engine.models.layers import Rope, attention, gelu_tanh_mul, rms_norm  # noqa: E402
from gpu_fixtures import RTOL, device_and_kernels_fixtures, poisoned, read_f32, rel_err, rng  # noqa: E402,F401

pytestmark = pytest.mark.gpu


dev, ks = device_and_kernels_fixtures()


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("hd,n_rot,nkv,v_is_k", [(16, 16, 1, False), (512, 512, 2, True), (512, 128, 1, False),
                                                 (256, 256, 0, False)])
def test_qkv_norms_rope_and_store(dev, ks, rng, hd, n_rot, nkv, v_is_k):
    """nkv = 0: a layer that reads another layer's K/V (only q is written; the cache keeps its values)."""
    n, nh, pos, max_ctx, eps = 3, 2, 5, 16, 1e-6
    kv_heads = max(nkv, 1)
    cols = nh * hd + (nkv * hd if nkv else 0) + (nkv * hd if nkv and not v_is_k else 0)
    qkv = f32(rng, n, cols)
    qn, kn = f32(rng, hd), f32(rng, hd)
    rope = Rope(n_rot, 1e4, True, freq_factors=(1.0 + rng.random(n_rot // 2)).astype(np.float32))
    cs = rope.cos_sin(pos, n)
    q = rms_norm(qkv[:, :nh * hd].reshape(n, nh, hd), np.tile(qn, (nh, 1)), eps)
    rope.apply(q, cs)
    k0, v0 = f32(rng, kv_heads, max_ctx, hd), f32(rng, kv_heads, max_ctx, hd)
    kc, vc = dev.upload(k0), dev.upload(v0)
    qo = poisoned(dev, n * nh * hd)
    v_off = nh * hd + (0 if v_is_k else nkv * hd)
    dispatch_once(dev, g4_kernel(ks, "qkv", hd), [dev.upload(qkv), qo, kc, vc, dev.upload(rope_table(rope, max_ctx)),
                                                  dev.upload(np.array([pos, n], np.uint32)), dev.upload(qn), dev.upload(kn)],
                  ops.rope_groups(n, nh, nkv), n_head=nh, n_kv=nkv, n_rot=n_rot, max_ctx=max_ctx, stride=cols,
                  v_off=v_off, eps=eps)
    assert rel_err(read_f32(dev, qo, n * nh * hd).reshape(n, nh, hd), q) < RTOL
    k_want, v_want = k0.copy(), v0.copy()
    if nkv:
        k = rms_norm(qkv[:, nh * hd:(nh + nkv) * hd].reshape(n, nkv, hd), np.tile(kn, (nkv, 1)), eps)
        rope.apply(k, cs)
        v = rms_norm(qkv[:, v_off:v_off + nkv * hd].reshape(n, nkv, hd), np.ones((1, hd), np.float32), eps)
        k_want[:, pos:pos + n] = k.transpose(1, 0, 2)
        v_want[:, pos:pos + n] = v.transpose(1, 0, 2)
    assert rel_err(read_f32(dev, kc, k0.size).reshape(k0.shape), k_want) < RTOL
    assert rel_err(read_f32(dev, vc, v0.size).reshape(v0.shape), v_want) < RTOL


@pytest.mark.parametrize("kv_len,window", [(1, 0), (100, 0), (300, 0), (300, 40)])
def test_decode_attention_at_head_dim_512(dev, ks, rng, kv_len, window):
    """Head dim 512 needs a chunk of 128 keys (one thread per 4 values): one split and several, windowed."""
    hd, nh, nkv, max_ctx = 512, 4, 1, 320
    ch = decode_attn_chunk(hd)
    assert ch == 128
    k_c, v_c = f32(rng, nkv, max_ctx, hd) * 0.1, f32(rng, nkv, max_ctx, hd)
    q = f32(rng, 1, nh, hd)
    ref = attention(q, k_c, v_c, kv_len - 1, window)[0]
    splits = ops.attn_splits(max_ctx)
    nsp = -(-kv_len // ch)
    part, out = poisoned(dev, nh * splits * (hd + 2)), poisoned(dev, nh * hd)
    step = dev.upload(np.array([kv_len - 1, 1], np.uint32))
    qb, kc, vc = dev.upload(q), dev.upload(k_c), dev.upload(v_c)
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, max_splits=splits, scale=1.0, window=window)
    if nsp == 1:
        dispatch_once(dev, ops.attn_split(ks, hd, direct=True, chunk=ch), [qb, kc, vc, out, step], (1, nh, 1), **p)
    else:
        dispatch_once(dev, ops.attn_split(ks, hd, chunk=ch), [qb, kc, vc, part, step], (nsp, nh, 1), **p)
        dispatch_once(dev, ops.attn_combine(ks, hd, chunk=ch), [part, out, step], (nh, 1, 1), **p)
    assert rel_err(read_f32(dev, out, nh * hd), ref) < RTOL


def test_a_decode_chunk_too_small_for_the_head_is_refused(ks):
    with pytest.raises(ValueError, match="chunk"):
        ops.attn_split(ks, 512)


@pytest.mark.parametrize("pos,n,window,splits", [(0, 20, 0, 1), (30, 40, 16, 2)])
@pytest.mark.parametrize("kernel", ["rows", "wide"])
def test_prefill_attention_at_head_dim_512(dev, ks, rng, pos, n, window, splits, kernel, monkeypatch):
    """Both prefill kernels: a thread a query row (attn_prefill.wgsl), a row shared by threads
    (attn_prefill_wide.wgsl; at hd 64 here too, its smallest slice)."""
    monkeypatch.setenv("HEARTH_GPU_ATTN_WIDE_HD", "64" if kernel == "wide" else "off")
    hd, nh, nkv, max_ctx = 512, 2, 1, 96
    k_c, v_c = f32(rng, nkv, max_ctx, hd) * 0.1, f32(rng, nkv, max_ctx, hd)
    q = f32(rng, n, nh, hd)
    ref = attention(q, k_c, v_c, pos, window)
    part, out = poisoned(dev, n * nh * splits * (hd + 2)), poisoned(dev, n * nh * hd)
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, scale=1.0, window=window, n_splits=splits)
    dispatch_once(dev, ops.attn_prefill(ks, hd), [dev.upload(q), dev.upload(k_c), dev.upload(v_c), part,
                                                  dev.upload(np.array([pos, n], np.uint32))],
                  ops.attn_prefill_groups(n, nh, splits, hd), **p)
    dispatch_once(dev, ops.attn_prefill_combine(ks, hd), [part, out], ops.rows_groups(n * nh), **p)
    assert rel_err(read_f32(dev, out, n * nh * hd).reshape(n, -1), ref) < RTOL


def test_per_layer_inputs(dev, ks, rng):
    n, layers, npl, d, eps = 3, 4, 40, 64, 1e-6
    tok, proj, g = f32(rng, n * layers, npl), f32(rng, n * layers, npl) * 8, f32(rng, npl)
    want = (rms_norm(proj / np.float32(np.sqrt(d)), g, eps) + tok) / np.float32(np.sqrt(2))
    a = dev.upload(tok)
    dispatch_once(dev, g4_kernel(ks, "ple_in"), [a, dev.upload(proj), dev.upload(g)], ops.rows_groups(n * layers),
                  count=n * layers, npl=npl, scale=1.0 / np.sqrt(d), eps=eps)
    assert rel_err(read_f32(dev, a, tok.size).reshape(tok.shape), want) < RTOL


def test_gelu_times_the_layers_input_into_padded_rows(dev, ks, rng):
    """a [n, stride] (npl used, the padding left as it is) = gelu(a) * ple[:, layer]."""
    n, layers, npl, stride, layer = 3, 4, 8, 32, 2
    a0, ple = f32(rng, n, stride), f32(rng, n, layers * npl)
    want = a0.copy()
    want[:, :npl] = gelu_tanh_mul(a0[:, :npl], ple[:, layer * npl:(layer + 1) * npl])
    a = dev.upload(a0)
    dispatch_once(dev, g4_kernel(ks, "gelu_mul"), [a, dev.upload(ple)], elementwise_groups(n * npl),
                  count=n * npl, npl=npl, stride=stride, ldb=layers * npl, off=layer * npl)
    assert rel_err(read_f32(dev, a, a0.size).reshape(a0.shape), want) < RTOL


@pytest.mark.parametrize("pass_,param", [("softcap", 30.0), ("scale", 0.37)])
def test_elementwise_softcap_and_scale(dev, ks, rng, pass_, param):
    count = 1000
    x = f32(rng, count + 24) * 50           # past count: left untouched
    want = x.copy()
    want[:count] = param * np.tanh(x[:count] / param) if pass_ == "softcap" else x[:count] * np.float32(param)
    a = dev.upload(x)
    dispatch_once(dev, g4_kernel(ks, pass_), [a], elementwise_groups(count), count=count, scale=param)
    assert rel_err(read_f32(dev, a, x.size), want) < RTOL


def test_post_norm_residual_and_layer_scale_in_one_pass(dev, ks, rng):
    n, d, eps, s = 3, 96, 1e-6, 0.8
    x0, b, g = f32(rng, n, d), f32(rng, n, d) * 5, f32(rng, d)
    want = (x0 + rms_norm(b, g, eps)) * np.float32(s)
    a = dev.upload(x0)
    dispatch_once(dev, g4_kernel(ks, "norm_add_scale"), [dev.upload(b), a, dev.upload(g)], ops.rows_groups(n),
                  count=n, stride=d, eps=eps, scale=s)
    assert rel_err(read_f32(dev, a, x0.size).reshape(n, d), want) < RTOL
