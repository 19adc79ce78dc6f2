"""The decode matvec in every layout the backend picks for large matrices (lanes per row group, rows
per thread), with and without subgroup operations, against float64 references on fresh random
data; the new block types through the prefill matmul and the embedding; the layout choice itself;
and the decode plan's context-dependent attention merge (fused into the O projection, or a combine
pass first) on a whole model. Runs on lavapipe in CI, like tests/test_gpu_kernels.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.gpu import probe

if probe() is None:
    pytest.skip("wgpu finds no adapter", allow_module_level=True)

from hearth.engine.config import ModelConfig  # noqa: E402
from hearth.engine.gguf import GGUFFile  # noqa: E402
from hearth.engine.gpu import GpuBackend, ops  # noqa: E402
from hearth.engine.gpu.kernels import dispatch_once  # noqa: E402
from hearth.engine.models.layers import rms_norm  # noqa: E402
from gpu_fixtures import (  # noqa: E402
    RTOL, dequant_reference, gpu_adapter, kernels_fixture, poisoned, random_rows, read_f32, rel_err)

pytestmark = pytest.mark.gpu

LAYOUTS = [(32, 1), (64, 2), (128, 4), (256, 4), (256, 1), (32, 1, 4), (64, 2, 2), (256, 2, 4)]


ks = kernels_fixture(subgroup_modes=True)


@pytest.fixture
def rng():
    return np.random.default_rng()


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_concat_three_types_with_norm_and_bias(ks, rng, layout):
    dev = ks.dev
    rpw = ops.matvec_rows(layout)
    k, types = 512, ["Q4_K", "Q3_K", "Q5_1"]
    rows = [4 * rpw, 2 * rpw, 2 * rpw + 3]            # boundaries on workgroups; the last one partial
    raws = [random_rows(rng, t, r, k) for t, r in zip(types, rows)]
    w = np.concatenate([dequant_reference(r, t, k) for r, t in zip(raws, types)])
    x, g, b = f32(rng, k), f32(rng, k), f32(rng, sum(rows))
    ref = rms_norm(x[None], g, 1e-5)[0].astype(np.float64) @ w.T + b
    y = poisoned(dev, sum(rows) + 5)
    dispatch_once(dev, ops.matvec(ks, types, norm=True, bias=True, layout=layout),
                  [dev.upload(x), y] + [dev.upload(r) for r in raws] + [dev.upload(g), dev.upload(b)],
                  ops.matvec_groups(sum(rows), layout), **ops.matvec_params(types, k, rows, eps=1e-5))
    got = read_f32(dev, y, sum(rows) + 5)
    assert rel_err(got[:sum(rows)], ref) < RTOL
    assert np.isnan(got[sum(rows):]).all()                # nothing written past M


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("types", [("Q4_0", "Q8_0"), ("Q2_K", "Q6_K"), ("F16", "Q5_K")])
def test_glu_with_norm(ks, rng, layout, types):
    dev = ks.dev
    k, m = 768, 3 * ops.matvec_rows(layout) + 1
    rg, ru = (random_rows(rng, t, m, k) for t in types)
    # g at 1/4: F16 rows of N(0, 1) over K = 768 give gates of sigma ~28 with a unit g. Then silu(gate) * up
    # of a gate near 0 carries the gate's f32 rounding times |up| (~100) while the other six outputs are
    # ~0 (gates of -20 and below), so the output norm is no yardstick: once in CI, 1.35e-3 (seeded probe:
    # g x3 gives 1.2e-4, x1/4 2.3e-6 over 150 draws). Real gates are O(1); any indexing mistake is still O(1).
    x, g = f32(rng, k), 0.25 * f32(rng, k)
    h = rms_norm(x[None], g, 1e-6)[0].astype(np.float64)
    gate, up = dequant_reference(rg, types[0], k) @ h, dequant_reference(ru, types[1], k) @ h
    ref = gate / (1 + np.exp(-gate)) * up
    y = poisoned(dev, m)
    dispatch_once(dev, ops.matvec(ks, list(types), mode="glu", norm=True, layout=layout),
                  [dev.upload(x), y, dev.upload(rg), dev.upload(ru), dev.upload(g)], ops.matvec_groups(m, layout),
                  **ops.matvec_params(list(types), k, [m, m], eps=1e-6, mode="glu"))
    assert rel_err(read_f32(dev, y, m), ref) < RTOL


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("qtype", ["Q4_1", "Q5_0", "F32"])
def test_residual_with_offsets(ks, rng, layout, qtype):
    dev = ks.dev
    k, m = 1024, 2 * ops.matvec_rows(layout) + 5
    raw = random_rows(rng, qtype, m, k)
    xs = f32(rng, 3 * k)
    y0 = f32(rng, 2 * m)
    ybuf = dev.upload(y0)
    dispatch_once(dev, ops.matvec(ks, [qtype], residual=True, layout=layout), [dev.upload(xs), ybuf, dev.upload(raw)],
                  ops.matvec_groups(m, layout), **ops.matvec_params([qtype], k, [m], x_off=2 * k, y_off=m))
    got = read_f32(dev, ybuf, 2 * m)
    assert np.array_equal(got[:m], y0[:m])
    assert rel_err(got[m:], y0[m:] + dequant_reference(raw, qtype, k) @ xs[2 * k:]) < RTOL


@pytest.mark.parametrize("layout", [(32, 1), (64, 2), (128, 4), (256, 4), (256, 2)])
def test_qkv_rope_pairs_in_wide_workgroups(ks, rng, layout):
    """The fused Q|K|V + RoPE + cache store pairs rows i and i + RPW/2 of a workgroup: every layout
    with an even number of rows a workgroup must rotate the same pairs."""
    from hearth.engine.config import RopeScaling  # noqa: PLC0415
    from hearth.engine.models.layers import Rope  # noqa: PLC0415
    dev = ks.dev
    nh, nkv, hd, d, max_ctx, pos = 4, 2, 64, 256, 16, 9
    rows, types = [nh * hd, nkv * hd, nkv * hd], ["Q8_0", "Q4_0", "Q6_K"]
    assert rows[1] % ops.matvec_rows(layout) == 0
    raws = [random_rows(rng, t, r, d) for t, r in zip(types, rows)]
    w = np.concatenate([dequant_reference(r, t, d) for r, t in zip(raws, types)]).astype(np.float32)
    x, g = f32(rng, d), f32(rng, d)
    qkv = rms_norm(x[None], g, 1e-5) @ w.T
    rope = Rope(hd, 10000.0, False, RopeScaling())
    q = qkv[:, :nh * hd].reshape(1, nh, hd).copy()
    k = qkv[:, nh * hd:(nh + nkv) * hd].reshape(1, nkv, hd).copy()
    v = qkv[:, (nh + nkv) * hd:].reshape(1, nkv, hd)
    cs = rope.cos_sin(pos, 1)
    rope.apply(q, cs)
    rope.apply(k, cs)
    c, s = rope.cos_sin(0, max_ctx)
    table = np.ascontiguousarray(np.stack([c[:, 0, :], s[:, 0, :]], axis=-1), np.float32)
    qo = poisoned(dev, nh * hd)
    kc0, vc0 = f32(rng, nkv, max_ctx, hd), f32(rng, nkv, max_ctx, hd)
    kc, vc = dev.upload(kc0), dev.upload(vc0)
    bufs = ([dev.upload(x), qo] + [dev.upload(r) for r in raws] + [dev.upload(g), kc, vc, dev.upload(table),
            dev.upload(np.array([pos, 1], np.uint32))])
    dispatch_once(dev, ops.matvec(ks, types, norm=True, rope="normal", layout=layout), bufs,
                  ops.matvec_groups(sum(rows), layout), **dict(ops.matvec_params(types, d, rows, eps=1e-5), a0=hd,
                                                               a1=max_ctx))
    assert rel_err(read_f32(dev, qo, nh * hd), q.reshape(-1)) < RTOL
    kg = read_f32(dev, kc, kc0.size).reshape(kc0.shape)
    vg = read_f32(dev, vc, vc0.size).reshape(vc0.shape)
    assert rel_err(kg[:, pos], k[0]) < RTOL and rel_err(vg[:, pos], v[0]) < RTOL
    others = np.arange(max_ctx) != pos
    assert np.array_equal(kg[:, others], kc0[:, others]) and np.array_equal(vg[:, others], vc0[:, others])


@pytest.mark.parametrize("qtype", ["Q5_1", "Q2_K", "Q3_K", "Q5_K"])
def test_new_block_types_in_matmul_and_embedding(ks, rng, qtype):
    dev = ks.dev
    k, m, n = 512, 70, 37
    raw = random_rows(rng, qtype, m, k)
    w = dequant_reference(raw, qtype, k)
    x = f32(rng, n, k)
    y = poisoned(dev, n * m)
    dispatch_once(dev, ops.matmul(ks, [qtype]), [dev.upload(x), y, dev.upload(raw)], ops.matmul_groups(m, n),
                  **ops.matmul_params([qtype], k, m, n, ldy=m))
    assert rel_err(read_f32(dev, y, n * m).reshape(n, m), x.astype(np.float64) @ w.T) < RTOL
    ids = rng.integers(0, m, 5).astype(np.uint32)
    e = poisoned(dev, 5 * k)
    dispatch_once(dev, ops.embed(ks, qtype), [dev.upload(ids), e, dev.upload(raw)], ops.rows_groups(5),
                  d=k, row_bytes=ops.row_bytes(qtype, k), scale=1.0, n=5)
    assert rel_err(read_f32(dev, e, 5 * k).reshape(5, k), w[ids]) < RTOL


@pytest.mark.parametrize("k,m,mult", [(4096, 14336, 0), (14336, 4096, 0), (4096, 6144, 1024), (2048, 3072, 512),
                                      (576, 960, 192), (2048, 128256, 0), (576, 1536, 0), (96, 40, 8), (4096, 4096, 6)])
def test_layout_choice(k, m, mult):
    lanes, rpt, unroll = ops.matvec_layout(k, m, mult)
    rpw = ops.matvec_rows((lanes, rpt))
    assert unroll in (1, 2, 4)
    assert lanes in (32, 64, 128, 256) and 1 <= rpt <= ops.MATVEC_MAX_RPT
    assert mult == 0 or mult % rpw == 0
    assert lanes == 32 or k // 8 >= 2 * lanes           # every lane has work
    assert ops.matvec_layout(k, m, mult, mats=2)[2] == 1
    assert rpt == 1 or m // rpw >= ops.MATVEC_TARGET_GROUPS


@pytest.mark.slow
def test_attention_merge_fused_or_separate_gives_the_same_model(reference_dir, monkeypatch):
    """The decode plan holds the O projection twice (merging the attention splits itself, or after a
    combine pass) and kv_len picks one: past 64 positions (a second split) the switch happens, and
    both plans must give the model the same logits as the all-fused and the never-fused builds."""
    d = reference_dir / "tiny" / "llama"
    man = json.loads((d / "manifest.json").read_text())
    ids = np.asarray(next(p for p in man["prompts"] if p["name"] == "english")["ids"], np.int32)
    g = GGUFFile.open(d / man["file"])
    cfg = ModelConfig.from_gguf(g)
    prompt = np.resize(ids, 60)
    adapter = gpu_adapter()

    def run(fuse_bytes):
        monkeypatch.setattr(ops, "ATTN_FUSE_BYTES", fuse_bytes)
        be = GpuBackend(cfg, g, 160, adapter=adapter)
        try:
            out = [be.forward(prompt, 0)]
            for i in range(10):                            # positions 60..69: one and two splits
                out.append(be.forward(np.array([int(ids[i % len(ids)])], np.int32), 60 + i))
            combines = sum(op["label"].endswith("combine") for op in be.decode_plan.ops)
            return np.array(out), combines
        finally:
            be.close()
    never, n_never = run(0)
    always, n_always = run(1 << 40)
    groups = ops.matvec_groups(cfg.n_embd, ops.matvec_layout(cfg.n_head * cfg.head_dim, cfg.n_embd))[0]
    one_split = groups * cfg.n_head * cfg.head_dim * 4          # the fused merge's bytes per split
    switch, n_switch = run(one_split)                            # fused at one split, combined at two
    assert n_never == n_switch == cfg.n_layer and n_always == 0
    assert np.abs(never - always).max() < 1e-4
    assert np.abs(switch - never).max() < 1e-4
