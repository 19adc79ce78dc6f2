"""Gemma 4's decode residual stream with post-norms left pending (gpu/gemma4.py's fused decode).

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
