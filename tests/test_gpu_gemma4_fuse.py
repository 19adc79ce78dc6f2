"""Gemma 4's fused decode (gpu/gemma4.py FUSE; HEARTH_GPU_G4_FUSE=0 turns it off): the decode matvec
with a pending post-norm added to its x (ops.matvec pre) and with gelu(W x) times the layer's input
as its epilogue (gelu_mul), against numpy, with f32 and int8 x; decode attention that norms, rotates
and stores q and the new K/V itself (attn_split prep) against numpy; then the tiny gemma4 (and its
dense 31B-like variant: no per-layer inputs, layer scale 0.8) decoded one token at a time with the
fusion on (=all), without the attention's part (=post) and off (=0), each against the CPU float path,
the fused plans 4 (3 without per-layer inputs) and 5 (4) dispatches a layer shorter; and the down
products on int8 blocks of their x written once (HEARTH_GPU_G4_DOWN_Q8=1) against llama.cpp. On lavapipe."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import ModelConfig  # noqa: E402
from hearth.engine.cpu_backend import CpuBackend  # noqa: E402
from hearth.engine.gguf import GGUFFile  # noqa: E402
from hearth.engine.gpu import gemma4 as g4, ops  # noqa: E402
from hearth.engine.gpu.backend import rope_table  # noqa: E402
from hearth.engine.gpu.kernels import dispatch_once  # noqa: E402
from hearth.engine.models.layers import Rope, attention, gelu_tanh_mul, rms_norm  # noqa: E402
from gpu_fixtures import (  # noqa: E402,F401
    RTOL, dequant_reference, kernels_fixture, poisoned, random_rows, read_f32, rel_err, rng)
from tests.test_gpu_gemma4 import gpu, make_dense_31b_like  # noqa: E402
from tests.tiny_next import check_both_ways, one_token_at_a_time, prompt_of  # noqa: E402

pytestmark = pytest.mark.gpu

LAYOUTS = [(32, 1), (64, 2), (256, 4), (64, 2, 2)]
EPS = 1e-6

ks = kernels_fixture(subgroup_modes=True)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def pending(rng, k: int, scale: float):
    """x, the branch output pt, its post-norm weight pw, and x' = (x + RMSNorm(pt) pw) scale."""
    x, pt, pw = f32(rng, k), f32(rng, k) * 5, f32(rng, k)
    return x, pt, pw, ((x + rms_norm(pt[None], pw, EPS)[0]) * np.float32(scale)).astype(np.float32)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_normed_product_adds_the_pending_post_norm_and_writes_the_new_residual(ks, rng, layout):
    dev = ks.dev
    k, m, s = 512, 3 * ops.matvec_rows(layout) + 1, 0.8
    raw = random_rows(rng, "Q4_K", m, k)
    x, pt, pw, xp = pending(rng, k, s)
    g = f32(rng, k)
    ref = dequant_reference(raw, "Q4_K", k) @ rms_norm(xp[None], g, EPS)[0].astype(np.float64)
    y, po = poisoned(dev, m + 3), poisoned(dev, k)
    dispatch_once(dev, ops.matvec(ks, ["Q4_K"], norm=True, layout=layout, pre=True),
                  [dev.upload(x), y, dev.upload(raw), dev.upload(g), dev.upload(pt), dev.upload(pw), po],
                  ops.matvec_groups(m, layout), **ops.matvec_params(["Q4_K"], k, [m], eps=EPS), a2=s)
    got = read_f32(dev, y, m + 3)
    assert rel_err(got[:m], ref) < RTOL
    assert np.isnan(got[m:]).all()                               # nothing written past M
    assert rel_err(read_f32(dev, po, k), xp) < RTOL


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_gate_takes_gelu_times_the_layers_input_in_its_epilogue(ks, rng, layout):
    """The per-layer branch's gate: y = gelu(W x') * em[a0:a0 + M], x' with the FFN's post-norm pending."""
    dev = ks.dev
    k, m, off = 256, 2 * ops.matvec_rows(layout) + 3, 40
    raw = random_rows(rng, "Q6_K", m, k)
    x, pt, pw, xp = pending(rng, k, 1.0)
    em = f32(rng, off + m + 16)
    gate = dequant_reference(raw, "Q6_K", k) @ xp.astype(np.float64)
    want = gelu_tanh_mul(gate.astype(np.float32), em[off:off + m])
    y, po = poisoned(dev, m + 3), poisoned(dev, k)
    dispatch_once(dev, ops.matvec(ks, ["Q6_K"], layout=layout, pre=True, gelu_mul=True),
                  [dev.upload(x), y, dev.upload(raw), dev.upload(pt), dev.upload(pw), po, dev.upload(em)],
                  ops.matvec_groups(m, layout), **ops.matvec_params(["Q6_K"], k, [m], eps=EPS), a0=off, a2=1.0)
    got = read_f32(dev, y, m + 3)
    assert rel_err(got[:m], want) < RTOL
    assert np.isnan(got[m:]).all()                               # pg's padding rows stay as they were
    assert rel_err(read_f32(dev, po, k), xp) < RTOL


