"""Decode's MoE and gpt-oss passes with fewer dispatches (gpu/moe.py and backend.py take them; each
has a switch keeping the older passes, for A/B runs):

    route    moe_router.wgsl: the FFN norm, the router's logits (+ bias) and xn's int8 blocks for one
             token over E / EPW workgroups; the top k inside the gate/up product (moe_matvec.wgsl TOPK,
             moe_topk.wgsl), its workgroup 0 writing the route for the down product. One dispatch
             where the dense matvec's logits and moe_route.wgsl's top k took two. HEARTH_GPU_MOE_FUSE=0
             keeps those.
    down     by rows: the per-token product with the token's k slots in parallel inside a workgroup
             (moe_matvec.wgsl SPAR: thread groups (row, slot) of the expert layout's lanes, at most
             256 / k lanes a group), each workgroup quantizing the token's k rows in workgroup memory,
             summing its rows' k weighted products there and adding them to the residual: as many
             workgroups as by pair (gpt-oss-20b: 2 rows x 4 slots x 32 lanes, 1,440; Qwen3-30B-A3B: 4 x
             8 x 8, 512) with no yd buffer and no moe_sum pass (one dispatch less a layer), for k times
             the quantizing a workgroup (one pass of its 256 threads for Qwen3-30B's 8 rows of 768, two
             for gpt-oss's 4 of 2,880). Off unless HEARTH_GPU_MOE_DOWN_ROWS=1: on the H200 it cost
             gpt-oss-20b decode 237.0 against 257.3-260.7 tok/s pipelined by pair + moe_sum
             (bench/README.md); every workgroup quantizing all k rows outweighs the pass it saves.
    window   gpt-oss's windowed layers: decode attention over the window's keys with the sinks merge
             inside (attn_sinks.wgsl "window", a workgroup a head) where the window fits a workgroup:
             one dispatch for the split pass (which reads every split's values) and the merge.
             HEARTH_GPU_SINK_WINDOW=0 keeps those two.
"""

from __future__ import annotations

import os

from . import ops

MOE_FUSE = os.environ.get("HEARTH_GPU_MOE_FUSE", "") != "0"
DOWN_ROWS = os.environ.get("HEARTH_GPU_MOE_DOWN_ROWS", "") == "1"
SINK_WINDOW = os.environ.get("HEARTH_GPU_SINK_WINDOW", "") != "0"


def router_kernel(ks, n_expert: int, bias: bool, q8: bool):
    """Decode's router over router_groups workgroups (moe_router.wgsl). Bindings: x [d] (the residual),
    router [E, d], logits [E], g [d], xn out [d][, xq (q8)][, bias [E]]. Params d, n, eps, s_off."""
    from .moe import ROUTE_FIELDS

    access = ["r", "r", "rw", "r", "rw"] + (["rw"] if q8 else []) + (["r"] if bias else [])
    return ks.get("moe_router.wgsl", access, ROUTE_FIELDS, E=int(n_expert), EPW=router_epw(n_expert), BIAS=bool(bias),
                  Q8=bool(q8))


def router_epw(n_expert: int) -> int:
    """Experts a workgroup of decode's router: at most 64 workgroups (each also takes the norm)."""
    epw = 1
    while n_expert // (2 * epw) >= 64 and n_expert % (2 * epw) == 0 and epw < 8:
        epw *= 2
    return epw


def router_groups(n_expert: int):
    return n_expert // router_epw(n_expert), 1, 1


def sink_window_threads(window: int, head_dim: int) -> int:
    """Threads a workgroup of the windowed attention (a key each, a multiple of head_dim / 4); 0 where
    it is not built (no window, past 256 keys, head dim not a power of two, or SINK_WINDOW off)."""
    if not SINK_WINDOW or not 0 < window <= 256 or head_dim & (head_dim - 1) or head_dim < 4:
        return 0
    ws = max(32, head_dim // 4)
    while ws < window:
        ws *= 2
    return ws if ws <= 256 else 0


def sink_window(ks, head_dim: int, threads: int, kv_f16: bool = False):
    """Bindings: q, k cache, v cache, out [n_head, head_dim], sinks [n_head], step. Params:
    sink_params with a = the window. Workgroups: (n_head, 1, 1)."""
    from .moe import SINK_FIELDS

    return ks.get("attn_sinks.wgsl", ["r", "r", "r", "rw", "r", "r"], SINK_FIELDS, HD=int(head_dim), PASS="window",
                  WS=int(threads), KV_F16=bool(kv_f16))


def down_rows_layout(ffn) -> tuple[int, int, bool]:
    """(thread groups a workgroup, rows a workgroup, c64) of decode's down product by rows: the expert
    layout's lanes a (row, slot), halved until a row's k slots fit 256 threads."""
    from .moe import expert_layout

    k, ff = ffn.be.cfg.n_expert_used, ffn.be.cfg.n_ff_exp
    rows, c64 = expert_layout([ffn.down.qtype], ff, ffn.q8_down)
    lanes = 256 // rows
    while lanes * k > 256 and lanes > 8:
        lanes //= 2
    return 256 // lanes, 256 // (lanes * k), c64


def down_by_rows_ok(ffn) -> bool:
    """Whether decode's down product runs by rows (k slots fit a workgroup's thread groups; with int8
    x, the token's k rows of blocks fit workgroup memory beside the reduction)."""
    c = ffn.be.cfg
    q8_fits = not ffn.q8_down or ffn._fits(ops.q8_rows_words(c.n_expert_used, c.n_ff_exp) + 32)
    return DOWN_ROWS and q8_fits and 8 * c.n_expert_used <= 256


def add_down_by_rows(ffn, P, n_of) -> None:
    """Decode's down product by rows with the slots in parallel, summed into x (see the docstring)."""
    from .moe import expert_kernel

    be, c, ks = ffn.be, ffn.be.cfg, ffn.be.ks
    d, k, ff, i = c.n_embd, c.n_expert_used, c.n_ff_exp, ffn.i
    db = [ffn.b_down] if ffn.b_down is not None else []
    groups, rpw, c64 = down_rows_layout(ffn)
    qin = ops.q8_rows_words(k, ff) if ffn.q8_down else 0
    P.add(expert_kernel(ks, "down", [ffn.down.qtype], k, bias=bool(db), q8=ffn.q8_down, rows=groups, c64=c64, qin=qin,
                        spar=rpw),
          [ffn.bufs["ffe"], ffn.bufs["route"], be.x, ffn.down.buffer] + db,
          lambda n, kv: (-(-d // rpw), n_of(n, kv), 1), f"{i}.experts.down",
          K=ff, M=d, rb0=ffn.down.rb, eb0=ffn.down.eb, n=n_of, s_off=ops.q8_rows_scales(k, ff) if qin else 0)
