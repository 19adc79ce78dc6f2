"""Which models run a decoded token's layers as compiled calls (engine/cpu/decode_layer.py), and
their weights as that function's tables.

The compiled layer does what llama, qwen2 (q/k/v biases) and qwen3 (q/k norms) layers do: RMSNorm,
q/k/v, RoPE (normal or NeoX pairs), the K/V store, grouped-query attention over every cached
position, the output projection, SiLU-gated FFN, residuals. A model gets it when every layer is
that and every matrix has a kernel (the ten quantized types, the i-quants and MXFP4, and F32/F16/BF16), with 8-bit x on
(the default); otherwise (gemma3: post norms, GELU, sliding windows; an output bias; a matrix
dequantized to float32 for want of a kernel; HEARTH_CPU_INT8=0 or float_activations()) its
one-token passes stay on decoder.py's per-operation path. `reason` says why not.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from ..cpu.decode_layer import TYPE_CODES, decode_layers
from ..cpu.linear import Linear

_local = threading.local()


def enabled() -> bool:
    """Whether eligible models use the compiled layers: on unless HEARTH_CPU_COMPILED_LAYERS=0 (the
    per-operation path, for comparisons)."""
    return os.environ.get("HEARTH_CPU_COMPILED_LAYERS", "") != "0"


class CompiledLayers:
    """A decoder's layers packed for decode_layers."""

    def __init__(self, dec, file_bytes: np.ndarray):
        c = dec.cfg
        L, d, nh, nkv, hd = c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim
        self.file = file_bytes                                  # uint8 [file size]
        self.meta = np.zeros((L, 7, 3), np.int64)               # byte offset, rows, bytes per row
        self.types = np.zeros((L, 7), np.int64)
        self.scales = np.ones((L, 7), np.float32)
        self.norms = np.empty((L, 2, d), np.float32)
        qkn = dec.blocks[0].qk_norm is not None
        bias = dec.blocks[0].bqkv is not None
        self.qk_norm = np.zeros((L, nh + nkv, hd) if qkn else (1, 1, 1), np.float32)
        self.bias = np.zeros((L, (nh + 2 * nkv) * hd) if bias else (1, 1), np.float32)
        base = file_bytes.__array_interface__["data"][0]
        for i, b in enumerate(dec.blocks):
            mats = [(w, t, s) for m in (b.wqkv, b.wo, b.w_gate_up, b.w_down)
                    for p in m.parts for w, t, s in _matrices(p)]
            for j, (w, t, s) in enumerate(mats):
                off = w.__array_interface__["data"][0] - base
                self.meta[i, j] = (off, w.shape[0], w.shape[1])
                self.types[i, j] = TYPE_CODES[t]
                self.scales[i, j] = s
            self.norms[i, 0], self.norms[i, 1] = b.attn_norm, b.ffn_norm
            if qkn:
                self.qk_norm[i] = b.qk_norm
            if bias:
                self.bias[i] = b.bqkv
        dims = [nh, nkv, hd, c.n_ff, c.n_rot, int(c.rope_neox), int(bias), int(qkn)]
        self.dims = {False: np.array([*dims, 0], np.int64), True: np.array([*dims, 1], np.int64)}  # by f16 cache
        self.eps = float(c.rms_eps)
        self.n_layer = L

    @staticmethod
    def reason(dec, file_bytes: np.ndarray | None) -> str | None:
        """Why the decoder's one-token passes cannot run compiled, or None when they can."""
        c = dec.cfg
        if c.n_expert:
            return "a mixture-of-experts FFN (models/moe.py)"
        if file_bytes is None:
            return "the weights are not one mapped file"
        if c.post_norms or c.activation != "silu" or c.sliding_window:
            return "post-norms, GELU or sliding windows (gemma3)"
        if c.head_dim % 8 or c.n_rot % 2 or c.n_rot > c.head_dim or c.n_head % c.n_head_kv:
            return f"head size {c.head_dim} / rotated {c.n_rot}"
        lo = file_bytes.__array_interface__["data"][0]
        hi = lo + file_bytes.size
        for i, b in enumerate(dec.blocks):
            if b.bo is not None or b.post_attn_norm is not None or b.post_ffn_norm is not None:
                return f"layer {i}: an output bias or post-norms"
            if (b.qk_norm is None) != (dec.blocks[0].qk_norm is None) or (b.bqkv is None) != (dec.blocks[0].bqkv is None):
                return f"layer {i}: q/k norms or biases in some layers only"
            want = {"q/k/v": (b.wqkv, 3), "o": (b.wo, 1), "gate/up": (b.w_gate_up, 2), "down": (b.w_down, 1)}
            for name, (m, n) in want.items():
                if not all(isinstance(p, Linear) for p in m.parts):
                    return f"layer {i}: {name} has a matrix without a kernel (dequantized)"
                mats = [x for p in m.parts for x in _matrices(p)]
                if len(mats) != n:
                    return f"layer {i}: {name} is not {n} matrices"
                for w, t, _ in mats:
                    a = w.__array_interface__["data"][0]
                    if t not in TYPE_CODES or not w.flags.c_contiguous or a < lo or a + w.nbytes > hi:
                        return f"layer {i}: {name} ({t}) is not in the file's map"
        return None

    def run(self, l0: int, l1: int, x: np.ndarray, pos: int, kv, cs) -> None:
        """Layers [l0, l1) of one token: x float32 [d] (updated in place) at position pos, its K/V
        stored into kv; cs: the rotation (cos, sin) of pos (Rope.cos_sin)."""
        kb, vb = kv.as_bytes()
        dims = self.dims[kv.dtype == np.float16]
        decode_layers(l0, l1, self.file, self.meta, self.types, self.scales, self.norms, self.qk_norm, self.bias,
                      dims, self.eps, x, kb, vb, pos, cs[0].reshape(-1), cs[1].reshape(-1),
                      _scores(int(dims[0]) * kv.max_ctx))


def _matrices(p: Linear):
    """(uint8 [rows, bytes per row], type name, output scale) of each matrix of a Linear."""
    return [(w, p.type.name, float(s)) for w, s in zip(p.ws, p.scales)]


def _scores(n: int) -> np.ndarray:
    """This thread's attention-score scratch of at least n floats (kept: fresh pages are slow)."""
    buf = getattr(_local, "scores", None)
    if buf is None or buf.size < n:
        buf = _local.scores = np.empty(n, np.float32)
    return buf
