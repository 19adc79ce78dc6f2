"""Qwen3.5 dense (llama.cpp arch `qwen35`): Gated DeltaNet linear attention in most layers, gated
full attention in every full_attention_interval-th, a SwiGLU FFN after each (llama.cpp:
src/models/qwen35.cpp, delta-net-base.cpp).

A linear (recurrent) layer, x [n, d] after attn_norm:
    attn_qkv x -> causal depthwise conv1d (kernel ssm.conv_kernel, state carried across calls)
      -> SiLU -> q, k [n, H_k, S], v [n, H_v, S]; q and k L2-normalised
    g = softplus(ssm_alpha x + ssm_dt.bias) * ssm_a (ssm_a = -exp(A_log), stored as is),
    beta = sigmoid(ssm_beta x); the gated delta rule (delta_net.py) -> o [n, H_v, S]
    RMSNorm(o) per head (ssm_norm) * silu(attn_gate x) -> ssm_out
A full-attention layer:
    attn_q gives per head [query(hd) | gate(hd)]; q and k RMS-normed per head; RoPE on the first
    rope.dimension_count dims (IMROPE with sections: for text every section's position is the
    token's, so it is NeoX on pairs (i, i + n_rot/2)); attention * sigmoid(gate) -> attn_output
Every layer: x += attention part; x += FFN(RMSNorm(x) with post_attention_norm as the pre-norm).
Norm weights are the final multipliers (no +1). The output is token_embd unless output.weight.

Multi-token-prediction layers (blk.{n_layer}... , counted in block_count, nextn_predict_layers of
them) predict further tokens for speculative decoding; Hearth does not draft, so they are left in
the file unread and the trunk runs alone, as llama.cpp's main pass does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig
from ..cpu.delta_step import gdn_decode
from ..cpu.linear import _LAUNCH, Activations
from . import compiled_layers
from . import delta_net as dn
from . import weights as W
from .layer_state import HybridState
from .layers import Rope, attention, rms_norm, silu_mul
from .model_base import ModelBase


@dataclass
class LinearBlock:
    attn_norm: np.ndarray          # [d]
    w_in: W.Matrices               # d -> conv_channels (q|k|v) | value_dim (gate z) | H_v (beta) | H_v (alpha)
    conv_w: np.ndarray             # [conv_channels, d_conv]
    dt_bias: np.ndarray            # [H_v]
    a: np.ndarray                  # [H_v]  -exp(A_log)
    ssm_norm: np.ndarray           # [S]
    ssm_out: W.Matrices            # value_dim -> d
    ffn_norm: np.ndarray           # [d]   post_attention_norm
    ffn: "DenseFFN"                # or qwen35moe's MoeFFN

    def __post_init__(self):
        self.conv_wt = np.ascontiguousarray(self.conv_w.T)   # [d_conv, conv_channels]: the compiled step's


@dataclass
class AttnBlock:
    attn_norm: np.ndarray          # [d]
    wqkv: W.Matrices               # d -> nh * 2 hd (query|gate per head) | nkv hd | nkv hd
    qk_norm: np.ndarray            # [nh + nkv, hd] q_norm * attention scale per q head, k_norm per k head
    wo: W.Matrices                 # nh hd -> d
    ffn_norm: np.ndarray
    ffn: "DenseFFN"


class DenseFFN:
    """down(silu(gate x) * up x)."""

    def __init__(self, ld, p: str, d: int, n_ff: int):
        self.n_ff = n_ff
        self.w_gate_up = ld.matrix([p + "ffn_gate.weight", p + "ffn_up.weight"], d, [n_ff, n_ff])   # d -> 2 n_ff
        self.w_down = ld.matrix([p + "ffn_down.weight"], n_ff, [d])                                # n_ff -> d

    def matrices(self) -> list[W.Matrices]:
        return [self.w_gate_up, self.w_down]

    def __call__(self, h, i8, work, act: Activations | None = None) -> np.ndarray:
        """act: h's Activations where the caller has them (quantized once)."""
        gu = self.w_gate_up(act or Activations(h, i8), work)        # [n, 2 n_ff]
        return self.w_down(Activations(silu_mul(gu[:, :self.n_ff], gu[:, self.n_ff:]), i8), work)


