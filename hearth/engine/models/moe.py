"""A mixture-of-experts FFN (qwen3moe, gpt-oss): the router, the top k, the chosen experts' products.

The experts of a layer are three 3-D GGUF tensors, numpy [n_expert, out, in] (GGUF ne
[in, out, n_expert]): `ffn_gate_exps`, `ffn_up_exps` (d -> n_ff_exp) and `ffn_down_exps`
(n_ff_exp -> d). Each expert's matrix is a view of its rows in the mapped file: a `Linear` where
the type has a CPU kernel, an `OnTheFly` matrix otherwise (dequantized per product), so nothing is copied to float
at load and a token reads only the rows of the experts it chose.

A pass over n rows groups them by expert: every chosen expert multiplies all of its rows at once
(decode: one row and k experts; a prefill chunk: each expert's matrix read once for its rows of
the range). Outputs are summed in the order of the top-k slots, as llama.cpp's build_moe_ffn does.

Routing, as llama.cpp (llama-graph.cpp, build_moe_ffn):
    "softmax"          p = softmax(logits over all experts); top k of p; weights p[top]
                       (renormalised to sum 1 where expert_weights_norm: qwen3moe)
    "softmax_weight"   top k of the logits; weights softmax(logits[top])        (gpt-oss)
The router's logits include its bias (gpt-oss) and are computed in float32 from float32 x.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from ..cpu import mxfp4_x8 as X8
from ..cpu.linear import KERNEL_TYPES, Activations, Linear
from ..cpu.simd_vnni import lanes
from ..errors import UnsupportedModelError
from ..quants import dequantize_blocks
from . import weights as W
from .layers import silu_mul

# gpt-oss's SwiGLU (ggml_swiglu_oai): alpha and the clamp limit, fixed by llama.cpp for this arch.
OAI_ALPHA = np.float32(1.702)
OAI_LIMIT = np.float32(7.0)
# The smallest sum of the top k's weights divided by (llama.cpp clamps it the same way).
MIN_WEIGHT_SUM = np.float32(6.103515625e-5)


class OnTheFly:
    """One expert's matrix of a type or width without a CPU kernel: raw rows uint8 [n_out, bytes per
    row] in the mapped file, dequantized at each product into a float32 temporary and multiplied
    there. With 8-bit x (`int8` and the input's), x is first rounded to llama.cpp's Q8_0 values, the
    input llama.cpp's MXFP4 dot product reads."""

    def __init__(self, raw: np.ndarray, gtype, n_in: int, name: str):
        self.ws = (raw,)
        self.type, self.n_in, self.name = gtype, n_in, name
        self.n_out = raw.shape[0]
        self.scales = np.ones(1, np.float32)
        self.int8 = True

    @property
    def nbytes(self) -> int:
        return self.ws[0].nbytes

    def weights(self) -> np.ndarray:
        """float32 [n_out, n_in]."""
        raw = self.ws[0].reshape(-1, self.type.type_size)
        return dequantize_blocks(raw, self.type, self.name).reshape(self.n_out, self.n_in)

    def __call__(self, act: Activations, out: np.ndarray, work=None) -> np.ndarray:
        x = act.x
        if self.int8 and act.int8:
            q, d, _ = act.q8(False)                                   # Q8_0: codes [n, k], scales [n, k/32]
            x = (q.reshape(len(q), -1, 32) * d[:, :, None]).reshape(q.shape)
        np.matmul(x, self.weights().T, out=out)
        if self.scales[0] != 1.0:
            out *= self.scales[0]
        return out


def expert_views(g, name: str, n_expert: int, n_in: int, n_out: int) -> tuple:
    """(type, uint8 [n_expert, n_out, bytes per row]) of a 3-D expert tensor, checked."""
    t = g.tensors.get(name)
    if t is None:
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} is missing")
    if tuple(int(s) for s in t.shape) != (n_in, n_out, n_expert):
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {list(t.shape)} (GGUF order), "
                                    f"expected {[n_in, n_out, n_expert]} from the metadata")
    if n_in % t.type.block_size:
        raise UnsupportedModelError(f"{g.path.name}: tensor {name}: rows of {n_in} do not split into "
                                    f"{t.type.name} blocks of {t.type.block_size}")
    row_bytes = n_in // t.type.block_size * t.type.type_size
    return t.type, t.data.reshape(n_expert, n_out, row_bytes)


