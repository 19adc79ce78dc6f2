"""The experts' prefill products as grouped matrix products (moe_mm8.wgsl; llama.cpp's mul_mat_id).

After the route, moe_sort.wgsl groups a chunk's (token, slot) pairs by expert and cuts each expert's
run into tiles of TN = 16 RN pairs; then one dispatch a product runs matmul8.wgsl's tiling (mm8_tile.wgsl,
which both kernels import) over all experts at once, workgroup (row tile, pair tile):

    sort      route -> order [n k], tiles [max_tiles, 2] (expert, first | count << 24)  (moe_sort.wgsl)
    gate      ffe[j] = Wg_e xn[t] (+ bg)                                                (moe_mm8.wgsl)
    up        ffe[j] = act(ffe[j], Wu_e xn[t] (+ bu))
    [q8]      ffe's rows as int8 blocks                                           (quantize_rows.wgsl)
    down      yd[j] = w_s (Wd_e ffe[j] (+ bd))
    sum       x[t] += sum_s yd[t k + s]                                                  (moe_sum.wgsl)

Each weight block is read once for up to TN pairs of its expert (moe_tile.wgsl reads it once for
4, the per-pair products once a pair), with the dense int8 product's arithmetic. It needs the int8
dot products and weight types with an int8 decoder (q16.wgsl: MM_TYPES); otherwise, or with
HEARTH_GPU_MOE_MM=0, MoeFfn keeps moe_tile.wgsl's tiles of 4 pairs.

Decode's down product by pair (`add_down_by_pair`): workgroup (pair, row group) as prefill's ORDER
products, each quantizing its pair's row in workgroup memory, writing yd; then moe_sum.wgsl. The
per-token product runs one workgroup a row group for all k slots in turn: Qwen3-30B-A3B's (2,048
rows of 768, 32 rows a workgroup) is 64 workgroups on a GPU that holds a thousand; by pair it is
k times as many, for one more (tiny) dispatch. HEARTH_GPU_MOE_DOWN_PAIRS=0 keeps the per-token one.
Decode takes neither unless HEARTH_GPU_MOE_DOWN_ROWS=0: moe_decode.add_down_by_rows comes first.
"""

from __future__ import annotations

import os

from ..errors import EngineError
from . import ops

MM_TYPES = ops.INT8_MM_TYPES + ("MXFP4",)
MOE_MM = os.environ.get("HEARTH_GPU_MOE_MM", "") != "0"
DOWN_PAIRS = os.environ.get("HEARTH_GPU_MOE_DOWN_PAIRS", "") != "0"
MM_FIELDS = (("K", "u"), ("M", "u"), ("rb0", "u"), ("eb0", "u"), ("s_off4", "u"), ("n", "u"), ("pad0", "u"),
             ("pad1", "u"))
# Tiles (rows, pairs a thread: 16 RM x 16 RN a workgroup) by the pairs an expert gets on average in a
# full chunk: the dense product's 8x8 where most tiles fill (gpt-oss-20b, 2,048 tokens: 256 pairs an
# expert), fewer pairs a tile where most experts get fewer (Qwen3-30B-A3B: 128), so that partial
# tiles waste less.
MM_TILES = ((8, 8), (8, 4), (8, 2))


def mm_kernel(ks, mode: str, qtype: str, slots: int, act: str = "silu", bias: bool = False, tile=(8, 8)):
    """mode "gate" | "up" | "down". Bindings: xq, route, y, w[, b], tiles, order. Params K, M, rb0,
    eb0, s_off4 (the scales' first word / 4), n. Workgroups: mm_groups."""
    if qtype not in MM_TYPES:
        raise ValueError(f"no grouped int8 expert product for weight type {qtype}")
    rm, rn = tile
    if (rm, rn) not in MM_TILES + ((4, 4), (4, 8)):
        raise ValueError(f"moe_mm8 tile {rm}x{rn} per thread is not built")
    access = ["r", "r", "rw", "r"] + (["r"] if bias else []) + ["r", "r"]
    return ks.get("moe_mm8.wgsl", access, MM_FIELDS, MODE=mode, QTYPE=qtype, SLOTS=int(slots), ACT=act,
                  BIAS=bool(bias), RM=int(rm), RN=int(rn), Q8X=1, C64=True)


def mm_tile(chunk: int, k: int, n_expert: int) -> tuple[int, int]:
    """The tile for a chunk of `chunk` tokens: the most pairs a tile that the average expert fills."""
    avg = chunk * k // max(1, n_expert)
    for rm, rn in MM_TILES:
        if avg >= 32 * rn:
            return rm, rn
    return MM_TILES[-1]


