"""Mixture-of-experts FFN and attention sinks on the GPU (qwen3moe, gpt-oss; see engine/DESIGN.md).

`MoeFfn(backend, i)` is one layer's MoE FFN: its weights uploaded once (every expert resident, the
3-D `ffn_{gate,up,down}_exps` tensors byte for byte in their GGUF types: nothing is staged as
float), and `add_decode(plan)` / `add_prefill(plan)` append its dispatches to a Plan:

    route     RMSNorm x -> xn (ffn_norm; gpt-oss: post_attention_norm), xn's int8 blocks, router
              logits (+ bias), top k, weights -> route [n, 2k]                    (moe_route.wgsl)
              (decode: norm, logits and xn's blocks over many workgroups (moe_router.wgsl), the
              top k inside the gate/up product, whose workgroup 0 writes route: gpu/moe_decode.py)
    [sort]    prefill: the (token, slot) pairs grouped by expert -> order       (moe_sort.wgsl)
              (prefill with int8 products: moe_grouped.py's tiled products from here on)
    glu       per (token, slot): act(gate_e xn (+b)) * (up_e xn (+b)) -> ffe [n, k, n_ff_exp]
    [q8]      prefill: ffe's rows as int8 blocks                             (quantize_rows.wgsl)
    down      decode: x += sum_s w_s (down_{e_s} ffe[t, s] (+b)), ffe quantized in workgroup memory
              (by rows, the k slots in parallel in a workgroup: moe_decode.add_down_by_rows)
              prefill: per pair (by expert) yd = w_s (down_e ffe (+b)), then x += sum_s yd (moe_sum.wgsl)

Decode is 4 dispatches a layer (the dense FFN's 2): router, gate/up (+ top k), the down product by
pair, moe_sum.wgsl; 3 with HEARTH_GPU_MOE_DOWN_ROWS=1 (down and sum in one), one more with
HEARTH_GPU_MOE_FUSE=0 (the dense matvec's logits, then moe_route.wgsl's top k). qwen35moe's shared
expert rides in the same 4 as one more slot (moe_decode.SHEXP_FUSE). The expert ids
never leave the GPU: the products read them from the route buffer, so one dispatch covers every
expert a token batch needs; in prefill the pairs run grouped by expert, so the workgroups in flight
share few experts' rows (cache) instead of streaming an expert's matrix once per pair. Routing follows llama.cpp's
build_moe_ffn as the CPU's engine/models/moe.py does (its docstring has the two gatings).

Other MoE architectures can reuse it: `MoeFfn(backend, i, norm="...", prefix="blk.{i}.")` needs
from the backend only `dev`, `ks`, `weights` (GpuWeights), `cfg` (n_embd, n_expert,
n_expert_used, n_ff_exp, expert_gating, expert_weights_norm, activation, rms_eps), `chunk`, and
the activation buffers `x` [chunk, d] (the residual, added to) and `xn` [chunk, d] (scratch).
A subclass may replace `_route` (Gemma 4's router reads a norm of its own: gpu/gemma4_moe.py).

Attention sinks (gpt-oss): `sink_combine(ks, hd, "decode" | "prefill")` merges attention's split
partials with one sink logit per head in the denominator (attn_sinks.wgsl); the backend runs the
split passes then this merge instead of its own (one more dispatch a layer in decode).
"""

from __future__ import annotations

import logging
import os

import numpy as np

from ..errors import EngineError, UnsupportedModelError
from ..quants import dequantize
from . import moe_decode, moe_grouped, ops
from .kernels import grid

log = logging.getLogger(__name__)