def _router(g, name: str, n_expert: int, d: int) -> np.ndarray:
    """The router float32 [n_expert, d]: a view of the file where it is F32 (as converters write it)."""
    t = g.tensors.get(name)
    if t is None:
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} is missing")
    if tuple(int(s) for s in t.shape) != (d, n_expert):
        raise UnsupportedModelError(f"{g.path.name}: tensor {name} has shape {list(t.shape)} (GGUF order), "
                                    f"expected {[d, n_expert]} from the metadata")
    if t.type.name == "F32":
        return t.data.view(np.float32).reshape(n_expert, d)
    return W.tensor(g, name, (n_expert, d))


def _expert_matrix(gtype, views: list[np.ndarray], n_in: int, name: str) -> W.Matrices:
    """One expert's matrices reading the same x (gate and up, or down), outputs side by side."""
    if gtype.name in KERNEL_TYPES and n_in % 32 == 0:
        return W.Matrices([Linear(views, gtype, n_in, name)])
    return W.Matrices([OnTheFly(v, gtype, n_in, name) for v in views])


class MoeFfn:
    """One layer's router and experts. `ffn(h, i8, work)`: h float32 [n, d] (the normed FFN input)
    -> float32 [n, d]."""

    def __init__(self, g, cfg, prefix: str):
        c = cfg
        d, E, ff = c.n_embd, c.n_expert, c.n_ff_exp
        self.k, self.gating, self.norm_w, self.act = c.n_expert_used, c.expert_gating, c.expert_weights_norm, c.activation
        self.router = _router(g, prefix + "ffn_gate_inp.weight", E, d)                  # [n_expert, d]
        self.router_b = W.optional(g, prefix + "ffn_gate_inp.bias", (E,))              # [n_expert]
        tg, gate = expert_views(g, prefix + "ffn_gate_exps.weight", E, d, ff)           # [E, ff, row bytes]
        tu, up = expert_views(g, prefix + "ffn_up_exps.weight", E, d, ff)
        td, down = expert_views(g, prefix + "ffn_down_exps.weight", E, ff, d)           # [E, d, row bytes]
        self.gate_up = []                                                              # per expert: d -> 2 ff
        for e in range(E):
            name = f"{prefix}ffn_gate_up_exps[{e}]"
            if tg == tu:
                self.gate_up.append(_expert_matrix(tg, [gate[e], up[e]], d, name))
            else:
                a, b = _expert_matrix(tg, [gate[e]], d, name), _expert_matrix(tu, [up[e]], d, name)
                self.gate_up.append(W.Matrices(a.parts + b.parts))
        self.down = [_expert_matrix(td, [down[e]], ff, f"{prefix}ffn_down_exps[{e}]") for e in range(E)]
        bg = W.optional(g, prefix + "ffn_gate_exps.bias", (E, ff))
        bu = W.optional(g, prefix + "ffn_up_exps.bias", (E, ff))
        self.b_gate_up = None if bg is None and bu is None else np.concatenate(
            [bg if bg is not None else np.zeros((E, ff), np.float32),
             bu if bu is not None else np.zeros((E, ff), np.float32)], axis=1)         # [E, 2 ff]
        self.b_down = W.optional(g, prefix + "ffn_down_exps.bias", (E, d))             # [E, d]
        # gpt-oss's decode in one compiled call (cpu/moe_mxfp4.py) where everything is its kind and
        # the CPU has VNNI (its MXFP4 rows are kernels_mxfp4's, generic IR and slow elsewhere).
        kind = (tg.name == tu.name == td.name == "MXFP4" and self.act == "swiglu_oai"
                and self.gating == "softmax_weight" and self.router.flags.c_contiguous
                and d % 32 == 0 and ff % 32 == 0)
        self.fused = kind and lanes() != 0
        if kind:
            self._raw = (self.router.view(np.uint8), _or_zeros(self.router_b, (E,)), gate, up, down,
                         _or_zeros(self.b_gate_up, (E, 2 * ff)), _or_zeros(self.b_down, (E, d)))
        # Where the fused kernel runs, the experts are repacked in groups of 8 rows at load
        # (repack_experts, from make_resident): decode then multiplies 8 rows a step (2.4x the row
        # kernel's weights a second, cpu/kernels_mxfp4_x8.py), prefill reads the same copy.
        self.x8 = False
        self.x8_pending = self.fused and x8_applies(d, ff)
        self._x8_type, self._prefix = tg, prefix
        self._drop = getattr(g, "drop_pages", None)   # GGUFFile's (a test's stand-in may have none)

    def repack_experts(self) -> None:
        """The experts (where x8_pending) into anonymous arrays in groups of 8 rows, one tensor at a
        time, each tensor's mapped pages then dropped from this process (GGUFFile.drop_pages), and
        every expert's matrices the repacked ones (cpu/linear_x8.py), so nothing reads the mapped
        copy again."""
        if not self.x8_pending:
            return
        from ..cpu.linear_x8 import LinearX8  # noqa: PLC0415
        router, rb, gate, up, down, bgu, bd = self._raw
        E, ff, d = gate.shape[0], gate.shape[1], down.shape[1]
        int8 = self.down[0].parts[0].int8
        gx, ux, dx = (X8.repack_experts(t, self._drop) for t in (gate, up, down))   # [E, rows / 8, nb * 136]
        t, p = self._x8_type, self._prefix
        self.gate_up = [W.Matrices([LinearX8([gx[e], ux[e]], t, d, f"{p}ffn_gate_up_exps[{e}]", int8)])
                        for e in range(E)]
        self.down = [W.Matrices([LinearX8([dx[e]], t, ff, f"{p}ffn_down_exps[{e}]", int8)]) for e in range(E)]
        self._raw = (router, rb, gx, ux, dx, bgu, bd)
        self.x8, self.x8_pending = True, False

    def decode_residual(self, x: np.ndarray, norm_w: np.ndarray, eps: float, i8: bool) -> bool:
        """x float32 [d] += this FFN of rmsnorm(x) * norm_w in one compiled call, where it applies
        (8-bit x here and in the experts' matrices, a `fused` layer, HEARTH_CPU_MOE_FUSED not 0);
        False: nothing done."""
        if not (i8 and self.fused and self.down[0].parts[0].int8 and fused_default()):
            return False
        from ..cpu.moe_mxfp4 import moe_mxfp4_decode  # noqa: PLC0415  (numba compiles on first use)
        from ..cpu.linear import _LAUNCH  # noqa: PLC0415
        router, rb, gate, up, down, bgu, bd = self._raw
        with _LAUNCH:
            moe_mxfp4_decode(x, norm_w, float(eps), router, rb, self.k, gate, up, down, bgu, bd, self.x8)
        return True

    def matrices(self) -> list[W.Matrices]:
        return [*self.gate_up, *self.down]

    def route(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Chosen experts int64 [n, k] (best first) and their weights float32 [n, k]."""
        logits = h @ self.router.T                                                     # [n, E]
        if self.router_b is not None:
            logits += self.router_b
        if self.gating == "softmax":
            p = _softmax(logits)
            top = _top_k(p, self.k)
            w = np.take_along_axis(p, top, axis=1)
            if self.norm_w:
                w /= np.maximum(w.sum(axis=1, keepdims=True), MIN_WEIGHT_SUM)
        else:
            top = _top_k(logits, self.k)
            w = _softmax(np.take_along_axis(logits, top, axis=1))
        return top, w

    def __call__(self, h: np.ndarray, i8: bool, work=None) -> np.ndarray:
        n, d = h.shape
        top, w = self.route(h)
        if n == 1:
            return self._one(h, top[0], w[0], i8, work)
        ys = np.empty((n, self.k, d), np.float32)                  # each slot's weighted expert output
        flat = top.reshape(-1)
        order = np.argsort(flat, kind="stable")                    # slots grouped by expert, tokens ascending
        bounds = np.flatnonzero(np.diff(flat[order])) + 1
        for grp in np.split(order, bounds):
            e = int(flat[grp[0]])
            rows, slots = grp // self.k, grp % self.k
            y = self._expert(e, Activations(h[rows], i8), i8, work)    # [len(rows), d]
            y *= w[rows, slots][:, None]
            ys[rows, slots] = y
        out = ys[:, 0].copy()
        for s in range(1, self.k):
            out += ys[:, s]
        return out

    def _one(self, h, top, w, i8: bool, work) -> np.ndarray:
        """One row (decode): its k experts in slot order, x quantized once for all of them."""
        act = Activations(h, i8)
        out = None
        for e, we in zip(top.tolist(), w.tolist()):
            y = self._expert(e, act, i8, work)                     # [1, d]
            y *= np.float32(we)
            if out is None:
                out = y
            else:
                out += y
        return out

    def _expert(self, e: int, act: Activations, i8: bool, work) -> np.ndarray:
        gu = self.gate_up[e](act, work)                            # [m, 2 ff]
        if self.b_gate_up is not None:
            gu += self.b_gate_up[e]
        ff = gu.shape[1] // 2
        a = swiglu_oai(gu[:, :ff], gu[:, ff:]) if self.act == "swiglu_oai" else silu_mul(gu[:, :ff], gu[:, ff:])
        y = self.down[e](Activations(a, i8), work)                 # [m, d]
        if self.b_down is not None:
            y += self.b_down[e]
        return y


def x8_applies(d: int, ff: int) -> bool:
    """Whether a fused layer's experts (gate, up: d -> ff; down: ff -> d) are repacked in groups of 8
    rows at load: HEARTH_CPU_MXFP4_X8 not 0 and both shapes split into groups (cpu/mxfp4_x8.py)."""
    return X8.enabled() and X8.applies(ff, d) and X8.applies(d, ff)


def x8_extra_bytes(g, cfg) -> int:
    """Memory beyond the file's bytes that repacking the experts takes (engine/memory.py's estimate):
    the repacked copy replaces the mapped one, whose pages are dropped, except while a tensor is
    being repacked (the largest one); where pages cannot be dropped (no madvise), both copies."""
    if not (cfg.n_expert and cfg.activation == "swiglu_oai" and cfg.expert_gating == "softmax_weight"
            and lanes() != 0 and x8_applies(cfg.n_embd, cfg.n_ff_exp)):
        return 0
    sizes = [t.n_bytes for t in g.tensors.values()
             if t.type.name == "MXFP4" and len(t.shape) == 3 and t.name.endswith(_EXPERT_TENSORS)]
    if not sizes:
        return 0
    return max(sizes) if hasattr(mmap, "MADV_DONTNEED") else sum(sizes)


_EXPERT_TENSORS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")


def fused_default() -> bool:
    """HEARTH_CPU_MOE_FUSED=0: gpt-oss's decoded MoE block on the per-operation path."""
    return os.environ.get("HEARTH_CPU_MOE_FUSED", "") != "0"