class Qwen35(ModelBase):
    def __init__(self, cfg: ModelConfig, g):
        self.cfg = c = cfg
        self.hc = hc = cfg.hybrid
        ld = W.Loader(g)
        self._load_ends(g, ld)
        self.rope = Rope(c.n_rot, c.rope_base, True)
        self.blocks = [self._linear_block(g, ld, i) if hc.recurrent_layers[i] else self._attn_block(g, ld, i)
                       for i in range(c.n_layer)]
        self._init_int8()

    def _matrices(self) -> list[W.Matrices]:
        out = []
        for b in self.blocks:
            out += [b.w_in, b.ssm_out] if isinstance(b, LinearBlock) else [b.wqkv, b.wo]
            out += b.ffn.matrices()
        return out + [self.output]

    def make_state(self, n_ctx: int, kv_dtype: str = "f32") -> HybridState:
        c, hc = self.cfg, self.hc
        return HybridState(c.n_layer, hc.attn_layers, c.n_head_kv, c.head_dim, n_ctx,
                           conv_shape=(hc.d_conv - 1, hc.conv_channels),
                           delta_shape=(hc.n_v_heads, hc.d_state, hc.d_state), kv_dtype=kv_dtype)

    def _ffn(self, g, ld, p):
        c = self.cfg
        return dict(ffn_norm=W.tensor(g, p + "post_attention_norm.weight", (c.n_embd,)), ffn=self._make_ffn(g, ld, p))

    def _make_ffn(self, g, ld, p):
        return DenseFFN(ld, p, self.cfg.n_embd, self.cfg.n_ff)

    def _linear_block(self, g, ld, i: int) -> LinearBlock:
        c, hc, p = self.cfg, self.hc, f"blk.{i}."
        d, hv = c.n_embd, hc.n_v_heads
        return LinearBlock(
            attn_norm=W.tensor(g, p + "attn_norm.weight", (d,)),
            w_in=ld.matrix([p + "attn_qkv.weight", p + "attn_gate.weight", p + "ssm_beta.weight",
                            p + "ssm_alpha.weight"], d, [hc.conv_channels, hc.value_dim, hv, hv]),
            conv_w=W.tensor(g, p + "ssm_conv1d.weight", (hc.conv_channels, hc.d_conv)),
            dt_bias=W.tensor(g, p + "ssm_dt.bias", (hv,)),
            a=W.tensor(g, p + "ssm_a", (hv,)),
            ssm_norm=W.tensor(g, p + "ssm_norm.weight", (hc.d_state,)),
            ssm_out=ld.matrix([p + "ssm_out.weight"], hc.value_dim, [d]),
            **self._ffn(g, ld, p))

    def _attn_block(self, g, ld, i: int) -> AttnBlock:
        c, p = self.cfg, f"blk.{i}."
        d, hd, nh, nkv = c.n_embd, c.head_dim, c.n_head, c.n_head_kv
        qn = W.tensor(g, p + "attn_q_norm.weight", (hd,))
        kn = W.tensor(g, p + "attn_k_norm.weight", (hd,))
        return AttnBlock(
            attn_norm=W.tensor(g, p + "attn_norm.weight", (d,)),
            wqkv=ld.matrix([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"], d,
                           [2 * nh * hd, nkv * hd, nkv * hd]),
            qk_norm=np.concatenate([np.tile(qn * np.float32(c.attn_scale), (nh, 1)), np.tile(kn, (nkv, 1))]),
            wo=ld.matrix([p + "attn_output.weight"], nh * hd, [d]),
            **self._ffn(g, ld, p))

    # -- forward ---------------------------------------------------------------------------

    def _run(self, ids, pos: int, st: HybridState, work) -> np.ndarray:
        c = self.cfg
        n = len(ids)
        i8 = n == 1 or self.int8_batches
        x = self.tok_embd[ids]                                       # [n, d]
        cs = self.rope.cos_sin(pos, n)
        for i, b in enumerate(self.blocks):
            h = rms_norm(x, b.attn_norm, c.rms_eps)
            if isinstance(b, LinearBlock):
                x += self._linear_attention(b, h, st.recurrent_slot[i], st, i8, work)
            else:
                x += self._gated_attention(b, h, st.attn_slot[i], st, pos, cs, i8, work)
            x += b.ffn(rms_norm(x, b.ffn_norm, c.rms_eps), i8, work)
        return x

    def _linear_attention(self, b: LinearBlock, h, r: int, st: HybridState, i8, work) -> np.ndarray:
        c, hc = self.cfg, self.hc
        proj = b.w_in(Activations(h, i8), work)                      # [n, ch + vd + 2 hv]
        if h.shape[0] == 1 and compiled_layers.enabled():
            # decode: the whole step in one compiled call (engine/cpu/delta_step.py)
            o = np.empty((1, hc.value_dim), np.float32)
            with _LAUNCH:   # a parallel launch, one at a time across engines (cpu/linear.py)
                gdn_decode(proj[0], st.conv[r], b.conv_wt, b.dt_bias, b.a, b.ssm_norm, st.delta[r], hc.n_k_heads,
                           c.rms_eps, o[0])
        else:
            o = dn.gated_delta_layer(proj, st.conv[r], st.delta[r], b.conv_w, b.dt_bias, b.a, b.ssm_norm,
                                     hc.n_k_heads, c.rms_eps, work)
        return b.ssm_out(Activations(o, i8), work)                   # [n, d]

    def _gated_attention(self, b: AttnBlock, h, slot: int, st: HybridState, pos, cs, i8, work) -> np.ndarray:
        c = self.cfg
        n, hd, nh, nkv = h.shape[0], c.head_dim, c.n_head, c.n_head_kv
        qkv = b.wqkv(Activations(h, i8), work)                       # [n, 2 nh hd + 2 nkv hd]
        qg = qkv[:, :2 * nh * hd].reshape(n, nh, 2, hd)
        gate = np.ascontiguousarray(qg[:, :, 1]).reshape(n, nh * hd)
        k = qkv[:, 2 * nh * hd:(2 * nh + nkv) * hd].reshape(n, nkv, hd)
        v = qkv[:, (2 * nh + nkv) * hd:].reshape(n, nkv, hd)
        qk = np.ascontiguousarray(np.concatenate([qg[:, :, 0], k], axis=1))   # [n, nh + nkv, hd]
        qk = rms_norm(qk, b.qk_norm, c.rms_eps)
        self.rope.apply(qk, cs)
        st.kv.store(slot, pos, qk[:, nh:].transpose(1, 0, 2), v.transpose(1, 0, 2))
        a = attention(np.ascontiguousarray(qk[:, :nh]), st.kv.k[slot], st.kv.v[slot], pos, 0, work)  # [n, nh hd]
        a *= 1.0 / (1.0 + np.exp(-gate))
        return b.wo(Activations(a, i8), work)
