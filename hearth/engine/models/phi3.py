"""phi3 (Phi-4-mini, Phi-3.x): llama's layer order with three differences (llama.cpp's
LLM_ARCH_PHI3; the flags are read in engine/models/dense_config.py):
- q, k and v come from one matrix `attn_qkv` (rows: q of every head, then k, then v; older files
  have them apart), and the FFN's gate and up from one matrix `ffn_up` (rows: gate, then up);
- NeoX RoPE on the first `rope.dimension_count` dims of each head only (partial rotary);
- each frequency's angle is divided by `rope_factors_long` when the context is longer than
  `rope.scaling.original_context_length`, else by `rope_factors_short` (llama.cpp decides by its
  context size too), and cos/sin are multiplied by `rope.scaling.attn_factor` (config.py).

The fused matrices are split into row views of the mapped file (q | k | v, gate | up), so the
decoder's passes and the compiled layers see the three and two matrices they expect.
"""

from __future__ import annotations

from ..cpu.linear import Linear
from .dense_config import config_fields  # noqa: F401  (the ModelConfig fields of this architecture)
from ..errors import UnsupportedModelError
from . import weights as W
from .decoder import Block, Decoder
from .layers import Rope


class Phi3(Decoder):

    def __init__(self, cfg, g):
        super().__init__(cfg, g)
        half = cfg.n_rot // 2
        self._ropes = {name: Rope(cfg.n_rot, cfg.rope_base, cfg.rope_neox, cfg.rope_scaling,
                                  W.optional(g, f"rope_factors_{name}.weight", (half,)))
                       for name in ("long", "short")}
        self.rope = self._ropes["short"]

    def rope_for(self, n_ctx: int) -> Rope:
        """The rotation llama.cpp uses at a context of n_ctx positions."""
        return self._ropes["long" if n_ctx > self.cfg.rope_orig_ctx else "short"]

    def forward(self, ids, pos, kv, *args, **kwargs):
        self.rope = self.rope_for(kv.max_ctx)
        return super().forward(ids, pos, kv, *args, **kwargs)

    def _load_block(self, g, ld, i: int) -> Block:
        c = self.cfg
        d, hd, p = c.n_embd, c.head_dim, f"blk.{i}."
        rows = [c.n_head * hd, c.n_head_kv * hd, c.n_head_kv * hd]
        return Block(
            attn_norm=W.tensor(g, p + "attn_norm.weight", (d,)),
            wqkv=self._qkv(g, ld, p, rows),
            bqkv=None,
            qk_norm=None,
            wo=ld.matrix([p + "attn_output.weight"], c.n_head * hd, [d]),
            bo=None,
            post_attn_norm=None,
            ffn_norm=W.tensor(g, p + "ffn_norm.weight", (d,)),
            w_gate_up=_split(ld.matrix([p + "ffn_up.weight"], d, [2 * c.n_ff]), [c.n_ff, c.n_ff]),
            w_down=ld.matrix([p + "ffn_down.weight"], c.n_ff, [d]),
            post_ffn_norm=None,
        )


    def _qkv(self, g, ld, p: str, rows: list[int]) -> W.Matrices:
        """`attn_qkv` (Phi-4-mini, Phi-3.5) or separate `attn_q`/`attn_k`/`attn_v`, as llama.cpp
        takes either; biases, which no published phi3 file has, are refused rather than ignored."""
        for t in ("attn_qkv.bias", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_up.bias"):
            if p + t in g.tensors:
                raise UnsupportedModelError(f"{g.path.name}: tensor {p + t}: phi3 with biases is not supported by Hearth")
        if p + "attn_qkv.weight" in g.tensors:
            return _split(ld.matrix([p + "attn_qkv.weight"], self.cfg.n_embd, [sum(rows)]), rows)
        return ld.matrix([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"], self.cfg.n_embd, rows)


def _split(m: W.Matrices, rows: list[int]) -> W.Matrices:
    """One fused matrix (fresh from the loader: output scales 1) as consecutive row blocks, views
    of the same bytes, so that the first block alone can carry the attention scale."""
    (part,) = m.parts
    bounds = [sum(rows[:j]) for j in range(len(rows) + 1)]
    if isinstance(part, Linear):
        (w,) = part.ws
        return W.Matrices([Linear([w[a:b] for a, b in zip(bounds, bounds[1:])], part.type, part.n_in, part.name)])
    return W.Matrices([W.Dense(part.w[a:b]) for a, b in zip(bounds, bounds[1:])])
