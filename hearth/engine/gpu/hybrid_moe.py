"""qwen35moe's FFN on the GPU hybrid backend (hybrid_ffn.ffn_for picks it where the config has
experts; the CPU's is engine/models/qwen35moe.py, llama.cpp's src/models/qwen35moe.cpp):

    xn = RMSNorm(x) * post_attention_norm
    x += sum over the top k of softmax(ffn_gate_inp xn), renormalised: p_e down_e(silu(gate_e xn) * up_e xn)
       + sigmoid(ffn_gate_inp_shexp . xn) * down_sh(silu(gate_sh xn) * up_sh xn)

The routed experts are gpu/moe.py's MoeFfn (qwen3moe's routing: softmax, top k renormalised), which
also leaves xn in be.xn; the shared expert then reads xn: the dense SwiGLU kernels (no norm), its
activations scaled by the sigmoid gate (shexp_gate.wgsl: down is linear, so scaling its input
scales its output), and the down product's residual add. Decode takes the shared expert as one more
slot of MoeFfn's passes where moe_decode.shared_slot_ok allows (4 dispatches for the FFN, not 7);
prefill always runs it separately.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..quants import dequantize
from . import ops
from .kernels import grid
from .moe import MoeFfn
from .weights import GpuMatrix

GATE_FIELDS = (("d", "u"), ("m", "u"), ("ldy", "u"), ("n", "u"))


def ffn_rows(cfg) -> int:
    """Floats a token's FFN activations take (be.ff's row: the shared expert's width; the routed
    experts' k x n_ff_exp live in MoeFfn's own buffer), for the backend's buffer and chunk sizes."""
    moe = cfg.hybrid.moe
    return max(padded(moe.n_ff_shexp), moe.n_used * moe.n_ff_exp) if moe is not None else 0


def padded(n: int) -> int:
    """The shared expert's width rounded up to the kernels' blocks of 32 (see _shexp_matrix)."""
    return -(-n // 32) * 32


def shexp_gate(ks):
    """Bindings: y [n, ldy] (in place), xn [n, d], w [d]. Params d, m, ldy, n."""
    return ks.get("shexp_gate.wgsl", ["rw", "r", "r"], GATE_FIELDS)


def shexp_gate_groups(n: int):
    gx, gy = grid(n)
    return gx, gy, 1


class _MoeView:
    """What MoeFfn reads of a backend, with qwen35moe's expert fields on the config (they sit in
    cfg.hybrid.moe; MoeFfn reads qwen3moe's names). One per backend: its buffers are shared by layers."""

    def __init__(self, be):
        moe = be.cfg.hybrid.moe
        self.cfg = dataclasses.replace(be.cfg, n_expert=moe.n_expert, n_expert_used=moe.n_used,
                                       n_ff_exp=moe.n_ff_exp, expert_gating="softmax",
                                       expert_weights_norm=True, activation="silu")
        self.dev, self.ks, self.weights, self.chunk, self.x, self.xn = be.dev, be.ks, be.weights, be.chunk, be.x, be.xn


class Qwen35MoeFfn:
    def __init__(self, be, i: int):
        view = getattr(be, "_qwen35moe_view", None)
        if view is None:
            view = be._qwen35moe_view = _MoeView(be)
        c, W, p = be.cfg, be.weights, f"blk.{i}."
        nsh, d = c.hybrid.moe.n_ff_shexp, c.n_embd
        self.be, self.nsh = be, padded(nsh)
        shared = {part: f"{p}ffn_{part}_shexp.weight" for part in ("gate", "up", "down", "gate_inp")}
        self.experts = MoeFfn(view, i, norm="post_attention_norm.weight", shared=shared)
        self.sh_gate = W.vector(p + "ffn_gate_inp_shexp.weight", d)                          # [d]
        self.gate = _shexp_matrix(W, p + "ffn_gate_shexp.weight", nsh, d, self.nsh, d)       # d -> nsh (padded)
        self.up = _shexp_matrix(W, p + "ffn_up_shexp.weight", nsh, d, self.nsh, d)
        # nsh (padded) -> d; decode's shared slot loaded it already (a quantized width, never padded)
        self.down = self.experts.sh_down or _shexp_matrix(W, p + "ffn_down_shexp.weight", d, nsh, d, self.nsh)

    def decode(self, P, label: str) -> None:
        be, d, m = self.be, self.be.cfg.n_embd, self.nsh
        self.experts.add_decode(P)                      # x += experts; be.xn = RMSNorm(x) * norm
        if self.experts.shared:                         # the shared expert was a slot of those passes
            return
        gt = [self.gate.qtype, self.up.qtype]
        lay, q8 = be._layout(gt, d, m, mats=2)
        P.add(ops.matvec(be.ks, gt, mode="glu", act="silu", layout=lay, q8x=q8),
              [be.xn, be.ff, self.gate.buffer, self.up.buffer], ops.matvec_groups(m, lay), label + ".shexp",
              **ops.matvec_params(gt, d, [m, m], mode="glu"))
        self._gate(P, label, lambda n, kv: 1)
        lay, q8 = be._layout([self.down.qtype], m, d)
        be._decode_proj(P, self.down, be.ff, m, None, None, label + ".shexp.down", layout=lay, q8=q8)

    def prefill(self, P, label: str) -> None:
        be, d, m = self.be, self.be.cfg.n_embd, self.nsh
        self.experts.add_prefill(P)
        if be._mm8(self.gate.qtype) or be._mm8(self.up.qtype):
            be._quantize_src(P, be.xn, d, label + ".shexp")
        for w, name in ((self.gate, "gate"), (self.up, "up")):
            be._product(P, w, be.xn, d, m, be.ff, m, 0, f"{label}.shexp.{name}", act="silu", epi_glu=name == "up")
        self._gate(P, label, lambda n, kv: n)
        be._prefill_proj(P, self.down, be.ff, m, None, None, label + ".shexp.down", unbounded_x=True)

    def _gate(self, P, label: str, n_of) -> None:
        be, d, m = self.be, self.be.cfg.n_embd, self.nsh
        P.add(shexp_gate(be.ks), [be.ff, be.xn, self.sh_gate], lambda n, kv: shexp_gate_groups(n_of(n, kv)),
              label + ".shexp.gate", d=d, m=m, ldy=m, n=n_of)


def _shexp_matrix(W, name: str, rows: int, k: int, rows_p: int, k_p: int) -> GpuMatrix:
    """A shared-expert matrix; where its width is not a multiple of 32 (the kernels' blocks; the
    tiny test model's 48), padded with zeros as float32: the padded units are silu(0) * 0 = 0 and
    meet zero columns of down, so the result is the same."""
    if (rows, k) == (rows_p, k_p):
        return W.matrix(name, rows, k)
    t = W.g.tensors.get(name)
    if t is None or tuple(t.shape) != (k, rows):
        return W.matrix(name, rows, k)         # its error names the tensor
    w = np.zeros((rows_p, k_p), np.float32)    # [rows_p, k_p]
    w[:rows, :k] = dequantize(t.data, t.type, t.shape, name).reshape(rows, k)
    return GpuMatrix(W._upload(w, name), "F32", rows_p, k_p)
