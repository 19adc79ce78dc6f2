"""Gemma 4's mixture-of-experts FFN (the 26B-A4B shape; llama.cpp: src/models/gemma4.cpp), a layer's
FFN when it has ffn_gate_inp. With a = the attention output plus the residual:
    mlp = RMSNorm(FFN(RMSNorm(a) (ffn_norm))) (post_ffw_norm_1)          the dense GeGLU FFN, shared
    router logits = ffn_gate_inp(RMSNorm(a) (no weight) / sqrt(d) * ffn_gate_inp.scale)
    p = softmax(logits); the top n_used, renormalised (sum clamped at 6.1e-5)
    moe = RMSNorm(sum_e p_e * s_e * down_e(gelu(gate_e h2) * up_e h2)) (post_ffw_norm_2),
          h2 = RMSNorm(a) (pre_ffw_norm_2), s_e = ffn_down_exps.scale[e] (1 when absent)
    the FFN's output = mlp + moe (then post_ffw_norm and the residual, as a dense layer's)
Experts as separate gate/up tensors or one ffn_gate_up_exps (gate rows first, then up).
"""

from __future__ import annotations

import math

import numpy as np

from ..cpu.linear import Activations
from . import weights as W
from .layers import gelu_tanh_mul, rms_norm
from .moe import softmax_top_k_normed
from .qwen35moe import expert_parts


class Gemma4Moe:
    def __init__(self, g, ld, p: str, d: int, n_ff: int, moe, eps: float):
        self.moe, self.eps, self.d = moe, eps, d
        E, f = moe.n_expert, moe.n_ff_exp
        self.n_ff = n_ff
        self.w_gate_up = ld.matrix([p + "ffn_gate.weight", p + "ffn_up.weight"], d, [n_ff, n_ff])   # shared MLP
        self.w_down = ld.matrix([p + "ffn_down.weight"], n_ff, [d])
        self.ffn_norm = W.tensor(g, p + "ffn_norm.weight", (d,))
        self.post_norm_1 = W.tensor(g, p + "post_ffw_norm_1.weight", (d,))
        self.pre_norm_2 = W.tensor(g, p + "pre_ffw_norm_2.weight", (d,))
        self.post_norm_2 = W.tensor(g, p + "post_ffw_norm_2.weight", (d,))
        self.router = ld.matrix([p + "ffn_gate_inp.weight"], d, [E])                        # d -> E
        self.router_scale = W.tensor(g, p + "ffn_gate_inp.scale", (d,)) * np.float32(1.0 / math.sqrt(d))
        if p + "ffn_gate_up_exps.weight" in g.tensors:
            both = expert_parts(g, p + "ffn_gate_up_exps.weight", E, d, 2 * f)
            gate_up = [W.Matrices([both[e]]) for e in range(E)]
        else:
            gate = expert_parts(g, p + "ffn_gate_exps.weight", E, d, f)
            up = expert_parts(g, p + "ffn_up_exps.weight", E, d, f)
            gate_up = [W.Matrices([gate[e], up[e]]) for e in range(E)]
        down = expert_parts(g, p + "ffn_down_exps.weight", E, f, d)
        self.experts = [(gate_up[e], W.Matrices([down[e]])) for e in range(E)]
        scale = W.optional(g, p + "ffn_down_exps.scale", (E,))
        self.down_scale = scale if scale is not None else np.ones(E, np.float32)

    def matrices(self) -> list[W.Matrices]:
        return [self.w_gate_up, self.w_down, self.router] + [m for pair in self.experts for m in pair]

    def route(self, a, i8, work) -> tuple[np.ndarray, np.ndarray]:
        ones = np.ones(self.d, np.float32)
        logits = self.router(Activations(rms_norm(a, ones, self.eps) * self.router_scale, i8), work)   # [n, E]
        return softmax_top_k_normed(logits, self.moe.n_used)

    def __call__(self, a, i8, work) -> np.ndarray:
        """a [n, d] (attention output + residual) -> the FFN's output before post_ffw_norm."""
        h = rms_norm(a, self.ffn_norm, self.eps)
        gu = self.w_gate_up(Activations(h, i8), work)
        mlp = self.w_down(Activations(gelu_tanh_mul(gu[:, :self.n_ff], gu[:, self.n_ff:]), i8), work)
        mlp = rms_norm(mlp, self.post_norm_1, self.eps)
        h2 = rms_norm(a, self.pre_norm_2, self.eps)
        chosen, w = self.route(a, i8, work)
        f = self.moe.n_ff_exp
        moe = np.zeros_like(a)
        for e in np.unique(chosen):
            rows, slot = np.nonzero(chosen == e)
            gate_up, down = self.experts[e]
            x = gu_e = gate_up(Activations(np.ascontiguousarray(h2[rows]), i8), work)   # [r, 2 f]
            y = down(Activations(gelu_tanh_mul(x[:, :f], gu_e[:, f:]), i8), work)
            moe[rows] += y * (w[rows, slot] * self.down_scale[e])[:, None]
        return mlp + rms_norm(moe, self.post_norm_2, self.eps)
