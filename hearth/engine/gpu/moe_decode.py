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
    top k    the ranks in two rounds (moe_topk.wgsl GROUPS): the top k inside the gate/up product runs
             in every one of its workgroups (Qwen3-30B-A3B: 768; qwen35moe: 512), and ranking each
             of E experts against all E (256 for qwen35moe: 256 dependent steps a thread, 2,048 warp
             steps a workgroup) costs more GPU time than the dispatch it saved; by groups of 32 it
             is 32 + 64 steps (E = 256, k = 8). HEARTH_GPU_MOE_TOPK=rank keeps the one round.
    shared   qwen35moe's shared expert as one more slot of the experts' passes: its gate logit as
             one more router row (moe_router.wgsl SHX), its slot's weight sigmoid(logit) (the top
             k, moe_topk.wgsl SHARED), its gate/up matrices stored after the routed experts' as
             expert E (gpu/moe.py Experts extra; a copy: prefill reads its own), its down matrix
             bound beside the routed one's (a Q4_K_M mix gives it other types than theirs), so
             gate/up and the down product by pair take it beside the routed ones and moe_sum.wgsl
             adds it: 4 dispatches an FFN where the separate
             shared expert took 7 (its gate/up matvec, shexp_gate.wgsl, its down product). Where
             shared_slot_ok / shared_path_ok do not hold (types or widths differ, no int8 x, the
             down product neither by pair nor by rows), the layer keeps the separate passes, as
             HEARTH_GPU_MOE_SHEXP_FUSE=0 does everywhere.
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
TOPK_GROUPS = os.environ.get("HEARTH_GPU_MOE_TOPK", "") != "rank"
SHEXP_FUSE = os.environ.get("HEARTH_GPU_MOE_SHEXP_FUSE", "") != "0"


def router_kernel(ks, n_expert: int, bias: bool, q8: bool, shx: bool = False):
    """Decode's router over router_groups workgroups (moe_router.wgsl). Bindings: x [d] (the residual),
    router [E, d], logits [E (+1 shx)], g [d], xn out [d][, xq (q8)][, bias [E]][, w_sh [d] (shx)].
    Params d, n, eps, s_off."""
    from .moe import ROUTE_FIELDS

    access = ["r", "r", "rw", "r", "rw"] + (["rw"] if q8 else []) + (["r"] if bias else []) + (["r"] if shx else [])
    return ks.get("moe_router.wgsl", access, ROUTE_FIELDS, E=int(n_expert), EPW=router_epw(n_expert), BIAS=bool(bias),
                  Q8=bool(q8), SHX=bool(shx))


def router_epw(n_expert: int) -> int:
    """Experts a workgroup of decode's router: at most 64 workgroups (each also takes the norm)."""
    epw = 1
    while n_expert // (2 * epw) >= 64 and n_expert % (2 * epw) == 0 and epw < 8:
        epw *= 2
    return epw


def router_groups(n_expert: int, shx: bool = False):
    return n_expert // router_epw(n_expert) + bool(shx), 1, 1


def shared_slot_ok(be, p: str, names: dict) -> bool:
    """Whether a qwen35moe layer's shared expert (names: gate, up, down, gate_inp) can be stored as
    expert E of the routed experts' tensors for decode's fused passes: SHEXP_FUSE and the fused route
    on, the device's int8 products, its matrices of the routed ones' types (int8-x types) and shapes,
    a chunk of 2 tokens or more (its slot's rows sit in the per-token buffers' second token)."""
    from .moe import expert_layout, moe_int8

    c, tens = be.cfg, be.weights.g.tensors
    d, ff = c.n_embd, c.n_ff_exp
    if not (SHEXP_FUSE and MOE_FUSE and be.chunk >= 2 and moe_int8(be.dev)):
        return False
    for part, shape in (("gate", (d, ff)), ("up", (d, ff)), ("down", (ff, d))):
        t, te = tens.get(names[part]), tens.get(f"{p}ffn_{part}_exps.weight")
        if t is None or te is None or tuple(int(s) for s in t.shape) != shape or t.type.name not in ops.INT8_TYPES:
            return False
        if part != "down" and t.type != te.type:      # gate/up: stored as expert E of the routed tensors
            return False
        if part == "down" and expert_layout([t.type.name], ff, True) != expert_layout([te.type.name], ff, True):
            return False                              # down: its own binding, in the routed ones' layout
    return names["gate_inp"] in tens


