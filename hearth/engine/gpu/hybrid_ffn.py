"""The FFN of a hybrid (Qwen3.5) layer on the GPU, pluggable: GpuHybridBackend asks
`ffn_for(backend, layer)` for an object with `decode(P, label)` and `prefill(P, label)` that add
x += FFN(RMSNorm(x) * ffn_norm) to a Plan (x: backend.x [n, d], the residual stream).

`DenseFfn` is qwen35's SwiGLU, with the dense backend's kernels (the fused norm + gate/up matvec,
the down product with the residual add; int8 x where the backend's layouts choose it). qwen35moe's
mixture of experts with its gated shared expert is hybrid_moe.py's Qwen35MoeFfn.
"""

from __future__ import annotations

from . import ops
from .hybrid_moe import Qwen35MoeFfn


def ffn_for(be, i: int):
    if getattr(be.cfg.hybrid, "moe", None) is not None:
        return Qwen35MoeFfn(be, i)
    return DenseFfn(be, i)


class DenseFfn:
    """down(silu(gate x) * up x) with x = RMSNorm(residual) * post_attention_norm."""

    def __init__(self, be, i: int):
        c, W, p = be.cfg, be.weights, f"blk.{i}."
        self.be = be
        self.norm = W.vector(p + "post_attention_norm.weight", c.n_embd)       # [d]
        self.gate = W.matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd)          # d -> n_ff
        self.up = W.matrix(p + "ffn_up.weight", c.n_ff, c.n_embd)
        self.down = W.matrix(p + "ffn_down.weight", c.n_embd, c.n_ff)          # n_ff -> d

    def decode(self, P, label: str) -> None:
        be, c = self.be, self.be.cfg
        d, nff = c.n_embd, c.n_ff
        gt, dn_t = [self.gate.qtype, self.up.qtype], [self.down.qtype]
        pre = be.int8 and ops.int8_pre_ok(be.dev, dn_t, nff)
        f_lay, f_q8 = be._layout(gt, d, nff, mats=2)
        q8out = pre and ops.glu_q8out_ok(f_q8, nff)
        if q8out:
            f_lay = ops.GLU_Q8OUT_LAYOUT
        P.add(ops.matvec(be.ks, gt, mode="glu", act="silu", norm=True, layout=f_lay, q8x=f_q8, q8out=q8out),
              [be.x, be.ff, self.gate.buffer, self.up.buffer, self.norm] + ([be.ffq] if q8out else []),
              ops.matvec_groups(nff, f_lay), label, **ops.matvec_params(gt, d, [nff, nff], eps=c.rms_eps, mode="glu"))
        if pre:
            if not q8out:
                P.add(ops.quantize_x(be.ks), [be.ff, be.ffq], ops.quantize_x_groups(nff), label + ".q8", K=nff)
            be._decode_proj(P, self.down, be.ffq, nff, None, None, label + ".down", layout=ops.INT8_PRE_LAYOUT,
                            q8=nff, q8g=True)
        else:
            lay, q8 = be._layout(dn_t, nff, d)
            be._decode_proj(P, self.down, be.ff, nff, None, None, label + ".down", layout=lay, q8=q8)

    def prefill(self, P, label: str) -> None:
        be, c = self.be, self.be.cfg
        d, nff = c.n_embd, c.n_ff
        P.add(ops.rmsnorm(be.ks), [be.x, be.xn, self.norm], lambda n, kv: ops.rows_groups(n), label + ".norm",
              d=d, n=be.chunk, eps=c.rms_eps)
        if be._mm8(self.gate.qtype) or be._mm8(self.up.qtype):
            be._quantize_src(P, be.xn, d, label)
        for w, name in ((self.gate, "gate"), (self.up, "up")):
            be._product(P, w, be.xn, d, nff, be.ff, nff, 0, f"{label}.{name}", act="silu", epi_glu=name == "up")
        be._prefill_proj(P, self.down, be.ff, nff, None, None, label + ".down", unbounded_x=True)