# Architectures whose MoE layers the GPU backend builds with MoeFfn.
GPU_MOE_ARCHS = ("qwen3moe", "gpt-oss")
# The FFN's pre-norm tensor (gpt-oss names it post_attention_norm).
FFN_NORM = {"gpt-oss": "post_attention_norm.weight"}
# The experts' activation (moe_matvec.wgsl / moe_tile.wgsl ACT) by the config's; "silu" otherwise.
ACTIVATIONS = {"swiglu_oai": "swiglu_oai", "gelu_tanh": "gelu"}
MOE_ROWS = 8                     # rows a workgroup of the expert products (32 lanes a row)
# The experts' products take x as int8 blocks of 32 (quantize_rows.wgsl, then integer dot products)
# wherever the device has the 4-way int8 dot products and the weights are quantized, CPU rasterizers
# included: llama.cpp's experts read x rounded to Q8_0 for those types, and with f32 x the tiny
# gpt-oss (MXFP4 experts) lands 0.24 mean from its logits on the english prompt, past the 0.15 its
# README allows (0.08 with int8 x, as the CPU backend's). HEARTH_GPU_MOE_INT8=0 keeps f32 x.
MOE_INT8 = os.environ.get("HEARTH_GPU_MOE_INT8", "") != "0"
ROUTE_FIELDS = (("d", "u"), ("n", "u"), ("eps", "f"), ("s_off", "u"))
MOE_FIELDS = (("K", "u"), ("M", "u"), ("rb0", "u"), ("rb1", "u"), ("eb0", "u"), ("eb1", "u"), ("n", "u"),
              ("s_off", "u"))
SINK_FIELDS = (("n_head", "u"), ("n_kv", "u"), ("max_ctx", "u"), ("a", "u"), ("scale", "f"), ("b", "u"),
               ("c", "u"))


def swa_uses_main_rope(cfg) -> bool:
    """gpt-oss rotates its windowed layers as its full ones (one base, the same YaRN scaling)."""
    return cfg.arch == "gpt-oss"


class Experts:
    """One 3-D expert tensor on the GPU: `buffer` (GGUF bytes, numpy [n_expert, rows, k]), `qtype`,
    `rows` (of one expert), `k`, `eb` (bytes of one expert's matrix). extra: a 2-D tensor [rows, k] of
    the same type stored after them as expert n_expert (qwen35moe's shared expert: moe_decode.SHEXP_FUSE)."""

    def __init__(self, W, name: str, n_expert: int, rows: int, k: int, extra: str | None = None):
        g = W.g
        t = g.tensors.get(name)
        if t is None:
            raise UnsupportedModelError(f"{g.path.name}: tensor {name} is missing")
        if tuple(int(s) for s in t.shape) != (k, rows, n_expert):
            raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {list(t.shape)} (GGUF order), "
                                        f"expected {[k, rows, n_expert]}")
        if k % 32:
            raise UnsupportedModelError(f"{g.path.name}: tensor {name} rows of {k} weights are not a multiple "
                                        f"of 32, which the GPU kernels need")
        if t.type.name in ops.GPU_TYPES:
            data, self.qtype = t.data, t.type.name
        else:
            log.info("%s: tensor %s has type %s with no GPU kernel: uploading a dequantized F16 copy",
                     g.path.name, name, t.type.name)
            W.fallbacks.append(f"{name} ({t.type.name} -> F16)")
            data, self.qtype = dequantize(t.data, t.type, t.shape, name).astype(np.float16), "F16"
        raw = np.asarray(data).view(np.uint8).reshape(-1)
        if extra is not None:        # moe_decode.shared_slot_ok checked its type and shape
            raw = np.concatenate([raw, np.asarray(g.tensors[extra].data).view(np.uint8).reshape(-1)])
        if raw.nbytes + 4 > W.max_binding:
            raise EngineError(f"{g.path.name}: tensor {name} ({raw.nbytes >> 20} MiB) is larger than the GPU "
                              f"{W.dev.info['device']} can bind in one buffer ({W.max_binding >> 20} MiB)")
        if raw.nbytes >= 1 << 32:
            raise EngineError(f"{g.path.name}: tensor {name} is 4 GiB or more, past the kernels' byte offsets")
        self.buffer = W._upload(raw, name)
        self.rows, self.k = rows, k
        self.rb = ops.row_bytes(self.qtype, k)
        self.eb = self.rb * rows