def attach_shared(ffn, names: dict) -> None:
    """A MoeFfn's decode slots (k, + 1 for the shared expert where its passes carry it: `shared`) and
    the shared expert's gate vector and down matrix (names as shared_slot_ok's, {} for none)."""
    c, W = ffn.be.cfg, ffn.be.weights
    ffn.slots = c.n_expert_used + bool(names)       # shared_path_ok's down-by-rows check counts the candidate slot
    ffn.shared = bool(names) and shared_path_ok(ffn)
    ffn.slots = c.n_expert_used + ffn.shared
    ffn.sh_gate = W.vector(names["gate_inp"], c.n_embd) if ffn.shared else None                 # [d]
    ffn.sh_down = W.matrix(names["down"], c.n_embd, c.n_ff_exp) if ffn.shared else None         # ff -> d


def shared_path_ok(ffn) -> bool:
    """Whether decode takes the passes that carry the shared expert's slot (the fused route, the down
    product by rows or by pair) for this MoeFfn, its weights loaded and its slots counting the shared one."""
    from . import moe_grouped

    return (ffn.q8_gate_up and ffn._fused_route_ok()
            and (down_by_rows_ok(ffn) or moe_grouped.down_by_pair_ok(ffn)))


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

    k, ff = getattr(ffn, "slots", ffn.be.cfg.n_expert_used), ffn.be.cfg.n_ff_exp    # with the shared slot
    rows, c64 = expert_layout([ffn.down.qtype], ff, ffn.q8_down)
    lanes = 256 // rows
    while lanes * k > 256 and lanes > 8:
        lanes //= 2
    return 256 // lanes, 256 // (lanes * k), c64


def down_by_rows_ok(ffn) -> bool:
    """Whether decode's down product runs by rows (k slots fit a workgroup's thread groups; with int8
    x, the token's k rows of blocks fit workgroup memory beside the reduction)."""
    c, k = ffn.be.cfg, ffn.slots
    q8_fits = not ffn.q8_down or ffn._fits(ops.q8_rows_words(k, c.n_ff_exp) + 32)
    return DOWN_ROWS and q8_fits and 8 * k <= 256


def add_down_by_rows(ffn, P, n_of) -> None:
    """Decode's down product by rows with the slots in parallel, summed into x (see the docstring)."""
    from .moe import expert_kernel

    be, c, ks = ffn.be, ffn.be.cfg, ffn.be.ks
    d, k, ff, i = c.n_embd, ffn.slots, c.n_ff_exp, ffn.i
    db = [ffn.b_down] if ffn.b_down is not None else []
    sh = [ffn.sh_down] if ffn.shared else []          # the last slot's own matrix (SHEXP_FUSE)
    groups, rpw, c64 = down_rows_layout(ffn)
    qin = ops.q8_rows_words(k, ff) if ffn.q8_down else 0
    P.add(expert_kernel(ks, "down", [ffn.down.qtype] + [m.qtype for m in sh], k, bias=bool(db), q8=ffn.q8_down,
                        rows=groups, c64=c64, qin=qin, spar=rpw, shared=bool(sh)),
          [ffn.bufs["ffe"], ffn.bufs["route"], be.x, ffn.down.buffer] + db + [m.buffer for m in sh],
          lambda n, kv: (-(-d // rpw), n_of(n, kv), 1), f"{i}.experts.down",
          K=ff, M=d, rb0=ffn.down.rb, eb0=ffn.down.eb, n=n_of, s_off=ops.q8_rows_scales(k, ff) if qin else 0,
          rb1=ops.row_bytes(sh[0].qtype, ff) if sh else 0)
