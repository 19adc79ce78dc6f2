"""Qwen3.5 MoE (llama.cpp arch `qwen35moe`, src/models/qwen35moe.cpp): qwen35's layers with every
FFN a mixture of experts plus a shared expert:
    p = softmax(ffn_gate_inp x) over n_expert; the top n_used experts, their p renormalised to sum 1
    (the sum clamped at 6.1e-5, as llama.cpp does)
    out = sum_e p_e * down_e(silu(gate_e x) * up_e x)
        + sigmoid(ffn_gate_inp_shexp . x) * down_sh(silu(gate_sh x) * up_sh x)
Expert tensors are 3-D, numpy [n_expert, out, in]; each expert's rows are used from the file's
blocks as one `Linear` (a type without a kernel: dequantized once). Tokens are grouped by expert so
each chosen expert multiplies its tokens in one product. A decoded token (8-bit x, quantized types)
takes two launches instead: every chosen expert's gate and up rows, then their down rows, with the
shared expert's among them where its types allow (engine/cpu/expert_rows.py).
"""

from __future__ import annotations

import numpy as np

from ..cpu import expert_rows as ER
from ..cpu.linear import KERNEL_TYPES, Activations, Linear
from ..errors import UnsupportedModelError
from ..quants import dequantize
from . import compiled_layers
from . import weights as W
from .layers import silu_mul
from .moe import softmax_top_k_normed
from .qwen35 import DenseFFN, Qwen35


def expert_parts(g, name: str, n_expert: int, n_in: int, n_out: int) -> list:
    """One matrix part per expert of the 3-D tensor `name` (numpy [n_expert, n_out, n_in])."""
    t = g.tensors.get(name)
    if t is None:
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} is missing")
    if tuple(t.shape) != (n_in, n_out, n_expert):
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {tuple(t.shape[::-1])}, "
                                    f"expected {(n_expert, n_out, n_in)} from the metadata")
    if t.type.name in KERNEL_TYPES and n_in % 32 == 0:
        rows = t.data.reshape(n_expert, n_out, -1)
        return [Linear(rows[e], t.type, n_in, f"{name}[{e}]") for e in range(n_expert)]
    w = dequantize(t.data, t.type, t.shape, name).reshape(n_expert, n_out, n_in)
    return [W.Dense(np.ascontiguousarray(w[e])) for e in range(n_expert)]