def route_kernel(ks, n_expert: int, k: int, gating: str, norm_w: bool, bias: bool, norm: bool = False,
                 q8: bool = False, logits: bool = False):
    """Bindings: xn [n, d] (norm: the residual x), router [E, d] (logits: the logits [E] of one token,
    bias included), [bias [E],] route (u32 [n, 2k]) [, g [d], xn out [n, d] (norm)][, xq (q8: xn as
    quantize_rows' blocks)]. Params d, n, eps, s_off."""
    access = ["r", "r"] + (["r"] if bias else []) + ["rw"] + (["r", "rw"] if norm else []) + (["rw"] if q8 else [])
    return ks.get("moe_route.wgsl", access, ROUTE_FIELDS, E=int(n_expert), K=int(k), GATING=gating,
                  NORM_W=bool(norm_w), BIAS=bool(bias), NORM=bool(norm), Q8=bool(q8), LOGITS=bool(logits),
                  TK_GROUPS=moe_decode.TOPK_GROUPS)


def expert_kernel(ks, mode: str, qtypes, slots: int, act: str = "silu", bias: bool = False, rows: int = MOE_ROWS,
                  q8: bool = False, order: bool = False, c64: bool = False, qin: int = 0, topk=None, spar: int = 0,
                  shared: bool = False):
    """mode "glu": bindings x, route, y, w_gate, w_up[, b_gate, b_up][, order]; "down": x, route, y (+=),
    w[, b][, order]. Params K, M, rb0, rb1, eb0, eb1, n, s_off (see moe_matvec.wgsl). q8: x is
    quantize_rows' int8 blocks (every weight type in ops.INT8_TYPES; s_off = ops.q8_rows_scales of
    that buffer's rows). order: pairs in sort_kernel's order (workgroups: expert_groups(..., order=True));
    "down" then writes each pair's weighted output y [n k, M] (sum_kernel adds them up). c64 (with
    q8, K a multiple of 64): 64-weight chunks a lane (see expert_layout). qin ("down" per token, with
    q8): x is f32 and each workgroup quantizes its token's rows into workgroup memory first (qin =
    ops.q8_rows_words(slots, K); s_off = ops.q8_rows_scales(slots, K)). topk = (n_expert, gating,
    norm_w) ("glu" per token, one token): binding 1 (route) is the router's logits [E] and the kernel
    takes the top k itself, workgroup 0 writing the route to one more binding after the others. spar
    ("down" per token): `rows` is the thread groups (256 / lanes), spar rows a workgroup each with its
    slots in parallel (moe_decode.down_rows_layout; workgroups (ceil(M / spar), n)). shared (with topk):
    the last slot is the shared expert, expert n_expert (moe_decode.SHEXP_FUSE); shared ("down" with
    order): the last slot reads its own matrix (qtypes[1]), bound after order."""
    if q8 and not all(t in ops.INT8_TYPES for t in qtypes):
        raise ValueError(f"no int8-x expert product for weight types {qtypes}")
    nw = 2 if mode == "glu" else 1
    access = (["r", "r", "rw"] + ["r"] * nw + (["r"] * nw if bias else []) + (["r"] if order else [])
              + (["rw"] if topk else []) + (["r"] if shared and mode == "down" else []))
    tk = dict(TOPK=int(topk[0]), GATING=topk[1], NORM_W=bool(topk[2]), TK_GROUPS=moe_decode.TOPK_GROUPS) if topk else {}
    return ks.get("moe_matvec.wgsl", access, MOE_FIELDS, MODE=mode, QTYPES=tuple(qtypes), SLOTS=int(slots),
                  ACT=act, BIAS=bool(bias), ROWS=int(rows), Q8X=int(bool(q8)),
                  ORDER=bool(order), C64=bool(c64), QIN=int(qin), SPAR=int(spar),
                  FP4_LUT=ops.fp4_lookup(qtypes, q8), SHARED=bool(shared), **tk)


def expert_layout(qtypes, k: int, q8: bool) -> tuple[int, bool]:
    """(rows a workgroup, c64) of an expert product over rows of K weights: with int8 x and a K-quant /
    Q4_0 / Q8_0 among the weights (ops.C64_TYPES), 64-weight chunks (scales decoded once a sub-block,
    as the dense int8 matvecs' ops.int8_c64), with as many lanes a row (8-32) as a row has chunks;
    else MOE_ROWS rows of 32 lanes, 8-weight chunks."""
    if q8 and ops.INT8_C64 and k % 64 == 0 and any(t in ops.C64_TYPES for t in qtypes):
        lanes = 32 if k // 64 >= 32 else 16 if k // 64 >= 16 else 8
        return 256 // lanes, True
    return MOE_ROWS, False


