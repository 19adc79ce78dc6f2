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
from tests.gpu_fixtures import RTOL, kernels_fixture, poisoned, read_f32, rel_err
from tests.gpu_fixtures import rng  # noqa: F401  (the fixture)
from tests.gpu_moe_refs import checked_tiles, down_ref, experts, glu_ref, routes
from tests.test_gpu_matmul8 import q8_rows_ref, quantize


ks = kernels_fixture("int8")


def sorted_tiles(ks, route, n, E, k, tile):
    """moe_sort.wgsl's order and tiles for the grouped products (TN = 16 tile[1] pairs a tile), checked."""
    return checked_tiles(ks, route, n, E, k, 16 * tile[1], mg.mm_max_tiles(n, k, E, tile))


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
    ids, _, route = routes(rng, n, E, k, kind)
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
    ref = glu_ref(ids, xr, wg, wu, act, *((bg, bu) if bias else ()))
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
    ids, w, route = routes(rng, n, E, k, kind)
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
    assert rel_err(got - x0, down_ref(ids, w, hr, wd, bd if bias else None)) < RTOL


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
    ids, w, route = routes(rng, n, E, k)
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
    ref = down_ref(ids, w, q8_rows_ref(h), wd, bd if bias else None)
    assert rel_err(read_f32(dev, y, n * d).reshape(n, d) - x0, ref) < RTOL


def test_each_call_length_takes_its_tile_and_the_logits_do_not_change(ks, reference_dir, monkeypatch):
    """The tiny gpt-oss (8 experts, top 2) in a 1,024-token chunk: calls of 513..1,024 tokens take 8x8
    tiles, 257..512 8x4, up to 256 8x2 (ops.tiles_by_n over mm_tile), each range its own sort and
    products. A call runs one range's ops and gives the logits of the chunk's tile alone
    (HEARTH_GPU_TILE_BY_N=0); a call that ran none would leave the experts' output unwritten."""
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.gpu import GpuBackend  # noqa: PLC0415
    g = GGUFFile.open(reference_dir / "tiny-next" / "gpt-oss" / "tiny-gpt-oss.gguf")
    cfg = ModelConfig.from_gguf(g)
    ranges = ops.tiles_by_n(0, 1024, lambda m, n: mg.mm_tile(n, cfg.n_expert_used, cfg.n_expert))
    assert [t for t, _, _ in ranges] == [(8, 8), (8, 4), (8, 2)]
    ids = (np.arange(600, dtype=np.int32) * 37) % cfg.n_vocab

    def run(by_n):
        monkeypatch.setenv("HEARTH_GPU_TILE_BY_N", "1" if by_n else "0")
        be = GpuBackend(cfg, g, 1024, adapter=ks.dev.adapter, chunk=1024)
        try:
            sorts = sum(op["label"].endswith("experts.sort") for op in be.prefill_plan.ops)
            for n in (100, 300, 600):           # a call dispatches one range's products (the others' cost)
                live = [op["label"].rsplit(".", 1)[-1] for op in be.prefill_plan.ops if "experts" in op["label"]
                        and (not callable(op["groups"]) or op["groups"](n, n)[0])]
                assert sorted(live) == sorted(["sort", "gate", "up", "down", "q8", "sum"] * cfg.n_layer), live
            return sorts, [be.forward(ids[:n], 0) for n in (100, 300, 600)]
        finally:
            be.close()
    sorts, by = run(True)
    assert sorts == 3 * cfg.n_layer
    sorts, one = run(False)
    assert sorts == cfg.n_layer
    for a, b in zip(by, one):
        np.testing.assert_array_equal(a, b)
