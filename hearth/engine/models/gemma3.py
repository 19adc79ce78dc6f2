"""Gemma 3: the shared decoder with scaled embeddings, post norms, GeGLU and sliding windows.

As llama.cpp runs it (llama-model.cpp, LLM_ARCH_GEMMA3):
- embeddings scaled by sqrt(n_embd);
- GeGLU with the tanh approximation of GELU;
- RMSNorm after attention and after the FFN (post norms) besides the usual pre-norms. The
  converter stores Gemma's norm weights with the +1 already added, so they are used as is;
- q and k RMSNorm per head (read by Decoder);
- sliding-window attention on 5 layers out of every 6 (layer il is global when il % 6 == 5),
  those layers rotating with their own base (rope.freq_base_swa, default 10,000) and no
  RoPE scaling (Decoder's `rope_swa`);
- q scaled by 1/sqrt(key_length), except the 27B model (62 layers) where it is
  1/sqrt(n_embd / n_head) (query_pre_attn_scalar in Google's config);
- optional final logit soft-capping.
"""

from __future__ import annotations

import math

import numpy as np

from . import weights as W
from .decoder import Block, Decoder
from .layers import gelu_tanh_mul

SWA_PATTERN = 6     # every 6th layer attends to the whole past; the others to a window


def config_fields(g, raw_arch: str, opt, base: dict) -> dict:
    """Gemma 3's ModelConfig fields (see the module's docstring)."""
    n_embd, n_head, n_layer, head_dim = base["n_embd"], base["n_head"], base["n_layer"], base["head_dim"]
    from ..config import MAX_CONTEXT  # noqa: PLC0415  (config imports this package)
    window = opt("attention.sliding_window", 0, 0, MAX_CONTEXT)
    swa = tuple(window > 0 and (il % SWA_PATTERN) < SWA_PATTERN - 1 for il in range(n_layer))
    scale = 1.0 / math.sqrt(n_embd / n_head) if n_layer == 62 else 1.0 / math.sqrt(head_dim)
    return dict(
        rope_base_swa=float(opt("rope.freq_base_swa", 10000.0, 1e-3, 1e12)),
        sliding_window=window, swa_layers=swa,
        embed_scale=math.sqrt(n_embd), post_norms=True, activation="gelu_tanh",
        final_softcap=float(opt("final_logit_softcapping", 0.0, 0.0, 1e6)), attn_scale=scale,
    )


class Model(Decoder):
    def _load_block(self, g, ld, i: int) -> Block:
        b = super()._load_block(g, ld, i)
        d, p = self.cfg.n_embd, f"blk.{i}."
        b.post_attn_norm = W.tensor(g, p + "post_attention_norm.weight", (d,))     # [d]
        b.post_ffn_norm = W.tensor(g, p + "post_ffw_norm.weight", (d,))            # [d]
        return b

    def _embed(self, ids) -> np.ndarray:
        x = super()._embed(ids)                                  # [n, d]
        x *= np.float32(self.cfg.embed_scale)
        return x

    def _act(self, g: np.ndarray, u: np.ndarray) -> np.ndarray:
        return gelu_tanh_mul(g, u)
