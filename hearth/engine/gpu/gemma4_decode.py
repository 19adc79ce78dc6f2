"""Gemma 4's fused decode (gpu/gemma4.py's FUSE): the residual stream with post-norms left pending,
the decode FFN and the per-layer branch's fused gate; `Gemma4FusedDecode` is a mixin of
`Gemma4GpuBackend`.

A product that leaves a post-normed branch output in tmp (O, down, the per-layer proj) adds nothing
to x: its post-norm (weight, layer scale) stays pending until the next matvec over the residual
stream adds it to its x (ops.matvec pre) and writes the sum to the stream's other buffer, since the
other workgroups of that product still read the old one. So the stream alternates between x and x2
[d]; it starts in whichever makes it end in x (the head and the all-logits plan read x), and the
last pending post-norm is a pass of its own (gemma4.wgsl "norm_add_scale", in place).
"""

from __future__ import annotations

from ..errors import EngineError
from . import ops
from .plan import Plan


class ResidualStream:
    def __init__(self, x, x2, tmp, moves: int):
        """x, x2: [d] buffers; tmp: [d] the branch outputs; moves: the matvecs that will take a pending
        post-norm (each moves the stream to the other buffer)."""
        self.x, self.x2, self.tmp = x, x2, tmp
        self.cur = x2 if moves % 2 else x
        self.pending = None

    def pend(self, g, scale: float) -> None:
        """x = (x + RMSNorm(tmp) g) * scale, left to the next matvec over the stream."""
        if self.pending is not None:
            raise EngineError("gemma4 decode plan: a post-norm pending over another")
        self.pending = (g, scale)

    def take(self) -> tuple:
        """(x binding, extra bindings, params, pre) for a decode matvec over the stream."""
        if self.pending is None:
            return self.cur, [], {}, False
        (g, scale), cur = self.pending, self.cur
        self.cur, self.pending = (self.x2 if cur is self.x else self.x), None
        return cur, [self.tmp, g, self.cur], dict(a2=scale), True

    def end(self, P, kernel, d: int, eps: float) -> None:
        """The last pending post-norm as its own pass (kernel: norm_add_scale), leaving x whole."""
        if self.pending is not None:
            g, scale = self.pending
            self.pending = None
            P.add(kernel, [self.tmp, self.cur, g], lambda n, kv: ops.rows_groups(n), "post",
                  count=lambda n, kv: n, stride=d, eps=eps, scale=scale)
        if self.cur is not self.x:
            raise EngineError("gemma4 decode plan: the residual stream ends outside x")


class Gemma4FusedDecode:
    """Decode plan pieces of Gemma4GpuBackend (which provides cfg, ks, x, x2, tmp, ff, ffq, pg, npp,
    ple, fuse, _layout, _matvec, _decode_proj and _post_kernel)."""

    def _start_stream(self, decode: bool) -> None:
        """Fused decode: a ResidualStream; else the stream is x throughout."""
        c = self.cfg
        moves = c.n_layer * (2 + bool(c.hybrid.n_embd_per_layer)) - 1   # post-norms a token, but the last
        self.stream = ResidualStream(self.x, self.x2, self.tmp, moves) if self._fused(decode) else None

    def _fused(self, decode: bool) -> bool:
        return decode and self.fuse

    def _stream_x(self) -> tuple:
        """(x binding, extra bindings, params, pre) for a decode matvec over the residual stream."""
        return self.stream.take() if self.stream is not None else (self.x, [], {}, False)

    def _end_stream(self, P: Plan) -> None:
        if self.stream is not None:
            self.stream.end(P, self._post_kernel(), self.cfg.n_embd, self.cfg.rms_eps)
            self.stream = None

    def _decode_ffn(self, P: Plan, i: int, L: dict) -> None:
        """gate/up (GeGLU, the stream's pending post-norm added) into ff, down into tmp (fused or with experts)
        or x (its post-norm a pass). DOWN_Q8: the gate/up product also writes ff as int8 blocks (q8out;
        a quantize_x pass where its own x is f32) and the down product reads those (q8g)."""
        c, ks, d, nff, moe = self.cfg, self.ks, self.cfg.n_embd, L["nff"], L["moe"]
        gt, dn = [L["gate"].qtype, L["up"].qtype], L["down"]
        lay, q8 = self._layout(gt, d, nff, mats=2)
        q8g = self.ffq is not None and dn.qtype in ops.INT8_TYPES and nff % 32 == 0
        q8out = q8g and ops.glu_q8out_ok(q8, nff)
        if q8out:
            lay = ops.GLU_Q8OUT_LAYOUT
        x, pb, pp, pre = self._stream_x()
        P.add(ops.matvec(ks, gt, mode="glu", act="gelu", norm=True, layout=lay, q8x=q8, q8out=q8out, pre=pre),
              [x, self.ff, L["gate"].buffer, L["up"].buffer, L["ffn_norm"]] + ([self.ffq] if q8out else []) + pb,
              ops.matvec_groups(nff, lay), f"{i}.ffn",
              **ops.matvec_params(gt, d, [nff, nff], eps=c.rms_eps, mode="glu"), **pp)
        if q8g and not q8out:
            P.add(ops.quantize_x(ks), [self.ff, self.ffq], ops.quantize_x_groups(nff), f"{i}.quantize_x", K=nff)
        src, (lay, q8) = (self.ffq, (ops.INT8_PRE_LAYOUT, nff)) if q8g else (self.ff, self._layout([dn.qtype], nff, d))
        if moe is not None or self.fuse:
            P.add(ops.matvec(ks, [dn.qtype], layout=lay, q8x=q8, q8g=q8g), [src, self.tmp, dn.buffer],
                  ops.matvec_groups(d, lay), f"{i}.down", **ops.matvec_params([dn.qtype], nff, [d]))
            if moe is None:
                self.stream.pend(L["post_ffn"], 1.0 if c.hybrid.n_embd_per_layer else L["out_scale"])
        else:
            self._decode_proj(P, dn, src, nff, None, L["post_ffn"], f"{i}.down", layout=lay, q8=q8, q8g=q8g)

    def _fused_branch(self, P: Plan, i: int, L: dict) -> None:
        """Decode, fused: gate (with the FFN's pending post-norm, and gelu(.) * ple[i] in its epilogue), proj
        into tmp, its post-norm and layer_output_scale left pending."""
        c, w = self.cfg, L["inp_gate"]
        d, npl = c.n_embd, c.hybrid.n_embd_per_layer
        lay, q8 = self._layout([w.qtype], d, w.rows)
        x, pb, pp, pre = self._stream_x()
        P.add(ops.matvec(self.ks, [w.qtype], layout=lay, q8x=q8, pre=pre, gelu_mul=True),
              [x, self.pg, w.buffer] + pb + [self.ple], ops.matvec_groups(w.rows, lay), f"{i}.ple.gate",
              **dict(ops.matvec_params([w.qtype], d, [w.rows], eps=c.rms_eps), a0=i * npl, **pp))
        self._matvec(P, L["proj"], self.pg, self.npp, self.tmp, f"{i}.ple.out")
        self.stream.pend(L["post_norm"], L["out_scale"])