class MoeFFN:
    def __init__(self, g, ld, p: str, d: int, moe):
        self.moe, E, f = moe, moe.n_expert, moe.n_ff_exp
        self.router = ld.matrix([p + "ffn_gate_inp.weight"], d, [E])                     # d -> E
        gate = expert_parts(g, p + "ffn_gate_exps.weight", E, d, f)
        up = expert_parts(g, p + "ffn_up_exps.weight", E, d, f)
        down = expert_parts(g, p + "ffn_down_exps.weight", E, f, d)
        self.experts = [(W.Matrices([gate[e], up[e]]), W.Matrices([down[e]])) for e in range(E)]
        self.shared = DenseFFN(_Renamed(ld, {"ffn_gate": "ffn_gate_shexp", "ffn_up": "ffn_up_shexp",
                                             "ffn_down": "ffn_down_shexp"}), p, d, moe.n_ff_shexp)
        self.shared_gate = W.tensor(g, p + "ffn_gate_inp_shexp.weight", (d,))          # [d]
        # Decode: the experts' rows in two launches (engine/cpu/expert_rows.py) where the routed expert
        # tensors have a quantized type of that kernel; the shared expert's rows join them where its
        # tensors do too. uint8 [n_expert (1: shared), rows, bytes per row]: gate, up, down
        def rows3(kind, n, widths):
            ts = [g.tensors[p + f"ffn_{m}_{kind}.weight"] for m in ("gate", "up", "down")]
            if not all(t.type.name in ER.QUANT_CODES for t in ts):
                return None, None
            return ([t.data.reshape(n, widths[i], -1) for i, t in enumerate(ts)],
                    [ER.QUANT_CODES[t.type.name] for t in ts])
        self.rows3, self.codes = rows3("exps", E, (f, f, d))
        self.shared3, self.shared_codes = rows3("shexp", 1, (moe.n_ff_shexp, moe.n_ff_shexp, d))

    def matrices(self) -> list[W.Matrices]:
        return [self.router] + [m for pair in self.experts for m in pair] + self.shared.matrices()

    def route(self, h, i8, work) -> tuple[np.ndarray, np.ndarray]:
        """(chosen experts int [n, k], their weights float32 [n, k])."""
        logits = self.router(Activations(h, i8), work)                      # [n, E]
        return softmax_top_k_normed(logits, self.moe.n_used)

    def __call__(self, h, i8, work) -> np.ndarray:
        if (h.shape[0] == 1 and i8 and self.rows3 is not None and self.experts[0][0].parts[0].int8
                and compiled_layers.enabled()):   # HEARTH_CPU_COMPILED_LAYERS=0: per expert (comparisons)
            return self._one(h, work)
        f = self.moe.n_ff_exp
        chosen, w = self.route(h, i8, work)
        out = np.zeros_like(h)
        for e in np.unique(chosen):
            rows, slot = np.nonzero(chosen == e)
            gate_up, down = self.experts[e]
            gu = gate_up(Activations(h[rows], i8), work)                   # [r, 2 f]
            y = down(Activations(silu_mul(gu[:, :f], gu[:, f:]), i8), work)
            out[rows] += y * w[rows, slot][:, None]
        s = 1.0 / (1.0 + np.exp(-(h @ self.shared_gate)))                  # [n]
        out += self.shared(h, i8, work) * s[:, None].astype(np.float32)
        return out


    def _one(self, h, work) -> np.ndarray:
        """One token with 8-bit x: x quantized once for the router and the experts; every chosen
        expert's gate and up rows (and the shared expert's) in one launch, their down rows in
        another; the outputs summed in slot order (llama.cpp's), then the shared expert's."""
        f, k, d, fs = self.moe.n_ff_exp, self.moe.n_used, h.shape[1], self.moe.n_ff_shexp
        act = Activations(h, True)
        chosen, w = softmax_top_k_normed(self.router(act, work), k)
        sh = self.shared3 is not None
        (gate, up, down), c = self.rows3, list(self.codes)
        gw = k * f + (fs if sh else 0)                                         # gate (or up) outputs
        # jobs (tensor, expert, x row, first output): gate [slots, shared] then up [slots, shared]
        jobs = [(0, e, 0, s * f) for s, e in enumerate(chosen[0])] + [(1, e, 0, gw + s * f) for s, e in enumerate(chosen[0])]
        ws, cs = [gate, up], c[:2]
        if sh:
            jobs += [(2, 0, 0, k * f), (3, 0, 0, gw + k * f)]
            ws, cs = ws + self.shared3[:2], cs + self.shared_codes[:2]
        gu = ER.multiply(ws, cs, np.array(jobs), ER.quantized(h, cs), np.empty(2 * gw, np.float32))
        a = silu_mul(gu[None, :gw], gu[None, gw:])[0]                        # [gw]
        x = np.zeros((k + sh, max(f, fs) if sh else f), np.float32)          # each slot's input (zeros after)
        x[:k, :f] = a[:k * f].reshape(k, f)
        jobs = [(0, e, s, s * d) for s, e in enumerate(chosen[0])]
        ws, cs = [down], c[2:]
        if sh:
            x[k, :fs] = a[k * f:]
            jobs.append((1, 0, k, k * d))
            ws, cs = ws + self.shared3[2:], cs + self.shared_codes[2:]
        y = ER.multiply(ws, cs, np.array(jobs), ER.quantized(x, cs), np.empty((k + sh) * d, np.float32)).reshape(-1, d)
        out = y[0] * w[0, 0]
        for s in range(1, k):
            out += y[s] * w[0, s]
        ys = y[k] if sh else self.shared(h, True, work, act)[0]
        sg = 1.0 / (1.0 + np.exp(-(h @ self.shared_gate)))                   # [1]
        out += ys * sg.astype(np.float32)
        return out[None]


class _Renamed:
    """A weights.Loader that reads `ffn_gate` as `ffn_gate_shexp` (and so on): the shared expert is
    a dense FFN under other names."""

    def __init__(self, ld, names: dict[str, str]):
        self.ld, self.names = ld, names

    def matrix(self, names, n_in, rows):
        out = []
        for n in names:
            for old, new in self.names.items():
                n = n.replace(f".{old}.", f".{new}.")
            out.append(n)
        return self.ld.matrix(out, n_in, rows)


class Qwen35Moe(Qwen35):
    def _make_ffn(self, g, ld, p):
        return MoeFFN(g, ld, p, self.cfg.n_embd, self.hc.moe)
