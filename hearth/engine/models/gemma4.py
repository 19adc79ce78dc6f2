"""Gemma 4 (llama.cpp arch `gemma4`, src/models/gemma4.cpp): the E2B/E4B/dense shapes, CPU.

Per layer il (x [n, d]; the embeddings are scaled by sqrt(d)):
    h = RMSNorm(x) (attn_norm)
    q = RMSNorm_head(attn_q h) (attn_q_norm); k = RMSNorm_head(attn_k h) (attn_k_norm);
    v = RMSNorm_head(attn_v h) without a weight (attn_v absent: v is k's projection)
    NeoX RoPE: sliding layers rotate rope.dimension_count_swa dims with freq_base_swa; full layers
    rotate rope.dimension_count dims with freq_base, frequencies divided by rope_freqs.weight
    attention with scale 1 (a sliding layer sees the last `window` positions); head sizes differ
    per kind (key_length_swa vs key_length); layers from n_layer - shared_kv_layers on compute no
    K/V and read the last earlier layer of their kind's (Gemma4Config.kv_source)
    a = RMSNorm(attn_output a) (post_attention_norm); x1 = x + a
    f = RMSNorm(down(gelu(gate h1) * up h1)) (post_ffw_norm) with h1 = RMSNorm(x1) (ffn_norm); x2 = x1 + f
    per-layer input p_il [n, npl]: x3 = x2 + RMSNorm(proj(gelu(inp_gate x2) * p_il)) (post_norm)
    x = x3 * layer_output_scale
The per-layer inputs, for all layers at once: (RMSNorm(per_layer_model_proj(x0) / sqrt(d))
(per_layer_proj_norm) + per_layer_token_embd[id] * sqrt(npl)) / sqrt(2), x0 the scaled embeddings.
Logits: RMSNorm (output_norm), the output matrix (tied), soft-capped c tanh(l / c).
Norm weights are used as stored (the converter folds Gemma's +1). GELU is the tanh form.
A layer with ffn_gate_inp (the 26B-A4B shape) has experts beside its MLP: gemma4_moe.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig
from ..cpu.linear import Activations
from ..errors import UnsupportedModelError
from ..kv_cache import KVCache
from . import weights as W
from .layer_state import SplitKV
from .gemma4_moe import Gemma4Moe
from .layers import Rope, attention, gelu_tanh_mul, rms_norm
from .model_base import ModelBase


def split_kv_layout(cfg) -> tuple[list[tuple[int, int, int]], dict[int, tuple[int, int]]]:
    """The caches of a SplitKV, either backend's: (layers, KV heads, head dim) per cache, one for the
    sliding layers' head size and one for the full layers' (each kind must have one KV head count),
    and `slot[layer] = (cache, index)`, KV-sharing layers mapped to the layer they read."""
    hc = cfg.hybrid
    shapes, slot = [], {}
    for kind in (True, False):
        own = [i for i in range(hc.n_kv_layers) if hc.swa_layers[i] == kind]
        if not own:
            continue
        heads = {hc.n_head_kv[i] for i in own}
        if len(heads) > 1:
            raise UnsupportedModelError(f"Gemma 4 with {sorted(heads)} KV heads among its "
                                        f"{'sliding' if kind else 'full'} layers is not supported yet")
        for j, i in enumerate(own):
            slot[i] = (len(shapes), j)
        shapes.append((len(own), heads.pop(), hc.head_dim_swa if kind else cfg.head_dim))
    for i in range(hc.n_kv_layers, cfg.n_layer):
        slot[i] = slot[hc.kv_source(i)]
    return shapes, slot


@dataclass
class Block:
    attn_norm: np.ndarray            # [d]
    wq: W.Matrices                   # d -> nh hd
    wkv: W.Matrices | None           # d -> nkv hd (k) | nkv hd (v, when attn_v exists); None: shares K/V
    v_is_k: bool                     # no attn_v: v is k's projection
    q_norm: np.ndarray               # [hd]
    k_norm: np.ndarray | None        # [hd]
    wo: W.Matrices                   # nh hd -> d
    post_attn_norm: np.ndarray       # [d]
    ffn_norm: np.ndarray             # [d]
    w_gate_up: W.Matrices            # d -> 2 n_ff
    w_down: W.Matrices               # n_ff -> d
    post_ffn_norm: np.ndarray        # [d]
    ple_gate: W.Matrices | None      # d -> npl
    ple_proj: W.Matrices | None      # npl -> d
    ple_norm: np.ndarray | None      # [d]
    out_scale: float                 # layer_output_scale (1 when absent)
    moe: Gemma4Moe | None            # the layer's FFN is experts + a shared MLP (w_gate_up/w_down are its MLP's)
    hd: int
    n_ff: int


class Gemma4(ModelBase):
    def __init__(self, cfg: ModelConfig, g):
        self.cfg = c = cfg
        self.hc = hc = cfg.hybrid
        d = c.n_embd
        ld = W.Loader(g)
        self._load_ends(g, ld)
        npl, L = hc.n_embd_per_layer, c.n_layer
        if npl:
            self.ple_embd = W.RowLookup(g, "per_layer_token_embd.weight", c.n_vocab, npl * L)
            self.ple_model_proj = ld.matrix(["per_layer_model_proj.weight"], d, [npl * L])
            self.ple_proj_norm = W.tensor(g, "per_layer_proj_norm.weight", (npl,))
        freqs = W.optional(g, "rope_freqs.weight", (c.n_rot // 2,))
        self.rope_full = Rope(c.n_rot, c.rope_base, True, freq_factors=freqs)
        self.rope_swa = Rope(hc.n_rot_swa, hc.rope_base_swa, True)
        self.blocks = [self._block(g, ld, i) for i in range(L)]
        self._init_int8()

    def _matrices(self) -> list[W.Matrices]:
        out = [self.ple_model_proj] if self.hc.n_embd_per_layer else []
        for b in self.blocks:
            out += [m for m in (b.wq, b.wkv, b.wo, b.ple_gate, b.ple_proj) if m is not None]
            out += b.moe.matrices() if b.moe is not None else [b.w_gate_up, b.w_down]
        return out + [self.output]

    def _block(self, g, ld, i: int) -> Block:
        c, hc, p = self.cfg, self.hc, f"blk.{i}."
        d, nh, nkv = c.n_embd, c.n_head, hc.n_head_kv[i]
        hd = hc.head_dim_swa if hc.swa_layers[i] else c.head_dim
        has_kv = i < hc.n_kv_layers
        v_is_k = p + "attn_v.weight" not in g.tensors
        wkv = None
        if has_kv:
            names = [p + "attn_k.weight"] + ([] if v_is_k else [p + "attn_v.weight"])
            wkv = ld.matrix(names, d, [nkv * hd] * len(names))
        npl, n_ff = hc.n_embd_per_layer, hc.n_ff[i]
        scale = W.optional(g, p + "layer_output_scale.weight", (1,))
        moe = (Gemma4Moe(g, ld, p, d, n_ff, hc.moe, c.rms_eps) if p + "ffn_gate_inp.weight" in g.tensors else None)
        return Block(
            attn_norm=W.tensor(g, p + "attn_norm.weight", (d,)),
            wq=ld.matrix([p + "attn_q.weight"], d, [nh * hd]),
            wkv=wkv, v_is_k=v_is_k,
            q_norm=W.tensor(g, p + "attn_q_norm.weight", (hd,)),
            k_norm=W.tensor(g, p + "attn_k_norm.weight", (hd,)) if has_kv else None,
            wo=ld.matrix([p + "attn_output.weight"], nh * hd, [d]),
            post_attn_norm=W.tensor(g, p + "post_attention_norm.weight", (d,)),
            ffn_norm=W.tensor(g, p + "ffn_norm.weight", (d,)),
            w_gate_up=moe.w_gate_up if moe else ld.matrix([p + "ffn_gate.weight", p + "ffn_up.weight"], d, [n_ff, n_ff]),
            w_down=moe.w_down if moe else ld.matrix([p + "ffn_down.weight"], n_ff, [d]),
            post_ffn_norm=W.tensor(g, p + "post_ffw_norm.weight", (d,)),
            ple_gate=ld.matrix([p + "inp_gate.weight"], d, [npl]) if npl else None,
            ple_proj=ld.matrix([p + "proj.weight"], npl, [d]) if npl else None,
            ple_norm=W.tensor(g, p + "post_norm.weight", (d,)) if npl else None,
            out_scale=float(scale[0]) if scale is not None else 1.0, moe=moe,
            hd=hd, n_ff=n_ff)

    def make_state(self, n_ctx: int, kv_dtype: str = "f32") -> SplitKV:
        shapes, slot = split_kv_layout(self.cfg)
        return SplitKV([KVCache(n, heads, hd, n_ctx, kv_dtype) for n, heads, hd in shapes], slot)

    # -- forward ---------------------------------------------------------------------------

    def _per_layer_inputs(self, ids, x0, i8, work) -> np.ndarray | None:
        """[n, n_layer, npl]: what each layer's per-layer branch multiplies by."""
        c, npl = self.cfg, self.hc.n_embd_per_layer
        if not npl:
            return None
        n = len(ids)
        tok = self.ple_embd[ids].reshape(n, c.n_layer, npl) * np.float32(math.sqrt(npl))
        proj = self.ple_model_proj(Activations(x0, i8), work).reshape(n, c.n_layer, npl)
        proj *= np.float32(1.0 / math.sqrt(c.n_embd))
        proj = rms_norm(proj, self.ple_proj_norm, c.rms_eps)
        return (proj + tok) * np.float32(1.0 / math.sqrt(2.0))

    def _run(self, ids, pos: int, st: SplitKV, work) -> np.ndarray:
        c, hc = self.cfg, self.hc
        n = len(ids)
        i8 = n == 1 or self.int8_batches
        x = self.tok_embd[ids] * np.float32(c.embed_scale)         # [n, d]
        ple = self._per_layer_inputs(ids, x, i8, work)
        cs_full = self.rope_full.cos_sin(pos, n)
        cs_swa = self.rope_swa.cos_sin(pos, n)
        for i, b in enumerate(self.blocks):
            swa = hc.swa_layers[i]
            a = self._attention(i, b, rms_norm(x, b.attn_norm, c.rms_eps), st, pos,
                                self.rope_swa if swa else self.rope_full, cs_swa if swa else cs_full,
                                hc.window if swa else 0, i8, work)
            x += rms_norm(a, b.post_attn_norm, c.rms_eps)
            if b.moe is not None:
                f = b.moe(x, i8, work)
            else:
                gu = b.w_gate_up(Activations(rms_norm(x, b.ffn_norm, c.rms_eps), i8), work)
                f = b.w_down(Activations(gelu_tanh_mul(gu[:, :b.n_ff], gu[:, b.n_ff:]), i8), work)
            x += rms_norm(f, b.post_ffn_norm, c.rms_eps)
            if ple is not None:
                gate = b.ple_gate(Activations(x, i8), work)           # [n, npl]
                pe = gelu_tanh_mul(gate, np.ascontiguousarray(ple[:, i]))
                x += rms_norm(b.ple_proj(Activations(pe, i8), work), b.ple_norm, c.rms_eps)
            if b.out_scale != 1.0:
                x *= np.float32(b.out_scale)
        return x

    def _attention(self, i, b: Block, h, st: SplitKV, pos, rope, cs, window, i8, work) -> np.ndarray:
        c = self.cfg
        n, hd, nh = h.shape[0], b.hd, c.n_head
        cache, slot = st.kv_of(i)
        q = b.wq(Activations(h, i8), work).reshape(n, nh, hd)
        q = rms_norm(q, np.tile(b.q_norm, (nh, 1)), c.rms_eps)
        rope.apply(q, cs)
        if b.wkv is not None:
            nkv = cache.n_kv_heads
            kv = b.wkv(Activations(h, i8), work)
            k = kv[:, :nkv * hd].reshape(n, nkv, hd)
            v = k.copy() if b.v_is_k else kv[:, nkv * hd:].reshape(n, nkv, hd)
            k = rms_norm(k, np.tile(b.k_norm, (nkv, 1)), c.rms_eps)
            v = rms_norm(np.ascontiguousarray(v), np.ones((1, hd), np.float32), c.rms_eps)
            rope.apply(k, cs)
            cache.store(slot, pos, k.transpose(1, 0, 2), v.transpose(1, 0, 2))
        a = attention(np.ascontiguousarray(q), cache.k[slot], cache.v[slot], pos, window, work)
        return b.wo(Activations(a, i8), work)

    def logits(self, rows, i8):
        out = super().logits(rows, i8)
        cap = self.cfg.final_softcap
        if cap > 0:
            out /= cap
            np.tanh(out, out=out)
            out *= cap
        return out