def mm_max_tiles(n: int, k: int, n_expert: int, tile) -> int:
    """The most pair tiles n tokens make: n k / TN, plus a partial one per expert used."""
    tn = 16 * tile[1]
    return -(-(n * k) // tn) + min(n_expert, n * k)


def mm_groups(n: int, k: int, n_expert: int, m: int, tile):
    t = mm_max_tiles(n, k, n_expert, tile)
    if t > 65535:
        raise EngineError(f"{t} expert tiles in one dispatch (at most 65,535)")
    return -(-m // (16 * tile[0])), t, 1


def mm_params(qtype: str, k: int, m: int, eb: int, s_off: int) -> dict:
    if s_off % 4:
        raise ValueError("the scales of an int8 X must start on a 16-byte boundary")
    return dict(K=k, M=m, rb0=ops.row_bytes(qtype, k), eb0=eb, s_off4=s_off // 4)


def usable(ffn) -> bool:
    """Whether this MoeFfn's prefill takes the grouped products."""
    types = (ffn.gate.qtype, ffn.up.qtype, ffn.down.qtype)
    return (MOE_MM and ffn.q8_gate_up and ffn.q8_down and all(t in MM_TYPES for t in types)
            and ffn.bufs.get("yd") is not None)


def add_grouped(ffn, P, n_of, act: str) -> None:
    """Prefill after the route (xn's int8 blocks in bufs["xq"]): sort, gate, up, down, the slots' sum.
    Each range of call lengths has its tile (ops.tiles_by_n) and its own sort and products, the others
    dispatching nothing: a 512-token prompt gives gpt-oss's experts 64 pairs each, which the chunk's
    128-pair tiles would leave half empty."""
    from .moe import sort_kernel, sum_groups, sum_kernel

    be, c, ks = ffn.be, ffn.be.cfg, ffn.be.ks
    d, k, ff, i, E = c.n_embd, c.n_expert_used, c.n_ff_exp, ffn.i, c.n_expert
    route, ffe, order, tiles, yd, xq = (ffn.bufs[b] for b in ("route", "ffe", "order", "tiles", "yd", "xq"))
    ranges = ops.tiles_by_n(0, be.chunk, lambda m, n: mm_tile(n, k, E))
    gb = list(ffn.b_gate_up) if ffn.b_gate_up is not None else [None, None]
    s_x = ops.q8_rows_scales(be.chunk, d)
    for tile, lo, hi in ranges:
        P.add(sort_kernel(ks, E, k, 16 * tile[1]), [route, order, tiles],
              ops.in_range(lambda n: (1, 1, 1), lo, hi, n_of), f"{i}.experts.sort", n=n_of,
              max_tiles=lambda n, kv, t=tile: mm_max_tiles(n_of(n, kv), k, E, t))
        for mode, ex, b in (("gate", ffn.gate, gb[0]), ("up", ffn.up, gb[1])):
            P.add(mm_kernel(ks, mode, ex.qtype, k, act=act, bias=b is not None, tile=tile),
                  [xq, route, ffe, ex.buffer] + ([b] if b is not None else []) + [tiles, order],
                  ops.in_range(lambda n, t=tile: mm_groups(n, k, E, ff, t), lo, hi, n_of), f"{i}.experts.{mode}",
                  n=n_of, **mm_params(ex.qtype, d, ff, ex.eb, s_x))
    nk = lambda n, kv: n_of(n, kv) * k  # noqa: E731
    hq = ffn._quantize(P, ffe, ff, nk, f"{i}.experts.down")
    db = [ffn.b_down] if ffn.b_down is not None else []
    for tile, lo, hi in ranges:
        # the sort's order and tiles of this range are still in place: the other ranges' sorts did not run
        P.add(mm_kernel(ks, "down", ffn.down.qtype, k, bias=bool(db), tile=tile),
              [hq, route, yd, ffn.down.buffer] + db + [tiles, order],
              ops.in_range(lambda n, t=tile: mm_groups(n, k, E, d, t), lo, hi, n_of), f"{i}.experts.down",
              n=n_of, **mm_params(ffn.down.qtype, ff, d, ffn.down.eb, ops.q8_rows_scales(be.chunk * k, ff)))
    P.add(sum_kernel(ks, k), [yd, be.x], lambda n, kv: sum_groups(n_of(n, kv), d), f"{i}.experts.sum", d=d, n=n_of)


def down_by_pair_ok(ffn) -> bool:
    """Whether decode's down product runs by pair (int8 x, yd allocated, one row's blocks fit beside
    the reduction in workgroup memory)."""
    ff = ffn.be.cfg.n_ff_exp
    return DOWN_PAIRS and ffn.q8_down and ffn.bufs.get("yd") is not None and ffn._fits(ops.q8_rows_words(1, ff))


def add_down_by_pair(ffn, P, n_of) -> None:
    """Decode's down product by (pair, row group) into yd, then the slots' sum into x (see the docstring)."""
    from .moe import expert_groups, expert_kernel, expert_layout, sum_groups, sum_kernel

    be, c, ks = ffn.be, ffn.be.cfg, ffn.be.ks
    d, k, ff, i = c.n_embd, ffn.slots, c.n_ff_exp, ffn.i     # slots: with the shared expert's (moe_decode)
    db = [ffn.b_down] if ffn.b_down is not None else []
    rows, c64 = expert_layout([ffn.down.qtype], ff, True)
    sh = [ffn.sh_down] if ffn.shared else []      # the last slot's own matrix (moe_decode.SHEXP_FUSE)
    P.add(expert_kernel(ks, "down", [ffn.down.qtype] + [m.qtype for m in sh], k, bias=bool(db), q8=True, rows=rows,
                        c64=c64, order=True, qin=ops.q8_rows_words(1, ff), shared=bool(sh)),
          [ffn.bufs["ffe"], ffn.bufs["route"], ffn.bufs["yd"], ffn.down.buffer] + db + [ffn.bufs["pairs"]]
          + [m.buffer for m in sh],
          lambda n, kv: expert_groups(d, n_of(n, kv) * k, rows, order=True), f"{i}.experts.down",
          K=ff, M=d, rb0=ffn.down.rb, eb0=ffn.down.eb, n=n_of, s_off=ops.q8_rows_scales(1, ff),
          rb1=ops.row_bytes(sh[0].qtype, ff) if sh else 0)
    P.add(sum_kernel(ks, k), [ffn.bufs["yd"], be.x], lambda n, kv: sum_groups(n_of(n, kv), d), f"{i}.experts.sum",
          d=d, n=n_of)