def expert_groups(m: int, pairs: int, rows: int = MOE_ROWS, order: bool = False):
    """Workgroups for M rows over `pairs` (token, slot) pairs (glu, or down with order) or tokens (down)."""
    if pairs > 65535:
        raise EngineError(f"{pairs} expert products in one dispatch (at most 65,535)")
    return (pairs, -(-m // rows), 1) if order else (-(-m // rows), pairs, 1)


def sort_kernel(ks, n_expert: int, slots: int, tile: int = 0):
    """Bindings: route, order (u32 [n slots])[, tiles (u32 [max_tiles, 2]) with tile]. Params n,
    max_tiles. One workgroup."""
    return ks.get("moe_sort.wgsl", ["r", "rw"] + (["rw"] if tile else []), (("n", "u"), ("max_tiles", "u")),
                  E=int(n_expert), SLOTS=int(slots), TILE=int(tile))


# Pairs a workgroup of the tiled prefill products (moe_tile.wgsl): each weight chunk decoded once for
# up to this many pairs of its expert.
MOE_TILE = 4


def tile_kernel(ks, mode: str, qtypes, slots: int, act: str = "silu", bias: bool = False, q8: bool = False,
                tile: int = MOE_TILE, rows: int = MOE_ROWS):
    """The prefill products by tiles of one expert's pairs. Bindings: x, route, y [n k, M], w0[, w1]
    [, b0[, b1]], tiles, order. Params as expert_kernel. Workgroups: tile_groups."""
    nw = 2 if mode == "glu" else 1
    access = ["r", "r", "rw"] + ["r"] * nw + (["r"] * nw if bias else []) + ["r", "r"]
    return ks.get("moe_tile.wgsl", access, MOE_FIELDS, MODE=mode, QTYPES=tuple(qtypes), SLOTS=int(slots), ACT=act,
                  BIAS=bool(bias), Q8X=int(bool(q8)), T=int(tile), ROWS=int(rows))


def max_tiles(n: int, k: int, n_expert: int, tile: int = MOE_TILE) -> int:
    """The most tiles n tokens' n k pairs make: a partial tile at most per expert used."""
    return -(-(n * k) // tile) + min(n_expert, n * k)


def tile_groups(n: int, k: int, n_expert: int, m: int, tile: int = MOE_TILE, rows: int = MOE_ROWS):
    t = max_tiles(n, k, n_expert, tile)
    if t > 65535:
        raise EngineError(f"{t} expert tiles in one dispatch (at most 65,535)")
    return t, -(-m // rows), 1


def sum_kernel(ks, slots: int):
    """Bindings: yd [n slots, d], y [n, d] (+=). Params d, n. Workgroups: sum_groups."""
    return ks.get("moe_sum.wgsl", ["r", "rw"], (("d", "u"), ("n", "u")), SLOTS=int(slots))


def sum_groups(n: int, d: int):
    gx, gy = grid(-(-(n * d) // 256))
    return gx, gy, 1


def sink_combine(ks, head_dim: int, pas: str):
    """Bindings: partials, out, sinks [n_head][, step (decode)]."""
    access = ["r", "rw", "r"] + (["r"] if pas == "decode" else [])
    return ks.get("attn_sinks.wgsl", access, SINK_FIELDS, HD=int(head_dim), PASS=pas, CHUNK=ops.ATTN_CHUNK)


def sink_params(cfg, max_ctx: int, max_splits: int = 0) -> dict:
    return dict(n_head=cfg.n_head, n_kv=cfg.n_head_kv, max_ctx=max_ctx, a=max_splits, scale=cfg.attn_scale)


def moe_buffers(be) -> dict:
    """The MoE activations every layer shares, made once a backend: route (u32 [chunk, 2k]) and
    ffe (f32 [chunk, k, n_ff_exp])."""
    bufs = getattr(be, "_moe_buffers", None)
    if bufs is None:
        c, n = be.cfg, be.chunk
        k, ff = c.n_expert_used, c.n_ff_exp
        bufs = dict(route=be.dev.buffer(n * 2 * k * 4, "moe-route"),          # [chunk, 2k] u32
                    logits=be.dev.buffer((c.n_expert + 1) * 4, "moe-logits"),  # [n_expert + 1] (decode)
                    ffe=be.dev.buffer(n * k * ff * 4, "moe-ffe"))             # [chunk, k, n_ff_exp]
        bufs["order"] = be.dev.buffer(n * k * 4, "moe-order")                # [chunk k] u32
        bufs["tiles"] = be.dev.buffer(max_tiles(n, k, c.n_expert) * 8, "moe-tiles")   # [max_tiles, 2] u32
        bufs["pairs"] = be.dev.upload(np.arange(n * k, dtype=np.uint32))       # [chunk k] u32: 0, 1, ...
        if n * k * c.n_embd * 4 <= int(be.dev.limits["max-storage-buffer-binding-size"]):
            bufs["yd"] = be.dev.buffer(n * k * c.n_embd * 4, "moe-down-pairs")  # [chunk k, d]
        if moe_int8(be.dev):   # [q8_rows_words] u32: xn's rows, then ffe's, as int8 blocks
            bufs["xq"] = be.dev.buffer(max(ops.q8_rows_words(n, c.n_embd), ops.q8_rows_words(n * k, ff)) * 4,
                                       "moe-x-q8")
        be._moe_buffers = bufs
        be.weights.buffers.extend(bufs.values())       # freed with the weights
    return bufs


class MoeFfn:
    """One layer's MoE FFN on the GPU (see the module docstring): `add_decode(plan)` and
    `add_prefill(plan)` append norm, route, gate/up and down (+ residual) to a Plan whose calls
    carry n tokens in be.x; the result is added to be.x in place."""

    def __init__(self, be, i: int, norm: str | None = None, prefix: str | None = None, shared: dict | None = None):
        """shared: qwen35moe's shared expert's tensor names (gate, up, down, gate_inp), which decode
        runs as one more slot of the experts' passes where moe_decode.shared_slot_ok allows."""
        c, W = be.cfg, be.weights
        self.be, self.i = be, i
        d, E, ff = c.n_embd, c.n_expert, c.n_ff_exp
        p = prefix if prefix is not None else f"blk.{i}."
        self.norm = W.vector(p + (norm or FFN_NORM.get(c.arch, "ffn_norm.weight")), d)          # [d]
        rt = W.g.tensors.get(p + "ffn_gate_inp.weight")
        if rt is None:
            raise UnsupportedModelError(f"{W.g.path.name}: tensor {p}ffn_gate_inp.weight is missing")
        if tuple(int(s) for s in rt.shape) != (d, E):
            raise UnsupportedModelError(f"{W.g.path.name}: tensor {p}ffn_gate_inp.weight has shape "
                                        f"{list(rt.shape)} (GGUF order), expected {[d, E]}")
        self.router = W.vector(p + "ffn_gate_inp.weight")                                    # [E, d] f32
        self.router_b = W.vector(p + "ffn_gate_inp.bias", E, optional=True)                  # [E]
        sh = shared if shared and moe_decode.shared_slot_ok(be, p, shared) else {}
        self.gate = Experts(W, p + "ffn_gate_exps.weight", E, ff, d, sh.get("gate"))         # [E (+1), ff, d]
        self.up = Experts(W, p + "ffn_up_exps.weight", E, ff, d, sh.get("up"))
        self.down = Experts(W, p + "ffn_down_exps.weight", E, d, ff)                         # [E, d, ff]
        bg = W.vector(p + "ffn_gate_exps.bias", E * ff, optional=True)                       # [E, ff]
        bu = W.vector(p + "ffn_up_exps.bias", E * ff, optional=True)
        if (bg is None) != (bu is None):
            zeros = W.floats(np.zeros(E * ff, np.float32), p + "ffn_exps.zero-bias")
            bg, bu = (zeros if bg is None else bg), (zeros if bu is None else bu)
        self.b_gate_up = None if bg is None else (bg, bu)
        self.b_down = W.vector(p + "ffn_down_exps.bias", E * d, optional=True)               # [E, d]
        self.bufs = moe_buffers(be)
        q8 = moe_int8(be.dev)
        self.q8_gate_up = q8 and all(t in ops.INT8_TYPES for t in (self.gate.qtype, self.up.qtype))
        self.q8_down = q8 and self.down.qtype in ops.INT8_TYPES
        moe_decode.attach_shared(self, sh)     # slots, shared, sh_gate [d], sh_down (ff -> d)

    def add_decode(self, P) -> None:
        self._add(P, lambda n, kv: 1, (1, 1, 1), False)

    def add_prefill(self, P) -> None:
        self._add(P, lambda n, kv: n, lambda n, kv: ops.rows_groups(n), True)

    def _add(self, P, n_of, rows_g, grouped: bool) -> None:
        """grouped (prefill): the tiled products (_add_tiled), or where their per-pair outputs do not
        fit one binding, the gate/up pairs sorted by expert (moe_sort.wgsl) and the down product per token."""
        topk = self._route(P, n_of, rows_g, grouped)
        self._experts(P, n_of, grouped, topk=bool(topk))

    def _fused_route_ok(self) -> bool:
        """Whether decode takes moe_router.wgsl and the gate/up product's own top k (moe_decode.MOE_FUSE)."""
        c = self.be.cfg
        return moe_decode.MOE_FUSE and c.n_embd % 32 == 0 and c.n_expert_used <= min(c.n_expert, 256)

    def _route(self, P, n_of, rows_g, grouped: bool) -> bool:
        """route [n, 2k] and xn = RMSNorm(x) * norm (+ its int8 blocks in xq) from the residual be.x.
        Returns True where it left the top k to the gate/up product (decode, _fused_route_ok): the
        logits in bufs["logits"], the route written by that product."""
        be, c, ks = self.be, self.be.cfg, self.be.ks
        d, k, i = c.n_embd, c.n_expert_used, self.i
        route = self.bufs["route"]
        rb = [self.router_b] if self.router_b is not None else []
        q8 = self.q8_gate_up
        out = [route, self.norm, be.xn] + ([self.bufs["xq"]] if q8 else [])
        rprm = dict(d=d, n=n_of, eps=c.rms_eps, s_off=ops.q8_rows_scales(be.chunk, d))
        if grouped:
            P.add(route_kernel(ks, c.n_expert, k, c.expert_gating, c.expert_weights_norm, bool(rb), norm=True, q8=q8),
                  [be.x, self.router] + rb + out, _groups(rows_g), f"{i}.ffn_norm+route", **rprm)
        elif self._fused_route_ok():
            sg = [self.sh_gate] if self.shared else []
            P.add(moe_decode.router_kernel(ks, c.n_expert, bool(rb), q8, self.shared),
                  [be.x, self.router, self.bufs["logits"], self.norm, be.xn] + ([self.bufs["xq"]] if q8 else []) + rb
                  + sg, moe_decode.router_groups(c.n_expert, self.shared), f"{i}.ffn_norm+router", **rprm)
            return True
        else:    # decode: the router's logits by the dense matvec (RMSNorm fused), then the top k
            lay = ops.matvec_layout(d, c.n_expert)
            logits = self.bufs["logits"]
            P.add(ops.matvec(ks, ["F32"], norm=True, bias=bool(rb), layout=lay), [be.x, logits, self.router, self.norm] + rb,
                  ops.matvec_groups(c.n_expert, lay), f"{i}.router", **ops.matvec_params(["F32"], d, [c.n_expert],
                                                                                          eps=c.rms_eps))
            P.add(route_kernel(ks, c.n_expert, k, c.expert_gating, c.expert_weights_norm, False, norm=True, q8=q8,
                               logits=True),
                  [be.x, logits] + out, (1, 1, 1), f"{i}.ffn_norm+top_k", **rprm)
        return False

    def _experts(self, P, n_of, grouped: bool, topk: bool = False) -> None:
        """The chosen experts' products from be.xn (or its int8 blocks) and route; their weighted sum
        added to be.x. topk (decode): the gate/up product takes the top k from bufs["logits"] and writes route."""
        be, c, ks = self.be, self.be.cfg, self.be.ks
        d, k, ff, i = c.n_embd, c.n_expert_used, c.n_ff_exp, self.i
        route, ffe = self.bufs["route"], self.bufs["ffe"]
        q8 = self.q8_gate_up
        act = ACTIVATIONS.get(c.activation, "silu")
        gb = list(self.b_gate_up) if self.b_gate_up is not None else []
        order = self.bufs["order"]
        if grouped and moe_grouped.usable(self):
            moe_grouped.add_grouped(self, P, n_of, act)
            return
        if grouped and self.bufs.get("yd") is not None:
            self._add_tiled(P, n_of, act, gb)
            return
        if grouped:
            P.add(sort_kernel(ks, c.n_expert, k), [route, order], (1, 1, 1), f"{i}.experts.sort", n=n_of)
        ob = [order] if grouped else []
        src = self.bufs["xq"] if q8 else be.xn           # the route kernel wrote xn (and its int8 blocks)
        gt = [self.gate.qtype, self.up.qtype]
        rows, c64 = expert_layout(gt, d, self.q8_gate_up)
        tk = (c.n_expert, c.expert_gating, c.expert_weights_norm) if topk else None
        sk = self.slots if topk else k                   # decode: the shared expert's slot after the routed
        P.add(expert_kernel(ks, "glu", gt, sk, act=act, bias=bool(gb), q8=self.q8_gate_up, order=grouped,
                            rows=rows, c64=c64, topk=tk, shared=self.shared and bool(topk)),
              [src, self.bufs["logits"] if topk else route, ffe, self.gate.buffer, self.up.buffer] + gb + ob
              + ([route] if topk else []),
              lambda n, kv: expert_groups(ff, n_of(n, kv) * sk, rows, order=grouped), f"{i}.experts.gate_up",
              K=d, M=ff, rb0=self.gate.rb, rb1=self.up.rb, eb0=self.gate.eb, eb1=self.up.eb, n=n_of,
              s_off=ops.q8_rows_scales(be.chunk, d))
        # the down product sums a token's slots itself (prefill too, where the per-pair outputs of
        # the tiled path do not fit one binding)
        db = [self.b_down] if self.b_down is not None else []
        nk = lambda n, kv: n_of(n, kv) * k  # noqa: E731
        if not grouped and moe_decode.down_by_rows_ok(self):
            moe_decode.add_down_by_rows(self, P, n_of)
            return
        if not grouped and moe_grouped.down_by_pair_ok(self):
            moe_grouped.add_down_by_pair(self, P, n_of)
            return
        # decode: the token's k rows quantized inside the down product where they fit workgroup memory
        qin = ops.q8_rows_words(k, ff) if self.q8_down and not grouped and self._fits(ops.q8_rows_words(k, ff)) else 0
        src = self._quantize(P, ffe, ff, nk, f"{i}.experts.down") if self.q8_down and not qin else ffe
        rows, c64 = expert_layout([self.down.qtype], ff, self.q8_down)
        P.add(expert_kernel(ks, "down", [self.down.qtype], k, bias=bool(db), q8=self.q8_down, rows=rows, c64=c64,
                            qin=qin),
              [src, route, be.x, self.down.buffer] + db,
              lambda n, kv: expert_groups(d, n_of(n, kv), rows), f"{i}.experts.down",
              K=ff, M=d, rb0=self.down.rb, eb0=self.down.eb, n=n_of,
              s_off=ops.q8_rows_scales(k, ff) if qin else ops.q8_rows_scales(be.chunk * k, ff))

    def _fits(self, words: int) -> bool:
        """Whether `words` u32 of x blocks fit workgroup memory beside the down product's reduction."""
        return (words + 256) * 4 <= int(self.be.dev.limits["max-compute-workgroup-storage-size"])

    def _add_tiled(self, P, n_of, act, gb) -> None:
        """Prefill after the route: sort into tiles, gate/up by tiles, down by tiles, the slots' sum."""
        be, c, ks = self.be, self.be.cfg, self.be.ks
        d, k, ff, i, E = c.n_embd, c.n_expert_used, c.n_ff_exp, self.i, c.n_expert
        route, ffe, order, tiles, yd = (self.bufs[b] for b in ("route", "ffe", "order", "tiles", "yd"))
        P.add(sort_kernel(ks, E, k, MOE_TILE), [route, order, tiles], (1, 1, 1), f"{i}.experts.sort", n=n_of,
              max_tiles=lambda n, kv: max_tiles(n_of(n, kv), k, E))
        src = self.bufs["xq"] if self.q8_gate_up else be.xn
        P.add(tile_kernel(ks, "glu", [self.gate.qtype, self.up.qtype], k, act=act, bias=bool(gb), q8=self.q8_gate_up),
              [src, route, ffe, self.gate.buffer, self.up.buffer] + gb + [tiles, order],
              lambda n, kv: tile_groups(n_of(n, kv), k, E, ff), f"{i}.experts.gate_up",
              K=d, M=ff, rb0=self.gate.rb, rb1=self.up.rb, eb0=self.gate.eb, eb1=self.up.eb, n=n_of,
              s_off=ops.q8_rows_scales(be.chunk, d))
        db = [self.b_down] if self.b_down is not None else []
        nk = lambda n, kv: n_of(n, kv) * k  # noqa: E731
        src = self._quantize(P, ffe, ff, nk, f"{i}.experts.down") if self.q8_down else ffe
        P.add(tile_kernel(ks, "down", [self.down.qtype], k, bias=bool(db), q8=self.q8_down),
              [src, route, yd, self.down.buffer] + db + [tiles, order],
              lambda n, kv: tile_groups(n_of(n, kv), k, E, d), f"{i}.experts.down",
              K=ff, M=d, rb0=self.down.rb, eb0=self.down.eb, n=n_of, s_off=ops.q8_rows_scales(be.chunk * k, ff))
        P.add(sum_kernel(ks, k), [yd, be.x], lambda n, kv: sum_groups(n_of(n, kv), d), f"{i}.experts.sum", d=d, n=n_of)

    def _quantize(self, P, src, kk: int, rows_of, label: str):
        """The pass writing src's rows [rows, kk] as int8 blocks into the MoE's xq buffer; returns it.
        Scales sit after the codes of the buffer's full row capacity (chunk, or chunk x k for ffe)."""
        xq = self.bufs["xq"]
        cap = self.be.chunk * (self.be.cfg.n_expert_used if src is self.bufs["ffe"] else 1)
        P.add(ops.quantize_rows(self.be.ks), [src, xq], lambda n, kv: ops.quantize_rows_groups(rows_of(n, kv), kk),
              label + ".q8", K=kk, n=rows_of, ldx=kk, s_off=ops.q8_rows_scales(cap, kk))
        return xq


def widest_row(cfg) -> int:
    """Floats a token's MoE activations take in one buffer (ffe: k x n_ff_exp; 0 for a dense model),
    for the backend's choice of a chunk whose buffers fit one binding (the down products' per-pair
    outputs, k x d, are optional: moe_buffers leaves them out where they do not fit)."""
    return cfg.n_expert_used * cfg.n_ff_exp if cfg.n_expert else 0


def moe_int8(dev) -> bool:
    """Whether the experts' products take x as int8 blocks on this device (see MOE_INT8)."""
    return MOE_INT8 and bool(getattr(dev, "int8", False))


def _groups(g):
    return g if callable(g) else (lambda n, kv: g)


def check_supported(cfg, path_name: str) -> None:
    """A MoE architecture the GPU backend does not build, refused by name."""
    if cfg.n_expert and cfg.arch not in GPU_MOE_ARCHS:
        raise UnsupportedModelError(f"{path_name}: mixture-of-experts models ({cfg.arch}) run on the CPU "
                                    f"backend only; choose CPU")
