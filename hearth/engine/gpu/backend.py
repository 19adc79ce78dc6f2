"""GpuBackend: the whole forward pass on the GPU (see engine/DESIGN.md, "Backend interface").

Per call: one write of the step buffer (u32 [pos, n, 0, 0, ids...]), the dispatches of a prebuilt Plan
recorded into compute passes (a decode step in `submit_pieces` command buffers, each submitted as soon as
it is encoded so the GPU starts while Python encodes the rest; a prefill chunk in one), and one readback
through the persistent staging buffer (logits, or 4 bytes with `forward_argmax`). Decode (n = 1) uses
matrix-vector kernels with RMSNorm, SwiGLU/GeGLU, RoPE, the KV store and residual adds fused in; longer
inputs use the tiled matmul plan in chunks of `chunk` tokens. On a real GPU with 4-way int8 dot
products, decode matvecs of row length 2,048-4,096 take x as int8 blocks of 32 (ops.int8_ok; as
llama.cpp's CUDA path does), and the down products of 9,216 and more read x quantized once a layer
to global memory (ops.int8_pre_ok), written by the gate/up product itself where its x is int8 too
(ops.glu_q8out_ok) and else by a quantize pass; this moves decode logits off numpy's by ~0.1; CPU rasterizers keep
f32 x (`int8=True` or HEARTH_GPU_INT8=1 forces it, =0 turns it off). Likewise the prefill products
run in half precision on a real GPU with shader-f16 (ops.matmul16: f16 products summed over 64
weights, then in f32; ~1e-3 of the output's norm off numpy) and in f32 on CPU rasterizers
(`f16=True` or HEARTH_GPU_F16=1 forces it, =0 turns it off); and on a real GPU with the integer dot
products, those over ops.INT8_MM_DEFAULT_TYPES weights (Q4_0, Q4_K, Q6_K) take X as int8 blocks of 32
instead (ops.matmul8 after a quantize_rows pass for each input: 8-bit X as llama.cpp's q8 activations,
~5e-3 of the output's norm off the exact product; `mm8=True` or HEARTH_GPU_MM8=1 for every type it
reads, on any adapter, =0 for none).

Dispatches per decoded token (llama, qwen2): 1 embedding + 5 per layer (RMSNorm+Q|K|V+RoPE+KV store,
attention, O-proj+residual, RMSNorm+gate/up+GLU, down+residual) + head (final norm fused) + argmax.
Attention over at most ops.ATTN_CHUNK keys is one split that writes its merged output itself;
longer, it is split over the KV range and the splits are merged inside the O projection, or by a
combine pass first (one dispatch more a layer) where that merge would cost more (large models,
long contexts: ops.ATTN_FUSE_BYTES); one more where the down product reads x quantized once
(ops.int8_pre_ok) and the gate/up product does not write those blocks (ops.glu_q8out_ok). `greedy_steps` runs greedy decode with the next step under way before the
current one's id is read back (the id goes from the argmax into the next step's embedding on the GPU; gpu/greedy.py). qwen3/gemma3 add a RoPE dispatch per layer (their q/k norms need
the whole head), gemma3 two post-norm dispatches per layer. A float16 KV cache (`kv_dtype="f16"`)
adds the RoPE dispatch too (rope_store.wgsl writes its words of two values whole).
Mixture-of-experts layers (qwen3moe, gpt-oss; gpu/moe.py) replace the FFN's two decode dispatches
with three: RMSNorm + router logits (+ xn's int8 blocks), all chosen experts' gate/up (+ the top k),
their down + weighted sum + residual; gpt-oss's attention sinks make decode attention a split pass
and a merge with the sinks (no direct or fused-merge variant), or in its windowed layers one pass
over the window's keys with the sinks merge inside (moe_decode.sink_window).
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from ..backend import Backend
from ..config import ModelConfig
from ..errors import EngineError, UnsupportedModelError
from ..models.layers import Rope
from . import ops
from . import greedy
from .dense_next import DenseHooks, tensor_view
from .device import Device, select_adapter
from .kernels import Kernels
from . import moe as gmoe
from . import moe_decode
from .kv import GpuKVCache
from .plan import Plan
from .weights import GpuWeights

# Prefill chunk (tokens per pass): large on a real GPU (more workgroups per dispatch), small on a CPU
# rasterizer where activations are cheap to keep small.
GPU_CHUNK, CPU_CHUNK = 2048, 256
STEP_HEADER = 4          # u32 words before the token ids in the step buffer


def rope_table(rope: Rope, max_ctx: int) -> np.ndarray:
    """float32 [max_ctx, n_rot/2, 2]: (cos, sin) of every position and frequency, as numpy computes them."""
    c, s = rope.cos_sin(0, max_ctx)
    return np.ascontiguousarray(np.stack([c[:, 0, :], s[:, 0, :]], axis=-1), np.float32)


class GpuBackend(Backend):
    name = "gpu"

    def __new__(cls, cfg: ModelConfig, *args, **kwargs):
        if cls is GpuBackend:            # an architecture with plans of its own (gpu.backend_class)
            from . import backend_class  # noqa: PLC0415
            cls = backend_class(cfg)
        return super().__new__(cls)

    def __init__(self, cfg: ModelConfig, gguf, n_ctx: int, adapter=None, chunk: int | None = None,
                 int8: bool | None = None, f16: bool | None = None, kv_dtype: str = "f32",
                 mm8: bool | None = None):
        self._refuse(cfg, gguf)
        self.cfg = cfg
        t0 = time.perf_counter()
        self.dev = Device(adapter if adapter is not None else select_adapter())
        try:
            if chunk is None:
                chunk = CPU_CHUNK if self.dev.info["is_cpu"] else GPU_CHUNK
            # Decode matvecs with x as int8 (ops.int8_ok) where the device has the integer dot products.
            if int8 is None:
                int8 = os.environ.get("HEARTH_GPU_INT8", "") == "1" or not self.dev.info["is_cpu"]
            self.int8 = bool(int8) and self.dev.int8
            # Prefill products in half precision (ops.matmul16) where the device has shader-f16.
            if f16 is None:
                env = os.environ.get("HEARTH_GPU_F16", "")
                f16 = env == "1" or (env != "0" and not self.dev.info["is_cpu"])
            self.f16 = bool(f16) and self.dev.f16
            # Prefill products with X as int8 blocks (ops.matmul8) where the device has the integer dot
            # products: a real GPU for ops.INT8_MM_DEFAULT_TYPES, mm8=True (HEARTH_GPU_MM8=1) for
            # every type the kernel reads, mm8=False (=0) for none.
            if mm8 is None:
                env = os.environ.get("HEARTH_GPU_MM8", "")
                if env in ("0", "1"):
                    mm8 = env == "1"
            if mm8 is None:
                types = () if self.dev.info["is_cpu"] else ops.INT8_MM_DEFAULT_TYPES
            else:
                types = ops.INT8_MM_TYPES if mm8 else ()
            self.mm8_types = types if self.dev.int8 else ()
            self.mm8 = bool(self.mm8_types)
            self._build(gguf, n_ctx, min(chunk, n_ctx), kv_dtype)
        except EngineError:
            self.close()
            raise
        except Exception as e:  # a wgpu validation or out-of-memory error: say what failed, stay reloadable
            where = self.dev.info["device"] if self.dev is not None else "the GPU"
            self.close()
            raise EngineError(f"{gguf.path.name}: the GPU backend could not be set up on {where}: {e}") from e
        self.load_seconds = time.perf_counter() - t0
        self.last_dispatches = 0
        # measured on the H200 (three runs, ms a token): 1 piece 2.9-3.4, 2 pieces 2.4-3.0,
        # 3 pieces 2.2-2.7, 5 pieces 2.3-2.8
        self.submit_pieces = int(os.environ.get("HEARTH_GPU_PIECES", "1" if self.dev.info["is_cpu"] else "3"))

    def _refuse(self, cfg: ModelConfig, gguf) -> None:
        """An UnsupportedModelError for a model these plans cannot run (an architecture's subclass has its own)."""
        if cfg.final_softcap > 0:
            raise UnsupportedModelError(f"{gguf.path.name}: final logit soft-capping is not implemented on the GPU")
        gmoe.check_supported(cfg, gguf.path.name)
        if cfg.cpu_only:
            raise UnsupportedModelError(f"{gguf.path.name}: {cfg.arch} models ({cfg.cpu_only}) run on the CPU "
                                        f"backend only; choose CPU")
        if cfg.head_dim > 256 or cfg.head_dim % 4 or cfg.n_embd % 32:
            raise UnsupportedModelError(f"{gguf.path.name}: head dim {cfg.head_dim} / width {cfg.n_embd} "
                                        f"are outside what the GPU kernels handle (head dim <= 256, multiple of 4)")

    # ------------------------------------------------------------------ building
    def _build(self, g, n_ctx: int, chunk: int, kv_dtype: str) -> None:
        c, dev = self.cfg, self.dev
        ks = self.ks = Kernels(dev)
        W = self.weights = GpuWeights(dev, tensor_view(g, c, n_ctx))   # phi3's fused tensors in llama's names
        d, hd, nh, nkv, nff, nv = c.n_embd, c.head_dim, c.n_head, c.n_head_kv, c.n_ff, c.n_vocab
        # every per-token activation buffer must fit one storage binding: shrink the chunk if not
        widest = max(nff, (nh + 2 * nkv) * hd, nh * ops.ATTN_MAX_SPLITS * (hd + 2), gmoe.widest_row(c)) * 4
        chunk = max(1, min(chunk, int(dev.limits["max-storage-buffer-binding-size"]) // widest))
        self.chunk = chunk
        self.kv = GpuKVCache(dev, c.n_layer, nkv, hd, n_ctx, kv_dtype)
        self.kv_f16 = self.kv.dtype == np.float16
        qkv_dim = (nh + 2 * nkv) * hd
        buf = dev.buffer
        self.x = buf(chunk * d * 4, "x")                 # [chunk, d] residual stream
        self.xn = buf(chunk * d * 4, "xn")               # [chunk, d] normed (prefill)
        self.tmp = buf(chunk * d * 4, "tmp")             # [chunk, d] before a post-norm (gemma3)
        self.qkv = buf(chunk * qkv_dim * 4, "qkv")       # [chunk, (nh + 2 nkv) hd]
        self.q = buf(chunk * nh * hd * 4, "q")           # [chunk, nh, hd] rotated
        self.att = buf(chunk * nh * hd * 4, "att")       # [chunk, nh * hd]
        self.ff = buf(chunk * nff * 4, "ff")             # [chunk, n_ff] act(gate) * up
        self.ffq = buf(ops.q8_words(nff) * 4, "ff-q8")  # [q8_words(n_ff)] u32: decode's ff as int8 blocks
        # [q8_rows_words(chunk, K)] u32: a prefill product's X as int8 blocks (ops.quantize_rows), widest K
        self.xq = buf(max(ops.q8_rows_words(chunk, k) for k in (d, nh * hd, nff)) * 4, "x-q8") if self.mm8 else None
        self.logits = buf(nv * 4, "logits")              # [n_vocab]
        self.step = buf((STEP_HEADER + chunk) * 4, "step")
        self.amax = buf(16, "argmax")
        self.max_splits = ops.attn_splits(n_ctx)
        self.part = buf(nh * self.max_splits * (hd + 2) * 4, "attn-partials")              # decode
        self.ppart = buf(chunk * nh * ops.ATTN_MAX_SPLITS * (hd + 2) * 4, "attn-partials-prefill")
        self.logits_all = None

        freq = W.g.tensors.get("rope_freqs.weight")
        from ..quants import dequantize  # noqa: PLC0415
        ff_ = dequantize(freq.data, freq.type, freq.shape, freq.name).reshape(-1) if freq is not None else None
        cs = W.floats(rope_table(Rope(c.n_rot, c.rope_base, c.rope_neox, c.rope_scaling, ff_), n_ctx), "rope")
        cs_swa = (W.floats(rope_table(Rope(c.n_rot, c.rope_base_swa, c.rope_neox), n_ctx), "rope-swa")
                  if c.sliding_window and not gmoe.swa_uses_main_rope(c) else cs if c.sliding_window else None)
        self.dense = DenseHooks(W, c, n_ctx, ks)     # smollm3's layers without RoPE, mistral3's q temperature

        self.emb = W.matrix("token_embd.weight", nv, d, split=True)
        self.out = self.emb if c.tied_output else W.matrix("output.weight", nv, d, split=True)
        self.out_norm = W.vector("output_norm.weight", d)
        self.layers = [self._layer_weights(W, i) for i in range(c.n_layer)]

        dec = self.decode_plan = Plan(dev, "decode")
        pre = self.prefill_plan = Plan(dev, "prefill")
        emb_p = dict(d=d, row_bytes=ops.row_bytes(self.emb.qtype, d), scale=c.embed_scale, n=chunk,
                     id_off=STEP_HEADER, **{f"s{j}": r0 for j, (_, r0, _) in enumerate(self.emb.parts) if j})
        emb_k = ops.embed(ks, self.emb.qtype, len(self.emb.parts))
        emb_b = [self.step, self.x] + [b for b, _, _ in self.emb.parts]
        dec.add(emb_k, emb_b, (1, 1, 1), "embed", **emb_p)
        pre.add(emb_k, emb_b, lambda n, kv: ops.rows_groups(n), "embed", **emb_p)
        for i, L in enumerate(self.layers):
            swa = c.is_swa(i)
            table = self.dense.rope(i, cs_swa if swa else cs)
            self._decode_layer(dec, i, L, table, c.sliding_window if swa else 0)
            self._prefill_layer(pre, i, L, table, c.sliding_window if swa else 0)
        head_t = [self.out.qtype]
        self.decode_body = len(dec.ops)
        self.prefill_body = len(pre.ops)
        for buf_, r0, rows in self.out.parts:        # one matvec per part of the output matrix
            hp = dict(ops.matvec_params(head_t, d, [rows], eps=c.rms_eps), y_off=r0)
            lay, q8 = self._layout(head_t, d, rows)
            hk = ops.matvec(ks, head_t, norm=True, layout=lay, q8x=q8)
            dec.add(hk, [self.x, self.logits, buf_, self.out_norm], ops.matvec_groups(rows, lay), "head", **hp)
            pre.add(hk, [self.x, self.logits, buf_, self.out_norm], ops.matvec_groups(rows, lay), "head",
                    **dict(hp, x_off=lambda n, kv: (n - 1) * d))
        for p in (dec, pre):
            p.add(ops.argmax(ks), [self.logits, self.amax], (1, 1, 1), "argmax", n=nv)
            p.finalize()
        self.all_plan = None
        self._chain_staging = None

    def _layer_weights(self, W, i: int) -> dict:
        c = self.cfg
        d, hd, nh, nkv, nff = c.n_embd, c.head_dim, c.n_head, c.n_head_kv, c.n_ff
        p = f"blk.{i}."
        L = dict(
            attn_norm=W.vector(p + "attn_norm.weight", d),
            wq=W.matrix(p + "attn_q.weight", nh * hd, d),
            wk=W.matrix(p + "attn_k.weight", nkv * hd, d),
            wv=W.matrix(p + "attn_v.weight", nkv * hd, d),
            q_norm=W.vector(p + "attn_q_norm.weight", hd, optional=True),
            k_norm=W.vector(p + "attn_k_norm.weight", hd, optional=True),
            wo=W.matrix(p + "attn_output.weight", d, nh * hd),
            bo=W.vector(p + "attn_output.bias", d, optional=True),
            ffn_norm=None if c.n_expert else W.vector(p + "ffn_norm.weight", d),
            gate=None if c.n_expert else W.matrix(p + "ffn_gate.weight", nff, d),
            up=None if c.n_expert else W.matrix(p + "ffn_up.weight", nff, d),
            down=None if c.n_expert else W.matrix(p + "ffn_down.weight", d, nff),
            moe=gmoe.MoeFfn(self, i) if c.n_expert else None,
            sinks=W.vector(p + "attn_sinks.weight", nh) if c.attn_sinks else None,
            post_attn=W.vector(p + "post_attention_norm.weight", d) if c.post_norms else None,
            post_ffn=W.vector(p + "post_ffw_norm.weight", d) if c.post_norms else None,
        )
        names = [p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"]
        if any(n in W.g.tensors for n in names):          # qwen2: q/k/v biases, one buffer for the fused matvec
            from ..models.weights import fused_bias  # noqa: PLC0415
            b = fused_bias(W.g, names, [nh * hd, nkv * hd, nkv * hd])
            L["bqkv"] = W.floats(b, p + "qkv.bias")
            L["bq"], L["bk"], L["bv"] = (W.floats(b[:nh * hd], "bq"), W.floats(b[nh * hd:(nh + nkv) * hd], "bk"),
                                         W.floats(b[(nh + nkv) * hd:], "bv"))
        else:
            L["bqkv"] = L["bq"] = L["bk"] = L["bv"] = None
        if (L["q_norm"] is None) != (L["k_norm"] is None):
            raise UnsupportedModelError(f"{W.g.path.name}: layer {i} has a q norm without a k norm (or the reverse)")
        return L

    def _layout(self, qtypes, k: int, m: int, mult: int = 0, mats: int = 1, attn_x: bool = False):
        """(layout, q8x) of a decode matvec: q8x = K where it takes the int8-x path (its own layouts), else 0.
        The O projection that merges the attention splits itself (attn_x) keeps f32 x: on the 8B
        shape (H200) it took 2.39 ms a token with int8 x against 0.52 + 1.20 for a combine pass and
        the int8 product, and at the sizes where that merge pays (the default model) int8 is not used."""
        if self.int8 and not attn_x and ops.int8_ok(self.dev, qtypes, k):
            return ops.int8_layout(k, m, qtypes, mult), k
        return ops.matvec_layout(k, m, mult, mats), 0

    def _attn_params(self, window: int) -> dict:
        c = self.cfg
        return dict(n_head=c.n_head, n_kv=c.n_head_kv, max_ctx=self.kv.max_ctx, scale=c.attn_scale, window=window)

    def _rope_args(self, i, L, cs):
        c = self.cfg
        qk = L["q_norm"] is not None
        bufs = [self.qkv, self.q, self.kv.k[i], self.kv.v[i], cs, self.step] + ([L["q_norm"], L["k_norm"]] if qk else [])
        return ops.rope_store(self.ks, c.head_dim, qk, self.kv_f16), bufs, dict(
            n_head=c.n_head, n_kv=c.n_head_kv, n_rot=c.n_rot, max_ctx=self.kv.max_ctx, neox=int(c.rope_neox),
            eps=c.rms_eps)

    def _decode_layer(self, P: Plan, i: int, L: dict, cs, window: int) -> None:
        c, ks = self.cfg, self.ks
        d, hd, nh, nkv, nff = c.n_embd, c.head_dim, c.n_head, c.n_head_kv, c.n_ff
        types = [L["wq"].qtype, L["wk"].qtype, L["wv"].qtype]
        rows = [nh * hd, nkv * hd, nkv * hd]
        bias = L["bqkv"] is not None
        wbufs = [L["wq"].buffer, L["wk"].buffer, L["wv"].buffer, L["attn_norm"]] + ([L["bqkv"]] if bias else [])
        prm = ops.matvec_params(types, d, rows, eps=c.rms_eps)
        lay, q8 = self._layout(types, d, sum(rows), math.gcd(rows[0], rows[1]))
        rpw = ops.matvec_rows(lay)
        if L["q_norm"] is None and c.n_rot == hd and rpw % 2 == 0 and not self.kv_f16:
            # RoPE and the K/V store fused into the Q|K|V product (qk-norm models need the whole head
            # first; a float16 cache takes two values a u32 word, written whole by rope_store.wgsl)
            P.add(ops.matvec(ks, types, norm=True, bias=bias, rope="neox" if c.rope_neox else "normal", layout=lay,
                             q8x=q8),
                  [self.x, self.q] + wbufs + [self.kv.k[i], self.kv.v[i], cs, self.step],
                  ops.matvec_groups(sum(rows), lay), f"{i}.qkv", **dict(prm, a0=hd, a1=self.kv.max_ctx))
        else:
            P.add(ops.matvec(ks, types, norm=True, bias=bias, layout=lay, q8x=q8), [self.x, self.qkv] + wbufs,
                  ops.matvec_groups(sum(rows), lay), f"{i}.qkv", **prm)
            k, bufs, rp = self._rope_args(i, L, cs)
            P.add(k, bufs, ops.rope_groups(1, nh, nkv), f"{i}.rope", **rp)
        self.dense.after_rope(P, i, self.q, self.step)
        ap = dict(self._attn_params(window), max_splits=self.max_splits)
        # A context of one split (at most ops.ATTN_CHUNK keys): the attention pass writes its merged
        # output itself; longer: split partials, then the merge. The plan holds every variant and the
        # step's kv_len picks (ops whose workgroup count is 0 are not dispatched).
        nsp = ops.attn_splits
        sinks = L["sinks"]     # gpt-oss: split partials, then the merge with the sinks (moe.sink_combine)
        ws = moe_decode.sink_window_threads(window, hd) if sinks is not None else 0
        if ws:                 # a windowed gpt-oss layer: the window's keys and the sinks merge in one pass
            P.add(moe_decode.sink_window(ks, hd, ws, self.kv_f16),
                  [self.q, self.kv.k[i], self.kv.v[i], self.att, sinks, self.step], (nh, 1, 1), f"{i}.attn",
                  **gmoe.sink_params(c, self.kv.max_ctx, window))
        else:
            P.add(ops.attn_split(ks, hd, self.kv_f16), [self.q, self.kv.k[i], self.kv.v[i], self.part, self.step],
                  lambda n, kv: (nsp(kv), nh, 1) if nsp(kv) > 1 or sinks is not None else (0, 0, 0), f"{i}.attn", **ap)
            P.add(ops.attn_split(ks, hd, self.kv_f16, direct=True), [self.q, self.kv.k[i], self.kv.v[i], self.att, self.step],
                  lambda n, kv: (1, nh, 1) if nsp(kv) == 1 and sinks is None else (0, 0, 0), f"{i}.attn", **ap)
        # The split merge fused into the O projection while that is cheap (short contexts: one
        # dispatch less), else a combine pass first.
        wo = [L["wo"].qtype]
        o_lay, o_q8 = self._layout(wo, nh * hd, d)
        fuse = 0
        if sinks is not None and not ws:
            P.add(gmoe.sink_combine(ks, hd, "decode"), [self.part, self.att, sinks, self.step], (nh, 1, 1),
                  f"{i}.combine", **gmoe.sink_params(c, self.kv.max_ctx, self.max_splits))
        elif nh * hd <= ops.ATTN_X_MAX and nh * self.max_splits <= ops.ATTN_WS_MAX and nh <= 256:
            o_lay_x, o_q8x = self._layout(wo, nh * hd, d, attn_x=True)
            fuse = min(self.max_splits, ops.attn_fuse_splits(ops.matvec_groups(d, o_lay_x)[0], nh * hd))
        if fuse < self.max_splits and sinks is None and not ws:
            P.add(ops.attn_combine(ks, hd), [self.part, self.att, self.step],
                  lambda n, kv: (nh, 1, 1) if nsp(kv) > max(fuse, 1) else (0, 0, 0), f"{i}.combine", **ap)
        self._decode_proj(P, L["wo"], self.att, nh * hd, L["bo"], L["post_attn"], f"{i}.o", layout=o_lay,
                          when=lambda n, kv: nsp(kv) == 1 or nsp(kv) > fuse, q8=o_q8)
        if fuse > 1:
            self._decode_proj(P, L["wo"], self.part, nh * hd, L["bo"], L["post_attn"], f"{i}.o", attn_x=True,
                              layout=o_lay_x, when=lambda n, kv: 1 < nsp(kv) <= fuse, q8=o_q8x)
        if L["moe"] is not None:
            L["moe"].add_decode(P)
            return
        gt = [L["gate"].qtype, L["up"].qtype]
        dn_t = [L["down"].qtype]
        pre = self.int8 and ops.int8_pre_ok(self.dev, dn_t, nff)
        f_lay, f_q8 = self._layout(gt, d, nff, mats=2)
        q8out = pre and ops.glu_q8out_ok(f_q8, nff)
        if q8out:
            f_lay = ops.GLU_Q8OUT_LAYOUT
        P.add(ops.matvec(ks, gt, mode="glu", act="gelu" if c.activation == "gelu_tanh" else "silu", norm=True,
                         layout=f_lay, q8x=f_q8, q8out=q8out),
              [self.x, self.ff, L["gate"].buffer, L["up"].buffer, L["ffn_norm"]] + ([self.ffq] if q8out else []),
              ops.matvec_groups(nff, f_lay), f"{i}.ffn",
              **ops.matvec_params(gt, d, [nff, nff], eps=c.rms_eps, mode="glu"))
        if pre:
            # long rows: x quantized once to global memory (by the glu product itself where it can), then
            # read at 1.6 bytes a value
            if not q8out:
                P.add(ops.quantize_x(ks), [self.ff, self.ffq], ops.quantize_x_groups(nff), f"{i}.quantize_x", K=nff)
            self._decode_proj(P, L["down"], self.ffq, nff, None, L["post_ffn"], f"{i}.down",
                              layout=ops.INT8_PRE_LAYOUT, q8=nff, q8g=True)
        else:
            dn_lay, dn_q8 = self._layout(dn_t, nff, d)
            self._decode_proj(P, L["down"], self.ff, nff, None, L["post_ffn"], f"{i}.down", layout=dn_lay, q8=dn_q8)

    def _decode_proj(self, P, w, src, k, bias, post_norm, label, attn_x=False, layout=None, when=None, q8=0,
                     q8g=False) -> None:
        """x += W src (+ bias), or with a post-norm (gemma3): x += norm(W src). attn_x: src is the
        attention partials, merged inside the product. when(n, kv): dispatched only if true. q8: see
        _layout; q8g: src holds quantize_x's int8 blocks (ops.int8_pre_ok)."""
        c, d = self.cfg, self.cfg.n_embd
        prm = ops.matvec_params([w.qtype], k, [d])
        extra = [bias] if bias is not None else []
        if attn_x:
            extra.append(self.step)
            prm.update(a0=c.head_dim, a1=self.max_splits)
        ax = k if attn_x else 0
        ws = c.n_head * self.max_splits if attn_x else 1
        groups = ops.matvec_groups(d, layout)
        if when is not None:
            groups = lambda n, kv, g=groups: g if when(n, kv) else (0, 0, 0)  # noqa: E731
        if post_norm is None:
            P.add(ops.matvec(self.ks, [w.qtype], residual=True, bias=bias is not None, attn_x=ax, attn_ws=ws,
                             layout=layout, q8x=q8, q8g=q8g),
                  [src, self.x, w.buffer] + extra, groups, label, **prm)
        else:
            P.add(ops.matvec(self.ks, [w.qtype], bias=bias is not None, attn_x=ax, attn_ws=ws, layout=layout, q8x=q8,
                             q8g=q8g),
                  [src, self.tmp, w.buffer] + extra, groups, label, **prm)
            post = (1, 1, 1) if when is None else (lambda n, kv: (1, 1, 1) if when(n, kv) else (0, 0, 0))
            P.add(ops.rmsnorm(self.ks, add=True), [self.tmp, self.x, post_norm], post, label + ".post",
                  d=d, n=1, eps=c.rms_eps)

    def _mm8(self, qtype: str) -> bool:
        return qtype in self.mm8_types

    def _quantize_src(self, P: Plan, src, k: int, label: str) -> None:
        """The pass that writes src [n, K] as int8 blocks into self.xq for the int8 products after it."""
        P.add(ops.quantize_rows(self.ks), [src, self.xq], lambda n, kv: ops.quantize_rows_groups(n, k),
              label + ".q8", K=k, n=lambda n, kv: n, ldx=k, s_off=ops.q8_rows_scales(self.chunk, k))

    def _product(self, P: Plan, w, src, k: int, m: int, out, ldy: int, y_off: int, label: str, bias=None,
                 unbounded_x: bool = False, **kw) -> None:
        """Y = out[:, y_off:y_off + m] (+)= src W^T: the int8 kernel reading self.xq (which _quantize_src
        filled from src) where it is on for this type, else _matmul's."""
        extra = [bias] if bias is not None else []
        if self._mm8(w.qtype):
            prm = dict(ops.matmul8_params(w.qtype, k, m, 0, ldy, ops.q8_rows_scales(self.chunk, k), y_off),
                       n=lambda n, kv: n)
            for tile, lo, hi in ops.tiles_by_n(m, self.chunk, ops.matmul8_tile):
                P.add(ops.matmul8(self.ks, w.qtype, bias=bias is not None, tile=tile, **kw), [self.xq, out, w.buffer] + extra,
                      ops.in_range(lambda n, t=tile: ops.matmul8_groups(m, n, t), lo, hi), label, **prm)
            return
        prm = dict(ops.matmul_params([w.qtype], k, m, 0, ldy=ldy, y_off=y_off), n=lambda n, kv: n)
        for kern, groups in self._matmul(w.qtype, m, unbounded_x, bias=bias is not None, **kw):
            P.add(kern, [src, out, w.buffer] + extra, groups, label, **prm)

    def _matmul(self, qtype: str, m: int, unbounded_x: bool = False, **kw):
        """[(kernel, groups(n, kv))] of a prefill product over M = m rows, one for each range of n that
        ops.tiles_by_n gives its own tile: the f16 kernel where it is on and reads this type, else the f32
        one. unbounded_x: X is not normalized (the down product's act(gate) * up), so the f16 kernel
        scales it into range (ops.MATMUL16_FF_SHIFT)."""
        if self.f16 and qtype in ops.F16_TYPES:
            xshift = ops.MATMUL16_FF_SHIFT if unbounded_x else 0
            return [(ops.matmul16(self.ks, [qtype], tile=tile, xshift=xshift, **kw),
                     ops.in_range(lambda n, t=tile: ops.matmul16_groups(m, n, t), lo, hi))
                    for tile, lo, hi in ops.tiles_by_n(m, self.chunk, ops.matmul16_tile)]
        return [(ops.matmul(self.ks, [qtype], **kw), lambda n, kv: ops.matmul_groups(m, n))]

    def _prefill_layer(self, P: Plan, i: int, L: dict, cs, window: int) -> None:
        c, ks = self.cfg, self.ks
        d, hd, nh, nkv, nff = c.n_embd, c.head_dim, c.n_head, c.n_head_kv, c.n_ff
        rows_g = lambda n, kv: ops.rows_groups(n)  # noqa: E731
        P.add(ops.rmsnorm(ks), [self.x, self.xn, L["attn_norm"]], rows_g, f"{i}.norm", d=d, n=self.chunk, eps=c.rms_eps)
        qkv_dim = (nh + 2 * nkv) * hd
        y_off = 0
        if any(self._mm8(L[n].qtype) for n in ("wq", "wk", "wv")):
            self._quantize_src(P, self.xn, d, f"{i}.qkv")
        for w, b, name in ((L["wq"], L["bq"], "q"), (L["wk"], L["bk"], "k"), (L["wv"], L["bv"], "v")):
            self._product(P, w, self.xn, d, w.rows, self.qkv, qkv_dim, y_off, f"{i}.{name}", bias=b)
            y_off += w.rows
        k, bufs, rp = self._rope_args(i, L, cs)
        P.add(k, bufs, lambda n, kv: ops.rope_groups(n, nh, nkv), f"{i}.rope", **rp)
        self.dense.after_rope(P, i, self.q, self.step)
        ap = dict(self._attn_params(window), n_splits=lambda n, kv: ops.attn_prefill_splits(kv))
        P.add(ops.attn_prefill(ks, hd, self.kv_f16), [self.q, self.kv.k[i], self.kv.v[i], self.ppart, self.step],
              lambda n, kv: ops.attn_prefill_groups(n, nh, ops.attn_prefill_splits(kv), hd), f"{i}.attn", **ap)
        if L["sinks"] is not None:
            P.add(gmoe.sink_combine(ks, hd, "prefill"), [self.ppart, self.att, L["sinks"]],
                  lambda n, kv: ops.rows_groups(n * nh), f"{i}.combine",
                  **dict(gmoe.sink_params(c, self.kv.max_ctx), c=ap["n_splits"]))
        else:
            P.add(ops.attn_prefill_combine(ks, hd), [self.ppart, self.att], lambda n, kv: ops.rows_groups(n * nh),
                  f"{i}.combine", **ap)
        self._prefill_proj(P, L["wo"], self.att, nh * hd, L["bo"], L["post_attn"], f"{i}.o")
        if L["moe"] is not None:
            L["moe"].add_prefill(P)
            return
        P.add(ops.rmsnorm(ks), [self.x, self.xn, L["ffn_norm"]], rows_g, f"{i}.ffn_norm", d=d, n=self.chunk, eps=c.rms_eps)
        # gate, then up with act(gate) * up applied in its epilogue (in place in ff), then down
        act = "gelu" if c.activation == "gelu_tanh" else "silu"
        if self._mm8(L["gate"].qtype) or self._mm8(L["up"].qtype):
            self._quantize_src(P, self.xn, d, f"{i}.ffn")
        for w, name in ((L["gate"], "gate"), (L["up"], "up")):
            self._product(P, w, self.xn, d, nff, self.ff, nff, 0, f"{i}.{name}", act=act, epi_glu=name == "up")
        self._prefill_proj(P, L["down"], self.ff, nff, None, L["post_ffn"], f"{i}.down", unbounded_x=True)

    def _prefill_proj(self, P, w, src, k, bias, post_norm, label, unbounded_x=False) -> None:
        c, d = self.cfg, self.cfg.n_embd
        if self._mm8(w.qtype):
            self._quantize_src(P, src, k, label)
        if post_norm is None:
            self._product(P, w, src, k, d, self.x, d, 0, label, bias=bias, unbounded_x=unbounded_x, residual=True)
        else:
            self._product(P, w, src, k, d, self.tmp, d, 0, label, bias=bias, unbounded_x=unbounded_x)
            P.add(ops.rmsnorm(self.ks, add=True), [self.tmp, self.x, post_norm], lambda n, kv: ops.rows_groups(n),
                  label + ".post", d=d, n=self.chunk, eps=c.rms_eps)

    def _all_logits_plan(self) -> Plan:
        """RMSNorm of every row and the output matrix over them: logits [rows, n_vocab]."""
        if self.all_plan is None:
            c, nv, d = self.cfg, self.cfg.n_vocab, self.cfg.n_embd
            limit = int(self.dev.limits["max-storage-buffer-binding-size"])
            self.all_rows = max(1, min(self.chunk, limit // (nv * 4)))
            self.logits_all = self.dev.buffer(self.all_rows * nv * 4, "logits-all")
            P = Plan(self.dev, "all-logits")
            P.add(ops.rmsnorm(self.ks), [self.x, self.xn, self.out_norm], lambda n, kv: ops.rows_groups(n), "norm",
                  d=d, n=self.chunk, eps=c.rms_eps)
            for buf_, r0, rows in self.out.parts:
                P.add(ops.matmul(self.ks, [self.out.qtype]), [self.xn, self.logits_all, buf_],
                      lambda n, kv, rows=rows: ops.matmul_groups(rows, n), "head",
                      **dict(ops.matmul_params([self.out.qtype], d, rows, 0, ldy=nv, y_off=r0), n=lambda n, kv: n))
            P.finalize()
            self.all_plan = P
        return self.all_plan

    # ------------------------------------------------------------------ running
    def _check(self, ids, pos: int) -> np.ndarray:
        ids = np.asarray(ids).reshape(-1)
        if len(ids) == 0:
            raise ValueError("forward needs at least one token")
        self.kv.check_fits(pos, len(ids))
        bad = (ids < 0) | (ids >= self.cfg.n_vocab)
        if bad.any():
            raise ValueError(f"token id {int(ids[bad][0])} is outside the vocabulary of {self.cfg.n_vocab}")
        return ids.astype(np.uint32)

    def _run(self, ids: np.ndarray, pos: int, want: str):
        """One chunk; `want`: "none", "logits", "argmax" or "all"."""
        dev, m = self.dev, len(ids)
        hdr = np.zeros(STEP_HEADER + m, np.uint32)
        hdr[0], hdr[1], hdr[STEP_HEADER:] = pos, m, ids
        dev.queue.write_buffer(self.step, 0, hdr)
        kv_len = pos + m
        decode = m == 1
        plan = self.decode_plan if decode else self.prefill_plan
        body = self.decode_body if decode else self.prefill_body
        stop = {"none": body, "all": body, "logits": len(plan.ops) - 1, "argmax": len(plan.ops)}[want]
        # A decode step may go in several command buffers, each submitted as soon as it is encoded,
        # so the GPU starts on the first layers while Python encodes the rest.
        pieces = self.submit_pieces if decode else 1
        cuts = [round(stop * i / pieces) for i in range(pieces + 1)]
        nd = 0
        for a, b in zip(cuts[:-2], cuts[1:-1]):
            enc = dev.device.create_command_encoder()
            nd += plan.encode(enc, m, kv_len, a, b)
            dev.submit(enc)
        enc = dev.device.create_command_encoder()
        nd += plan.encode(enc, m, kv_len, cuts[-2], cuts[-1])
        if want == "all":
            nd += self._all_logits_plan().encode(enc, m, kv_len)
        self.last_dispatches = nd
        self.kv.touched()
        if want == "none":
            dev.submit(enc)
            return None
        if want == "argmax":
            return int(dev.read([(self.amax, 0, 4)], enc).view(np.uint32)[0])
        if want == "all":
            return dev.read([(self.logits_all, 0, m * self.cfg.n_vocab * 4)], enc).view(np.float32).reshape(m, -1).copy()
        return dev.read([(self.logits, 0, self.cfg.n_vocab * 4)], enc).view(np.float32).copy()

    def _forward(self, ids, pos: int, last_want: str, all_logits: bool = False):
        ids = self._check(ids, pos)
        step = self.chunk
        if all_logits:
            self._all_logits_plan()
            step = self.all_rows
        outs = []
        try:
            for s in range(0, len(ids), step):
                part = ids[s:s + step]
                last = s + step >= len(ids)
                r = self._run(part, pos + s, "all" if all_logits else (last_want if last else "none"))
                self.kv.n_tokens = pos + s + len(part)
                if all_logits or last:
                    outs.append(r)
        except EngineError:
            raise
        except Exception as e:  # wgpu validation / device-lost errors
            raise EngineError(f"the GPU forward pass failed on {self.dev.info['device']}: {e}") from e
        return np.concatenate(outs) if all_logits else outs[-1]

    def forward(self, ids, pos: int, all_logits: bool = False) -> np.ndarray:
        """ids [n] at positions [pos, pos + n): logits [n_vocab] of the last one ([n, n_vocab] with all_logits)."""
        return self._forward(ids, pos, "logits", all_logits)

    def forward_argmax(self, ids, pos: int) -> int:
        """As forward, but the argmax of the last position's logits is taken on the GPU and only that
        token id (4 bytes) comes back: the greedy decode step, for sampling with temperature 0 and no
        penalties. Ties go to the lowest id, as numpy.argmax does."""
        return self._forward(ids, pos, "argmax")

    def greedy_steps(self, tok: int, pos: int, max_steps: int):
        """Greedy decode with one step in flight (gpu/greedy.py): yields the argmax token after each
        step, starting from `tok` at position `pos`; after the k-th yielded id, positions
        [pos, pos + k) hold the inputs tok, id 1, ..., id k-1. Each step's argmax is copied on the GPU
        into the next step's id slot, so step k+1 is under way before step k's id is read back. A
        consumer that stops early leaves one step computed past what it took: its K/V sit past the
        resident positions (kv.n_tokens), where the next forward overwrites them. Ties as
        forward_argmax."""
        if max_steps <= 0:
            return
        self._check([tok], pos)
        yield from greedy.steps(self, tok, pos, max_steps)

    def _before_step_in_flight(self) -> None:
        """Hook: a greedy step is about to be submitted before the consumer took the previous one's id
        (a model whose state a later step changes in place keeps a copy of it here)."""

    def _after_step_in_flight(self) -> None:
        """Hook: the consumer stopped with a step computed past what it took (undo it here)."""

    def warm_up(self) -> None:
        """What a fresh process's first restore and first passes would otherwise pay once, run by the
        Engine's background thread after a load with nothing resident, on positions nothing holds:
        the cache's download and upload paths (the first restore after a start measured ~0.5 s more
        than the next ones on the H200 machine, most of it cffi parsing declarations on wgpu's first
        use of them), then a short input and a one-token pass. The cache's values at positions past
        what is resident mean nothing, and a pass's results depend only on its ids and positions, so
        nothing after it changes."""
        if self.kv.max_ctx < 3:
            return
        try:
            self.kv.write_prefix(0, 1, *self.kv.read_prefix(0, 1))   # host copies: the write cannot change them
            self.forward(np.zeros(2, np.int32), 0)
            self.forward(np.zeros(1, np.int32), 2)
        finally:
            self.kv.n_tokens = 0

    def describe(self) -> dict:
        info = {k: v for k, v in self.dev.info.items() if k != "is_cpu"}
        return {"backend": "gpu", **info, "weights_bytes": self.weights.nbytes, "kv_bytes": self.kv.nbytes,
                "fallbacks": list(self.weights.fallbacks)}

    def close(self) -> None:
        for st in getattr(self, "_chain_staging", None) or []:
            st.destroy()
        self._chain_staging = None
        for p in ("decode_plan", "prefill_plan", "all_plan"):
            plan = getattr(self, p, None)
            if plan is not None:
                plan.destroy()
                setattr(self, p, None)
        if getattr(self, "weights", None) is not None:
            self.weights.destroy()
            self.weights = None
        if getattr(self, "kv", None) is not None and hasattr(self.kv, "destroy"):
            self.kv.destroy()
        if getattr(self, "dev", None) is not None:
            self.dev.destroy()
            self.dev = None
