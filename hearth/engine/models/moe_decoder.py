"""The decoder with a mixture-of-experts FFN in every layer (qwen3moe, gpt-oss).

Attention is the dense decoder's (decoder.py: q/k/v with optional biases and q/k norms, RoPE, the
K/V cache, the output projection with an optional bias); the FFN is `moe.MoeFfn`; gpt-oss adds
attention sinks (attention_sinks.py). One-token passes run on the per-operation path (the compiled
layers, compiled_layers.py, have a dense FFN), except gpt-oss's MoE block: one compiled call
(cpu/moe_mxfp4.py; HEARTH_CPU_MOE_FUSED=0: the per-operation one).

Tensor names are GGUF's. Shapes: n tokens, d = n_embd.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cpu.linear import Activations
from . import weights as W
from .attention_sinks import attention_sinks
from .decoder import Decoder
from .layers import attention, rms_norm
from .moe import MoeFfn


@dataclass
class MoeBlock:
    attn_norm: np.ndarray                 # [d]
    wqkv: W.Matrices                      # d -> (nh + 2 nkv) * hd  q outputs, then k, then v
    bqkv: np.ndarray | None               # [(nh + 2 nkv) * hd]      gpt-oss
    qk_norm: np.ndarray | None            # [nh + nkv, hd]           qwen3moe
    wo: W.Matrices                        # nh * hd -> d
    bo: np.ndarray | None                 # [d]                      gpt-oss
    sinks: np.ndarray | None              # [nh]                     gpt-oss
    ffn_norm: np.ndarray                  # [d]
    moe: MoeFfn                           # d -> d


class MoeDecoder(Decoder):
    """Weights of a MoE model and its forward pass over a KVCache (Decoder.forward)."""

    # The FFN's pre-norm (gpt-oss names it post_attention_norm).
    FFN_NORM = "ffn_norm.weight"

    def _matrices(self) -> list[W.Matrices]:
        return [m for b in self.blocks for m in (b.wqkv, b.wo, *b.moe.matrices())] + [self.output]

    @property
    def arithmetic(self) -> dict:
        """How this model's products round beyond the backend's settings (prefix-image keys): the
        experts repacked in groups of 8 rows sum each row's blocks in another float order."""
        return {"experts": "mxfp4-x8"} if any(b.moe.x8 for b in self.blocks) else {}

    def make_resident(self, progress=None) -> None:
        """gpt-oss's experts repacked first where they are (moe.MoeFfn.repack_experts: reading the
        mapped experts is then most of the loading), then every matrix's pages read."""
        pending = [b.moe for b in self.blocks if b.moe.x8_pending]
        if not pending:
            super().make_resident(progress)
            return
        for i, moe in enumerate(pending):
            moe.repack_experts()
            if progress is not None:
                progress(0.05 + 0.6 * (i + 1) / len(pending), "repacking experts")
        rest = None if progress is None else (lambda f, what: progress(0.65 + (f - 0.05) / 0.9 * 0.3, what))
        super().make_resident(rest)

    def _load_block(self, g, ld, i: int) -> MoeBlock:
        c = self.cfg
        d, p = c.n_embd, f"blk.{i}."
        return MoeBlock(
            **self._attention_weights(g, ld, p),
            sinks=W.tensor(g, p + "attn_sinks.weight", (c.n_head,)) if c.attn_sinks else None,
            ffn_norm=W.tensor(g, p + self.FFN_NORM, (d,)),
            moe=MoeFfn(g, c, p),
        )

    def _from_attention(self, i, b: MoeBlock, x, q, r0, r1, pos, kv, window, i8, work=None):
        """Rows [r0, r1): attention over the cache, output projection, MoE FFN, residuals (in x)."""
        c = self.cfg
        if b.sinks is not None:
            a = attention_sinks(q[r0:r1], kv.k[i], kv.v[i], pos + r0, window, b.sinks, work)
        else:
            a = attention(q[r0:r1], kv.k[i], kv.v[i], pos + r0, window, work)    # [n, nh hd]
        o = b.wo(Activations(a, i8), work)                                      # [n, d]
        if b.bo is not None:
            o += b.bo
        xr = x[r0:r1]
        xr += o
        if r1 - r0 == 1 and b.moe.decode_residual(xr[0], b.ffn_norm, c.rms_eps, i8):
            return
        h = rms_norm(xr, b.ffn_norm, c.rms_eps)
        xr += b.moe(h, i8, work)