@pytest.mark.parametrize("q8out", [False, True])
def test_int8_x_quantizes_the_sum_as_the_plain_product_would(ks, rng, q8out):
    """int8 x: the glu product with the post-norm pending equals the plain one run on the residual it
    wrote (the same values quantized; q8out: its int8 output blocks too), and that residual is numpy's."""
    dev = ks.dev
    if not dev.int8:
        pytest.skip("the device has no 4-way int8 dot products")
    k, m, types = 512, 64 if q8out else 33, ["Q4_K", "Q6_K"]
    lay = ops.GLU_Q8OUT_LAYOUT if q8out else ops.int8_layout(k, m, types)
    rg, ru = (random_rows(rng, t, m, k) for t in types)
    x, pt, pw, xp = pending(rng, k, 1.0)
    g = f32(rng, k)
    prm = ops.matvec_params(types, k, [m, m], eps=EPS, mode="glu")
    w = [dev.upload(rg), dev.upload(ru), dev.upload(g)]
    y, po, y_plain = poisoned(dev, m), poisoned(dev, k), poisoned(dev, m)
    # the int8 output blocks (q8out): [q8_words(m)] u32 each
    xo, xo_plain = ([[dev.upload(np.zeros(ops.q8_words(m), np.uint32))] for _ in range(2)] if q8out else ([], []))
    dispatch_once(dev, ops.matvec(ks, types, mode="glu", act="gelu", norm=True, layout=lay, q8x=k, q8out=q8out,
                                  pre=True),
                  [dev.upload(x), y] + w + xo + [dev.upload(pt), dev.upload(pw), po], ops.matvec_groups(m, lay),
                  **prm, a2=1.0)
    dispatch_once(dev, ops.matvec(ks, types, mode="glu", act="gelu", norm=True, layout=lay, q8x=k, q8out=q8out),
                  [po, y_plain] + w + xo_plain, ops.matvec_groups(m, lay), **prm)
    assert rel_err(read_f32(dev, po, k), xp) < RTOL
    np.testing.assert_allclose(read_f32(dev, y, m), read_f32(dev, y_plain, m), rtol=1e-6, atol=1e-6)
    if q8out:
        words = ops.q8_words(m)
        assert np.array_equal(dev.read([(xo[0], 0, words * 4)]), dev.read([(xo_plain[0], 0, words * 4)]))


@pytest.mark.parametrize("hd,n_rot,kv_len,window,writes", [(16, 16, 1, 0, True), (32, 16, 150, 0, True),
                                                         (512, 128, 300, 40, True), (256, 256, 100, 0, False)])
