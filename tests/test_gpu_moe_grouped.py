"""The grouped expert products of prefill (engine/gpu/moe_grouped.py: moe_sort.wgsl's tiles of TN pairs,
moe_mm8.wgsl) against numpy: gate then up with the activation, down weighted by the route and summed
over a token's slots, for the expert types of the full-size files (Q4_K, Q6_K, MXFP4) and more, on
routes with partial tiles, experts that get no pair and one expert taking every token (several tiles).
x is the int8 blocks the kernels read (q8_rows_ref); weights are dequantized by gguf-py."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.gpu import moe as gmoe
from hearth.engine.gpu import moe_grouped as mg
from hearth.engine.gpu import ops
from hearth.engine.gpu.kernels import dispatch_once
from hearth.engine.models.moe import swiglu_oai
from tests.gpu_fixtures import RTOL, kernels_fixture, poisoned, read_f32, rel_err
from tests.gpu_fixtures import rng  # noqa: F401  (the fixture)
from tests.test_gpu_matmul8 import q8_rows_ref, quantize
from tests.test_gpu_moe_kernels import experts


ks = kernels_fixture("int8")


def make_route(rng, n, E, k, kind):
    """u32 [n, 2k] (ids, then weights as bits) and the ids / weights: "random" over all E experts,
    "empty" leaving experts 1 and E - 1 without a pair, "all" giving expert 2 every token (slot 0)."""
    pool = {"random": np.arange(E), "empty": np.array([e for e in range(E) if e not in (1, E - 1)]),
            "all": np.array([e for e in range(E) if e != 2])}[kind]
    ids = np.stack([rng.permutation(pool)[:k] for _ in range(n)]).astype(np.uint32)
    if kind == "all":
        ids[:, 0] = 2
    w = rng.random((n, k)).astype(np.float32)
    w /= w.sum(1, keepdims=True)
    return ids, w, np.concatenate([ids, w.view(np.uint32)], axis=1)


def sorted_tiles(ks, route, n, E, k, tile):
    """moe_sort.wgsl's order and tiles for the grouped products, checked: each tile holds up to TN
    consecutive pairs of its expert, together every pair once; the rest count 0."""
    dev = ks.dev
    tn = 16 * tile[1]
    mt = mg.mm_max_tiles(n, k, E, tile)
    order = dev.upload(np.full(n * k, 0xFFFFFFFF, np.uint32))
    tiles = dev.upload(np.full(mt * 2, 0xFFFFFFFF, np.uint32))
    dispatch_once(dev, gmoe.sort_kernel(ks, E, k, tn), [dev.upload(route), order, tiles], (1, 1, 1), n=n, max_tiles=mt)
    o = dev.read([(order, 0, n * k * 4)]).view(np.uint32).astype(np.int64)
    t = dev.read([(tiles, 0, mt * 8)]).view(np.uint32).reshape(mt, 2).astype(np.int64)
    experts_of = route[:, :k].reshape(-1).astype(np.int64)
    covered = []
    for e, info in t:
        start, cnt = info & 0xFFFFFF, info >> 24
        assert cnt <= tn
        covered += o[start:start + cnt].tolist()
        assert (experts_of[o[start:start + cnt]] == e).all()
    assert sorted(covered) == list(range(n * k))
    return order, tiles


def act_ref(g, u, act):
    with np.errstate(over="ignore"):
        if act == "swiglu_oai":
            return swiglu_oai(g.astype(np.float32), u.astype(np.float32)).astype(np.float64)
        if act == "gelu":
            return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3))) * u
        return g / (1 + np.exp(-g)) * u


@pytest.mark.parametrize("qtype, act, bias, kind, tile", [
    ("Q4_K", "silu", False, "random", (8, 2)),
    ("Q4_K", "silu", False, "all", (8, 2)),
    ("MXFP4", "swiglu_oai", True, "empty", (8, 2)),
    ("MXFP4", "swiglu_oai", True, "all", (8, 8)),
    ("Q4_0", "silu", False, "empty", (8, 4)),
    ("Q8_0", "silu", True, "random", (8, 2)),
    ("IQ4_NL", "silu", False, "random", (8, 2)),
    ("IQ4_XS", "gelu", False, "random", (8, 2)),
    ("IQ2_XXS", "silu", False, "random", (8, 2)),
    ("IQ3_S", "gelu", False, "random", (8, 2)),
])
def test_grouped_gate_up(ks, rng, qtype, act, bias, kind, tile):
    dev = ks.dev
    n, E, k, d, ff = 40, 6, 2, 256, 80       # ff < TM: a partial row tile; 40 pairs of one expert: 2 tiles of 32
    rg, wg = experts(rng, qtype, E, ff, d)
    ru, wu = experts(rng, qtype, E, ff, d)
    x = (rng.standard_normal((n, d)) * 0.2).astype(np.float32)
    ids, _, route = make_route(rng, n, E, k, kind)
    bg, bu = (rng.standard_normal((E, ff)).astype(np.float32) for _ in range(2))
    xq, s_off = quantize(ks, x)
    xr = q8_rows_ref(x)
    order, tiles = sorted_tiles(ks, route, n, E, k, tile)
    y = poisoned(dev, n * k * ff)
    rt = dev.upload(route)
    for mode, raw, b in (("gate", rg, bg), ("up", ru, bu)):
        dispatch_once(dev, mg.mm_kernel(ks, mode, qtype, k, act=act, bias=bias, tile=tile),
                      [xq, rt, y, dev.upload(raw)] + ([dev.upload(b)] if bias else []) + [tiles, order],
                      mg.mm_groups(n, k, E, ff, tile), n=n,
                      **mg.mm_params(qtype, d, ff, ops.row_bytes(qtype, d) * ff, s_off))
    got = read_f32(dev, y, n * k * ff).reshape(n, k, ff)
    ref = np.zeros((n, k, ff))
    for t in range(n):
        for s in range(k):
            e = ids[t, s]
            g = wg[e] @ xr[t] + (bg[e] if bias else 0)
            u = wu[e] @ xr[t] + (bu[e] if bias else 0)
            ref[t, s] = act_ref(g, u, act)
    assert rel_err(got, ref) < RTOL * 5


@pytest.mark.parametrize("qtype, bias, kind, tile", [
    ("Q6_K", False, "random", (8, 2)),
    ("Q6_K", False, "all", (8, 4)),
    ("Q4_K", True, "empty", (8, 2)),
    ("MXFP4", True, "all", (8, 2)),
    ("MXFP4", False, "random", (8, 8)),
])
def test_grouped_down_and_the_slot_sum(ks, rng, qtype, bias, kind, tile):
    dev = ks.dev
    n, E, k, d, ff = 40, 6, 2, 144, 256      # d = 144: a partial row tile
    rd, wd = experts(rng, qtype, E, d, ff)
    h = rng.standard_normal((n * k, ff)).astype(np.float32)
    x0 = rng.standard_normal((n, d)).astype(np.float32)
    ids, w, route = make_route(rng, n, E, k, kind)
    bd = rng.standard_normal((E, d)).astype(np.float32)
    hq, s_off = quantize(ks, h)
    hr = q8_rows_ref(h)
    order, tiles = sorted_tiles(ks, route, n, E, k, tile)
    yd, y = poisoned(dev, n * k * d), dev.upload(x0)
    dispatch_once(dev, mg.mm_kernel(ks, "down", qtype, k, bias=bias, tile=tile),
                  [hq, dev.upload(route), yd, dev.upload(rd)] + ([dev.upload(bd)] if bias else []) + [tiles, order],
                  mg.mm_groups(n, k, E, d, tile), n=n, **mg.mm_params(qtype, ff, d, ops.row_bytes(qtype, ff) * d, s_off))
    dispatch_once(dev, gmoe.sum_kernel(ks, k), [yd, y], gmoe.sum_groups(n, d), d=d, n=n)
    got = read_f32(dev, y, n * d).reshape(n, d)
    ref = x0.astype(np.float64).copy()
    for t in range(n):
        for s in range(k):
            e = ids[t, s]
            ref[t] += w[t, s] * (wd[e] @ hr[t * k + s] + (bd[e] if bias else 0))
    assert rel_err(got - x0, ref - x0) < RTOL


def test_tile_choice_follows_the_pairs_an_expert_gets():
    assert mg.mm_tile(2048, 4, 32) == (8, 8)        # gpt-oss-20b: 256 pairs an expert
    assert mg.mm_tile(2048, 8, 128) == (8, 4)       # Qwen3-30B-A3B: 128
    assert mg.mm_tile(64, 8, 128) == (8, 2)


def test_types_without_an_int8_decoder_are_refused(ks):
    with pytest.raises(ValueError, match="Q5_0"):
        mg.mm_kernel(ks, "down", "Q5_0", 2)


@pytest.mark.parametrize("qtype, bias", [("Q6_K", False), ("Q4_K", True), ("MXFP4", True), ("Q8_0", False)])
def test_down_by_pair_quantizing_its_row_in_workgroup_memory(ks, rng, qtype, bias):
    """Decode's down product by pair (moe_grouped.add_down_by_pair): f32 rows in, each workgroup
    quantizes its pair's row itself, the weighted outputs summed over the slots into the residual."""
    dev = ks.dev
    n, E, k, d, ff = 2, 5, 3, 80, 256
    rd, wd = experts(rng, qtype, E, d, ff)
    h = rng.standard_normal((n * k, ff)).astype(np.float32)
    x0 = rng.standard_normal((n, d)).astype(np.float32)
    ids, w, route = make_route(rng, n, E, k, "random")
    bd = rng.standard_normal((E, d)).astype(np.float32)
    rows, c64 = gmoe.expert_layout([qtype], ff, True)
    yd, y = poisoned(dev, n * k * d), dev.upload(x0)
    rb = ops.row_bytes(qtype, ff)
    pairs = dev.upload(np.arange(n * k, dtype=np.uint32))
    dispatch_once(dev, gmoe.expert_kernel(ks, "down", [qtype], k, bias=bias, q8=True, rows=rows, c64=c64, order=True,
                                          qin=ops.q8_rows_words(1, ff)),
                  [dev.upload(h), dev.upload(route), yd, dev.upload(rd)] + ([dev.upload(bd)] if bias else []) + [pairs],
                  gmoe.expert_groups(d, n * k, rows, order=True),
                  K=ff, M=d, rb0=rb, eb0=rb * d, n=n, s_off=ops.q8_rows_scales(1, ff))
    dispatch_once(dev, gmoe.sum_kernel(ks, k), [yd, y], gmoe.sum_groups(n, d), d=d, n=n)
    hr = q8_rows_ref(h)
    ref = np.stack([sum(w[t, s] * (wd[ids[t, s]] @ hr[t * k + s] + (bd[ids[t, s]] if bias else 0))
                        for s in range(k)) for t in range(n)])
    assert rel_err(read_f32(dev, y, n * d).reshape(n, d) - x0, ref) < RTOL