def _or_zeros(a: np.ndarray | None, shape: tuple) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32) if a is not None else np.zeros(shape, np.float32)


def swiglu_oai(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """gpt-oss's SwiGLU (ggml_swiglu_oai): x = min(g, 7); x * sigmoid(1.702 x) * (clamp(u, -7, 7) + 1)."""
    x = np.minimum(g, OAI_LIMIT)
    y = np.clip(u, -OAI_LIMIT, OAI_LIMIT)
    t = np.exp(-OAI_ALPHA * x)
    t += 1.0
    out = x / t
    out *= y + np.float32(1.0)
    return out


def softmax_top_k_normed(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The "softmax" gating with its weights renormalised (qwen3.5-moe, gemma 4): logits [n, E] ->
    (chosen experts int64 [n, k] best first, their weights float32 [n, k] summing to 1)."""
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    chosen = np.argsort(-p, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(p, chosen, axis=1)
    w /= np.maximum(w.sum(axis=1, keepdims=True), MIN_WEIGHT_SUM)
    return chosen, w.astype(np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e.astype(np.float32, copy=False)


def _top_k(x: np.ndarray, k: int) -> np.ndarray:
    """Indices int64 [n, k] of each row's k largest, best first (ties: the lower index)."""
    return np.argsort(-x, axis=1, kind="stable")[:, :k]