def test_attention_that_prepares_its_own_q_and_new_key(ks, rng, hd, n_rot, kv_len, window, writes):
    """attn_split prep: the raw Q|K|V row in, q and the new key head-normed and NeoX-rotated, the new
    value normed without a weight, that K/V stored at pos (writes; else the cache is only read, as a
    layer sharing another's K/V), the output numpy's attention over the cache with them."""
    dev = ks.dev
    nh, nkv, max_ctx, eps = 4, 2, 320, 1e-6
    pos, ch = kv_len - 1, g4.decode_attn_chunk(hd)
    v_off = (nh + nkv) * hd
    qkv = f32(rng, (nh + 2 * nkv) * hd)
    qn, kn = f32(rng, hd), f32(rng, hd)
    rope = Rope(n_rot, 1e4, True, freq_factors=(1.0 + rng.random(n_rot // 2)).astype(np.float32))
    cs = rope.cos_sin(pos, 1)
    k0, v0 = f32(rng, nkv, max_ctx, hd) * 0.3, f32(rng, nkv, max_ctx, hd)
    q = rms_norm(qkv[:nh * hd].reshape(1, nh, hd), np.tile(qn, (nh, 1)), eps)
    rope.apply(q, cs)
    k_want, v_want = k0.copy(), v0.copy()
    if writes:
        k = rms_norm(qkv[nh * hd:v_off].reshape(1, nkv, hd), np.tile(kn, (nkv, 1)), eps)
        rope.apply(k, cs)
        k_want[:, pos] = k[0]
        v_want[:, pos] = rms_norm(qkv[v_off:].reshape(nkv, hd), np.ones((1, hd), np.float32), eps)
    ref = attention(q, k_want, v_want, pos, window)[0]
    splits = ops.attn_splits(max_ctx)
    nsp = -(-kv_len // ch)
    part, out = poisoned(dev, nh * splits * (hd + 2)), poisoned(dev, nh * hd)
    step = dev.upload(np.array([pos, 1], np.uint32))
    kc, vc = dev.upload(k0), dev.upload(v0)
    extra = [dev.upload(rope_table(rope, max_ctx)), dev.upload(qn), dev.upload(kn)]
    p = dict(n_head=nh, n_kv=nkv, max_ctx=max_ctx, max_splits=splits, scale=1.0, window=window, n_rot=n_rot,
             v_off=v_off, eps=eps, kv_w=int(writes))
    if nsp == 1:
        dispatch_once(dev, ops.attn_split(ks, hd, direct=True, chunk=ch, prep=True),
                      [dev.upload(qkv), kc, vc, out, step] + extra, (1, nh, 1), **p)
    else:
        dispatch_once(dev, ops.attn_split(ks, hd, chunk=ch, prep=True), [dev.upload(qkv), kc, vc, part, step] + extra,
                      (nsp, nh, 1), **p)
        dispatch_once(dev, ops.attn_combine(ks, hd, chunk=ch), [part, out, step], (nh, 1, 1), **p)
    assert rel_err(read_f32(dev, out, nh * hd), ref) < RTOL
    assert rel_err(read_f32(dev, kc, k0.size).reshape(k0.shape), k_want) < RTOL
    assert rel_err(read_f32(dev, vc, v0.size).reshape(v0.shape), v_want) < RTOL


@pytest.mark.parametrize("q8", [True, False], ids=["int8-blocks", "f32-x"])
def test_down_products_on_int8_blocks_written_once(manifest, monkeypatch, q8):
    """The down products' x as int8 blocks written once (the default) or f32 (HEARTH_GPU_G4_DOWN_Q8=0),
    on the forced int8 path (the tiny gate/up weights are not quantized, so a quantize_x pass writes the
    blocks): one token at a time and as a batch, within llama.cpp's tolerance."""
    d, m = manifest
    monkeypatch.setattr(g4, "DOWN_Q8", q8)
    be = gpu(d / m["file"], "forced")
    try:
        labels = [op["label"] for op in be.decode_plan.ops]
        assert (be.ffq is not None and "0.quantize_x" in labels) == q8
        check_both_ways(be, prompt_of(m, "english")["ids"], np.load(d / "top64_english.npz"))
    finally:
        be.close()


@pytest.fixture(scope="module")
def models(manifest, tmp_path_factory):
    d, m = manifest
    dense = make_dense_31b_like(d / m["file"], tmp_path_factory.mktemp("g4f") / "d.gguf")
    return {"tiny": d / m["file"], "dense": dense}


@pytest.fixture(scope="module")
def manifest(reference_dir):
    import json
    d = reference_dir / "tiny-next" / "gemma4"
    return d, json.loads((d / "manifest.json").read_text())


@pytest.mark.parametrize("model", ["tiny", "dense"])
def test_decode_with_the_fusion_on_and_off_matches_the_cpu(models, manifest, model, monkeypatch):
    path = models[model]
    g = GGUFFile.open(path)
    cpu = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, int8=False)
    ids = prompt_of(manifest[1], "english")["ids"]
    with cpu.float_activations():
        want = cpu.forward(ids, 0, all_logits=True)
    bodies = {}
    for mode, fuse, rope in (("all", True, True), ("post", True, False), ("0", False, False)):
        monkeypatch.setattr(g4, "FUSE", fuse)
        monkeypatch.setattr(g4, "FUSE_ROPE", rope)
        be = gpu(path)
        try:
            assert (be.fuse, be.fuse_rope) == (fuse, rope)
            bodies[mode] = [op["label"] for op in be.decode_plan.ops[:be.decode_body]]
            np.testing.assert_allclose(one_token_at_a_time(be, ids), want, atol=1e-3)
        finally:
            be.close()
    n_layer, ple = cpu.cfg.n_layer, bool(cpu.cfg.hybrid.n_embd_per_layer)
    # fused: no post-norm passes but the last, no gelu_mul / scale passes; and no rope passes
    assert len(bodies["0"]) - len(bodies["post"]) == n_layer * (4 if ple else 3) - 1
    assert [lb for lb in bodies["post"] if lb.endswith(("post", "mul", "scale"))] == ["post"]
    assert len(bodies["post"]) - len(bodies["all"]) == n_layer
    assert not [lb for lb in bodies["all"] if lb.endswith("rope")]
