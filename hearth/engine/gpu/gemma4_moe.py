"""Gemma 4's mixture-of-experts FFN on the GPU (the 26B-A4B shape: experts beside the dense MLP;
the CPU's is engine/models/gemma4_moe.py, llama.cpp's src/models/gemma4.cpp). With x the residual
(attention output + its input):

    mlp   = down(gelu(gate h) * up h), h = RMSNorm(x) ffn_norm                  -> be.tmp
    route = top k of softmax(ffn_gate_inp (RMSNorm(x) ffn_gate_inp.scale / sqrt d)), renormalised,
            each weight times ffn_down_exps.scale[e] where the file has it     (wgsl/gemma4_moe.wgsl
                                                                                 "expert_scale")
    moe   = sum_s w_s down_{e_s}(gelu(gate_e h2) * up_e h2), h2 = RMSNorm(x) pre_ffw_norm_2 -> y
    x    += RMSNorm(RMSNorm(mlp) post_ffw_norm_1 + RMSNorm(moe) post_ffw_norm_2) post_ffw_norm
                                                                               ("combine", one pass)

The experts are gpu/moe.py's MoeFfn (through a view whose residual `x` is the scratch y, so its down
products add into y, not into the residual), with its own `_route`: the router's input norm has
the weight ffn_gate_inp.scale / sqrt(d), the experts' pre_ffw_norm_2. Decode: the router's logits
by the dense matvec with that norm fused, then moe_route.wgsl's top k, which also writes h2 (and its
int8 blocks) as for qwen3moe. Prefill: moe_route.wgsl with its norm fused (weight: the router's),
then RMSNorm with pre_ffw_norm_2 into xn (and its int8 blocks). y stays zero between layers (the
combine pass clears the rows it read).

Experts stored as one ffn_gate_up_exps (gate rows first, then up, per expert) are split into
ffn_gate_exps / ffn_up_exps copies while that layer's experts are uploaded (`layer_view`), one
layer's copies at a time.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import UnsupportedModelError
from ..quants import dequantize
from . import ops
from .dense_next import TensorView
from .kernels import grid
from .moe import MoeFfn, route_kernel

FIELDS = (("d", "u"), ("n", "u"), ("eps", "f"), ("_a", "u"))


def combine_kernel(ks):
    """Bindings: mlp [n, d] (rw), moe [n, d] (rw, zeroed), x [n, d] (+=), g1, g2, g [d]. Params d, n, eps.
    Workgroups: ops.rows_groups(n)."""
    return ks.get("gemma4_moe.wgsl", ["rw", "rw", "rw", "r", "r", "r"], FIELDS, PASS="combine")


def expert_scale_kernel(ks, k: int):
    """Bindings: route [n, 2k] (rw), scale [n_expert]. Params n. Workgroups: scale_groups(n, k)."""
    return ks.get("gemma4_moe.wgsl", ["rw", "r"], FIELDS, PASS="expert_scale", K=int(k))


def scale_groups(n: int, k: int):
    gx, gy = grid(-(-(n * k) // 256))
    return gx, gy, 1


def layer_view(g, cfg, i: int):
    """`g`, or where layer i keeps its experts as one ffn_gate_up_exps [E, 2 f, d] (numpy order), a
    TensorView with its gate half and up half as ffn_gate_exps / ffn_up_exps (contiguous copies: the
    GPU kernels take one buffer a matrix)."""
    name = f"blk.{i}.ffn_gate_up_exps.weight"
    t = g.tensors.get(name)
    if t is None:
        return g
    moe, d = cfg.hybrid.moe, cfg.n_embd
    E, f = moe.n_expert, moe.n_ff_exp
    if tuple(int(s) for s in t.shape) != (d, 2 * f, E) or t.n_bytes % (2 * f * E):
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {list(t.shape)} (GGUF order), "
                                    f"expected {[d, 2 * f, E]}")
    rows = np.asarray(t.data).reshape(E, 2 * f, -1)            # [E, 2 f, row bytes]
    tensors = dict(g.tensors)
    for half, part in (("ffn_gate_exps.weight", rows[:, :f]), ("ffn_up_exps.weight", rows[:, f:])):
        data = np.ascontiguousarray(part).reshape(-1)
        tensors[f"blk.{i}.{half}"] = dataclasses.replace(t, name=f"blk.{i}.{half}", shape=(d, f, E),
                                                         n_bytes=data.nbytes, data=data)
    return TensorView(g, tensors)


class _View:
    """What MoeFfn reads of a backend: the expert fields on the config (Gemma 4 keeps them in
    cfg.hybrid.moe), xn, and as `x` the scratch y [chunk, d] the expert products add into. One per
    backend: its buffers (MoeFfn's, y) are shared by the layers."""

    def __init__(self, be):
        moe = be.cfg.hybrid.moe
        self.cfg = dataclasses.replace(be.cfg, n_expert=moe.n_expert, n_expert_used=moe.n_used,
                                       n_ff_exp=moe.n_ff_exp, expert_gating="softmax",
                                       expert_weights_norm=True, activation="gelu_tanh")
        self.dev, self.ks, self.weights, self.chunk, self.xn = be.dev, be.ks, be.weights, be.chunk, be.xn
        self.resid = be.x
        self.x = be.dev.buffer(be.chunk * be.cfg.n_embd * 4, "moe-y")        # [chunk, d] the experts' sum
        be.weights.buffers.append(self.x)                                       # freed with the weights


class Gemma4Experts(MoeFfn):
    """One layer's experts (MoeFfn over a _View): add_decode / add_prefill leave their weighted sum in
    view.x and h2 in be.xn."""

    def __init__(self, view, i: int):
        super().__init__(view, i, norm="pre_ffw_norm_2.weight")
        W, d, E, p = view.weights, view.cfg.n_embd, view.cfg.n_expert, f"blk.{i}."
        t = W.g.tensors.get(p + "ffn_gate_inp.scale")
        if t is None:
            raise UnsupportedModelError(f"{W.g.path.name}: tensor {p}ffn_gate_inp.scale is missing")
        s = dequantize(t.data, t.type, t.shape, t.name).reshape(-1).astype(np.float32)
        if s.size != d:
            raise UnsupportedModelError(f"{W.g.path.name}: tensor {p}ffn_gate_inp.scale has {s.size} values, "
                                        f"expected {d}")
        # the router's input: RMSNorm(x) / sqrt(d) * scale, as llama.cpp scales it before the product
        self.router_g = W.floats(s * np.float32(1.0 / math.sqrt(d)), p + "ffn_gate_inp.scale/sqrt(d)")   # [d]
        self.down_scale = W.vector(p + "ffn_down_exps.scale", E, optional=True)                      # [E]

    def _route(self, P, n_of, rows_g, grouped: bool) -> None:
        be, c, ks = self.be, self.be.cfg, self.be.ks
        d, k, E, i = c.n_embd, c.n_expert_used, c.n_expert, self.i
        route, q8 = self.bufs["route"], self.q8_gate_up
        eps = c.rms_eps
        if grouped:
            P.add(route_kernel(ks, E, k, "softmax", True, False, norm=True),
                  [be.resid, self.router, route, self.router_g, be.xn], rows_g, f"{i}.router", d=d, n=n_of, eps=eps)
            P.add(ops.rmsnorm(ks), [be.resid, be.xn, self.norm], rows_g, f"{i}.ffn_norm_2", d=d, n=be.chunk, eps=eps)
            if q8:
                self._quantize(P, be.xn, d, n_of, f"{i}.experts.gate_up")
        else:
            lay = ops.matvec_layout(d, E)
            logits = self.bufs["logits"]
            P.add(ops.matvec(ks, ["F32"], norm=True, layout=lay), [be.resid, logits, self.router, self.router_g],
                  ops.matvec_groups(E, lay), f"{i}.router", **ops.matvec_params(["F32"], d, [E], eps=eps))
            P.add(route_kernel(ks, E, k, "softmax", True, False, norm=True, q8=q8, logits=True),
                  [be.resid, logits, route, self.norm, be.xn] + ([self.bufs["xq"]] if q8 else []), (1, 1, 1),
                  f"{i}.ffn_norm_2+top_k", d=d, n=n_of, eps=eps, s_off=ops.q8_rows_scales(be.chunk, d))
        if self.down_scale is not None:
            P.add(expert_scale_kernel(ks, k), [route, self.down_scale],
                  lambda n, kv: scale_groups(n_of(n, kv), k), f"{i}.experts.scale", n=n_of)


class Gemma4MoeFfn:
    """A Gemma 4 layer's experts beside its MLP: `add(P, decode, L)` after the MLP's down product
    into be.tmp adds the layer's FFN output to be.x (L: the backend's layer dict, for post_ffn)."""

    def __init__(self, be, i: int):
        view = getattr(be, "_gemma4_moe_view", None)
        if view is None:
            view = be._gemma4_moe_view = _View(be)
        W, p, d = be.weights, f"blk.{i}.", be.cfg.n_embd
        self.be, self.i, self.view = be, i, view
        # MoeFfn reads the expert tensors from W.g: this layer's split copies while they upload, so
        # no more than one layer's copies are ever held in memory
        file, W.g = W.g, layer_view(W.g, be.cfg, i)
        try:
            self.experts = Gemma4Experts(view, i)
        finally:
            W.g = file
        self.post_1 = W.vector(p + "post_ffw_norm_1.weight", d)        # [d] the MLP's
        self.post_2 = W.vector(p + "post_ffw_norm_2.weight", d)        # [d] the experts'

    def add(self, P, decode: bool, L: dict) -> None:
        """The experts and the combine pass, after the backend's dense MLP left its output in be.tmp."""
        if decode:
            self.experts.add_decode(P)
        else:
            self.experts.add_prefill(P)
        self._combine(P, L, (lambda n, kv: 1) if decode else (lambda n, kv: n))

    def _combine(self, P, L: dict, n_of) -> None:
        be = self.be
        P.add(combine_kernel(be.ks), [be.tmp, self.view.x, be.x, self.post_1, self.post_2, L["post_ffn"]],
              lambda n, kv: ops.rows_groups(n_of(n, kv)), f"{self.i}.ffn_combine", d=be.cfg.n_embd, n=n_of,
              eps=be.cfg.rms_eps)


def ffn_rows(cfg) -> int:
    """Floats a token's expert activations take (MoeFfn's ffe: k x n_ff_exp), for the chunk's choice."""
    moe = cfg.hybrid.moe
    return moe.n_used * moe.n_ff_exp if moe is not None else 0

