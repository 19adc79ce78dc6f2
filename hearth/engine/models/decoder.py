"""The shared layers of the architecture modules: a pre-norm decoder-only transformer in numpy.

embed -> N x [RMSNorm, attention, (post norm), residual, RMSNorm, gated FFN, (post norm),
residual] -> RMSNorm -> logits, over a KV cache, each block in two row-parallel halves. The
optional pieces are tensors a block may carry, read when the file has them, as llama.cpp's graph
builders treat them: q/k/v and o biases, q/k norms per head, post norms (set by an architecture's
`_load_block`), a `rope_freqs` tensor; sliding-window layers and final logit soft-capping follow
the config. What differs between architectures lives in their modules (llama.py, qwen2.py,
qwen3.py, gemma3.py), which replace `_load_block`, `_embed` or `_act`.

Tensor names are GGUF's (`attn_q`, `ffn_gate`, ...). Shapes: n tokens, d = n_embd.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig
from ..errors import UnsupportedModelError
from ..kv_cache import KVCache
from ..cpu.linear import Activations, int8_batches_default, int8_default
from . import compiled_layers
from . import weights as W
from .layers import Rope, attention, rms_norm, silu_mul
from .model_base import MatrixSettings


@dataclass
class Block:
    attn_norm: np.ndarray                 # [d]
    wqkv: W.Matrices                      # d -> (nh + 2 nkv) * hd  q outputs, then k, then v
    bqkv: np.ndarray | None               # [(nh + 2 nkv) * hd]      qwen2
    qk_norm: np.ndarray | None            # [nh + nkv, hd] q_norm (times the attention scale)
                                          # per q head, then k_norm per k head: qwen3, gemma3
    wo: W.Matrices                        # nh * hd -> d
    bo: np.ndarray | None                 # [d]
    ffn_norm: np.ndarray                  # [d]
    w_gate_up: W.Matrices                 # d -> 2 * n_ff  gate outputs, then up
    w_down: W.Matrices                    # n_ff -> d
    post_attn_norm: np.ndarray | None = None   # [d]                 gemma3
    post_ffn_norm: np.ndarray | None = None    # [d]                 gemma3


class Decoder(MatrixSettings):
    """Weights of one model and its forward pass over a KVCache."""

    def __init__(self, cfg: ModelConfig, g):
        self.cfg = c = cfg
        d, hd = c.n_embd, c.head_dim
        ld = W.Loader(g)
        self.tok_embd = W.RowLookup(g, "token_embd.weight", c.n_vocab, d)     # rows [n, d] on demand
        out_name = "token_embd.weight" if c.tied_output else "output.weight"
        self.output = ld.matrix([out_name], d, [c.n_vocab])                   # d -> vocab
        self.output_norm = W.tensor(g, "output_norm.weight", (d,))
        freq_factors = W.optional(g, "rope_freqs.weight", (c.n_rot // 2,))   # Llama 3 scaling
        self.rope = Rope(c.n_rot, c.rope_base, c.rope_neox, c.rope_scaling, freq_factors)
        # gemma3: sliding-window layers rotate with their own base and without scaling
        self.rope_swa = Rope(c.n_rot, c.rope_base_swa, c.rope_neox) if c.sliding_window else None
        self.blocks = [self._load_block(g, ld, i) for i in range(c.n_layer)]
        # The attention scale is applied once, where it costs nothing: in q_norm where there is
        # one (above), else as the output scale of the q matrix (and on its bias): RoPE is
        # linear, so scaling q before or after it is the same.
        qrows = c.n_head * c.head_dim
        for b in self.blocks:
            if b.qk_norm is None:
                b.wqkv.scale_first(c.attn_scale)
                if b.bqkv is not None:
                    b.bqkv[:qrows] *= np.float32(c.attn_scale)
        # One-token passes as compiled layers where the model allows (compiled_layers.py says which)
        self._file = g.file_bytes() if hasattr(g, "file_bytes") else None
        self.compiled_reason = compiled_layers.CompiledLayers.reason(self, self._file)
        self.compiled_on = compiled_layers.enabled()   # False: the per-operation path (comparisons)
        self._compiled = None
        self._int8 = int8_default()
        # Whether passes of several rows quantize x to 8 bits too (int8 tiles): with 8-bit x on.
        self.int8_batches_on = int8_batches_default()

    def _matrices(self) -> list[W.Matrices]:
        return [m for b in self.blocks for m in (b.wqkv, b.wo, b.w_gate_up, b.w_down)] + [self.output]

    @property
    def compiled(self) -> "compiled_layers.CompiledLayers | None":
        """The layers packed for one compiled call per run of layers, when this model and the
        settings allow it (8-bit x: the compiled layer has no float32-x path for quantized matrices)."""
        if not (self.compiled_on and self._int8) or self.compiled_reason is not None:
            return None
        if self._compiled is None:
            self._compiled = compiled_layers.CompiledLayers(self, self._file)
        return self._compiled

    def _qk_norm(self, g, p: str) -> np.ndarray | None:
        c = self.cfg
        qn = W.optional(g, p + "attn_q_norm.weight", (c.head_dim,))
        kn = W.optional(g, p + "attn_k_norm.weight", (c.head_dim,))
        if qn is None and kn is None:
            return None
        if qn is None or kn is None:
            raise UnsupportedModelError(f"{g.path.name}: {p}attn_q_norm and {p}attn_k_norm must come together")
        return np.concatenate([np.tile(qn * np.float32(c.attn_scale), (c.n_head, 1)), np.tile(kn, (c.n_head_kv, 1))])

    def _attention_weights(self, g, ld, p: str) -> dict:
        """Block p's attention weights (the fields every block kind shares), in file order."""
        c = self.cfg
        d, hd = c.n_embd, c.head_dim
        rows = [c.n_head * hd, c.n_head_kv * hd, c.n_head_kv * hd]
        qkv = [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
        return dict(
            attn_norm=W.tensor(g, p + "attn_norm.weight", (d,)),
            wqkv=ld.matrix(qkv, d, rows),
            bqkv=W.fused_bias(g, [p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"], rows),
            qk_norm=self._qk_norm(g, p),
            wo=ld.matrix([p + "attn_output.weight"], c.n_head * hd, [d]),
            bo=W.optional(g, p + "attn_output.bias", (d,)),
        )

    def _load_block(self, g, ld, i: int) -> Block:
        c = self.cfg
        d, p = c.n_embd, f"blk.{i}."
        return Block(
            **self._attention_weights(g, ld, p),
            ffn_norm=W.tensor(g, p + "ffn_norm.weight", (d,)),
            w_gate_up=ld.matrix([p + "ffn_gate.weight", p + "ffn_up.weight"], d, [c.n_ff, c.n_ff]),
            w_down=ld.matrix([p + "ffn_down.weight"], c.n_ff, [d]),
        )

    # -- forward ---------------------------------------------------------------------------

    def forward(self, ids: np.ndarray, pos: int, kv: KVCache, all_logits: bool = False,
                par: "RowRunner | None" = None, logits: bool = True, tail: int | None = None) -> np.ndarray | None:
        """ids int [n] at positions [pos, pos + n): writes their K/V into `kv` and returns
        float32 logits [n_vocab] of the last position ([n, n_vocab] with all_logits).

        Each block runs in two row-parallel halves: before attention (norm, q/k/v, RoPE, K/V
        stored: rows independent) and from attention on (each query row reads the cache, then
        its own FFN). `par` runs a function over row ranges on several threads; None runs it
        once over all rows on this thread (decode, small inputs).

        `tail` (a token id): then a one-token pass of it at position pos + n follows, block by
        block, each block of it right after the same block of ids (whose K/V it reads while they
        are still in the CPU's caches); returns its logits (all_logits and logits must be left
        as they are). Its arithmetic is a separate one-token pass's, so its K/V and logits are
        bit for bit those of forward([tail], pos + n).
        """
        c = self.cfg
        n = len(ids)
        par = par or SERIAL
        comp = self.compiled
        if n == 1 and tail is None and comp is not None:
            return self._forward_compiled(comp, ids, pos, kv, par, all_logits, logits)
        x = self._embed(ids)                                     # [n, d]
        cs = self.rope.cos_sin(pos, n)
        cs_swa = self.rope_swa.cos_sin(pos, n) if self.rope_swa else None
        q = np.empty((n, c.n_head, c.head_dim), np.float32)      # this block's rotated queries
        # A one-token pass may quantize x to 8 bits (engine/cpu/linear.py), and so may a batch
        # where int8 tiles are on (int8_batches_default).
        i8 = n == 1 or self.int8_batches
        even = par.split(n)
        work = par.work   # what spreads a range's weight tiles and attention heads over threads, or None
        if tail is not None:
            tp = pos + n
            xt = self._embed(np.array([tail], np.int64))         # [1, d]
            qt = np.empty((1, c.n_head, c.head_dim), np.float32)
            cst = self.rope.cos_sin(tp, 1)
            cst_swa = self.rope_swa.cos_sin(tp, 1) if self.rope_swa else None
        for i, b in enumerate(self.blocks):
            swa = c.is_swa(i)
            window = c.sliding_window if swa else 0
            rope_cs = cs_swa if swa else cs
            par.run(lambda r0, r1: self._before_attention(i, b, x, q, r0, r1, pos, kv, rope_cs, window, i8, work),
                    even)
            # Later rows attend to more keys: balance the attention + FFN work, not the rows.
            par.run(lambda r0, r1: self._from_attention(i, b, x, q, r0, r1, pos, kv, window, i8, work),
                    par.split(n, pos=pos, fixed=3000, window=window))
            if tail is not None and comp is not None:
                comp.run(i, i + 1, xt[0], tp, kv, cst)
            elif tail is not None:
                self._before_attention(i, b, xt, qt, 0, 1, tp, kv, cst_swa if swa else cst, window, True)
                self._from_attention(i, b, xt, qt, 0, 1, tp, kv, window, True)
        if tail is not None:
            out = np.empty((1, c.n_vocab), np.float32)
            self._logits(xt, out, 0, 1, True)
            return out[0]
        if not logits:                                           # K/V only (logits=False): None
            return None
        rows = x if all_logits else x[-1:]
        out = np.empty((len(rows), c.n_vocab), np.float32)
        par.run(lambda r0, r1: self._logits(rows, out, r0, r1, i8), par.split(len(rows)))
        return out if all_logits else out[0]

    def _forward_compiled(self, comp, ids, pos, kv, par, all_logits, logits):
        """A one-token pass through the compiled layers: LAYER_GROUP layers a call, each call one
        `par.run` (the CPU backend's DeadlineRunner checks its clock between them)."""
        x = np.ascontiguousarray(self._embed(ids))               # [1, d]
        cs = self.rope.cos_sin(pos, 1)
        L = self.cfg.n_layer
        for l0 in range(0, L, LAYER_GROUP):
            par.run(lambda r0, r1: comp.run(l0, min(L, l0 + LAYER_GROUP), x[0], pos, kv, cs), [(0, 1)])
        if not logits:
            return None
        out = np.empty((1, self.cfg.n_vocab), np.float32)
        self._logits(x, out, 0, 1, True)
        return out if all_logits else out[0]

    def _embed(self, ids) -> np.ndarray:
        return self.tok_embd[ids]                                # [n, d]

    def _act(self, g: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The FFN's gate activation times up: SwiGLU here; an architecture may replace it."""
        return silu_mul(g, u)

    def make_state(self, n_ctx: int, kv_dtype: str = "f32") -> KVCache:
        """What forward writes: a KV cache of every layer (models/__init__.py: the contract)."""
        c = self.cfg
        return KVCache(c.n_layer, c.n_head_kv, c.head_dim, n_ctx, kv_dtype)

    def _logits(self, rows, out, r0, r1, i8):
        c = self.cfg
        h = rms_norm(rows[r0:r1], self.output_norm, c.rms_eps)
        lg = out[r0:r1]                                         # [r, vocab]
        self.output.parts[0](Activations(h, i8), lg)
        if c.final_softcap > 0:                                  # gemma2-style soft-capping
            lg /= c.final_softcap
            np.tanh(lg, out=lg)
            lg *= c.final_softcap

    def _before_attention(self, i, b: Block, x, q, r0, r1, pos, kv, cs, window, i8, work=None):
        """Rows [r0, r1): attention norm, q/k/v, q/k norms, RoPE; K/V into the cache, q into `q`."""
        c = self.cfg
        n, hd, nh, nkv = r1 - r0, c.head_dim, c.n_head, c.n_head_kv
        h = rms_norm(x[r0:r1], b.attn_norm, c.rms_eps)
        qkv = b.wqkv(Activations(h, i8), work)                     # [n, (nh + 2 nkv) hd]
        if b.bqkv is not None:                                   # qwen2
            qkv += b.bqkv
        # q and k are adjacent in qkv: normalize and rotate them together, in place.
        qk = qkv[:, :(nh + nkv) * hd].reshape(n, nh + nkv, hd)
        v = qkv[:, (nh + nkv) * hd:].reshape(n, nkv, hd)
        if b.qk_norm is not None:                                # qwen3, gemma3
            qk = rms_norm(qk, b.qk_norm, c.rms_eps)
        (self.rope_swa if window else self.rope).apply(qk, (cs[0][r0:r1], cs[1][r0:r1]))
        q[r0:r1] = qk[:, :nh]                                    # already carries attn_scale
        kv.store(i, pos + r0, qk[:, nh:].transpose(1, 0, 2), v.transpose(1, 0, 2))

    def _from_attention(self, i, b: Block, x, q, r0, r1, pos, kv, window, i8, work=None):
        """Rows [r0, r1): attention over the cache, output projection, FFN, residuals (in x)."""
        c = self.cfg
        a = attention(q[r0:r1], kv.k[i], kv.v[i], pos + r0, window, work)   # [n, nh hd]
        o = b.wo(Activations(a, i8), work)                         # [n, d]
        if b.bo is not None:
            o += b.bo
        if b.post_attn_norm is not None:                         # gemma3
            o = rms_norm(o, b.post_attn_norm, c.rms_eps)
        xr = x[r0:r1]
        xr += o
        h = rms_norm(xr, b.ffn_norm, c.rms_eps)
        gu = b.w_gate_up(Activations(h, i8), work)                 # [n, 2 n_ff]
        g, u = gu[:, :c.n_ff], gu[:, c.n_ff:]
        act = self._act(g, u)
        f = b.w_down(Activations(act, i8), work)                   # [n, d]
        if b.post_ffn_norm is not None:                          # gemma3
            f = rms_norm(f, b.post_ffn_norm, c.rms_eps)
        xr += f


# Layers per compiled call in a one-token pass: a few calls a token, so that a pass slowed by a
# descheduled thread can drop to one thread part-way (cpu_backend.DeadlineRunner).
LAYER_GROUP = 8


class RowRunner:
    """Runs fn(r0, r1) over row ranges. This one runs everything at once on the calling thread;
    the CPU backend's threaded runner splits rows between its threads. `work`: what a range's
    products and attention spread their pieces over (an object with `map(fn, items)`), or None
    (the range's own thread: the row ranges are already the parallel part)."""
    n_threads = 1
    work = None

    def split(self, n: int, pos: int = 0, fixed: int = 0, window: int = 0) -> list[tuple[int, int]]:
        return [(0, n)]

    def run(self, fn, ranges) -> None:
        for r0, r1 in ranges:
            fn(r0, r1)


SERIAL = RowRunner()
