"""Gemma 4 on the GPU (llama.cpp arch `gemma4`; the arithmetic is models/gemma4.py's): per-layer head
sizes, KV head counts, FFN widths and RoPE (sliding layers: rope.freq_base_swa; full layers:
rope_freqs), sliding window / global alternation, q/k RMSNorm with weights and v's without, KV
shared between layers, per-layer token embeddings and the soft-capped final logits.

`Gemma4GpuBackend` is a `GpuBackend` (GpuBackend(cfg, ...) gives one for arch gemma4) with its own
plans; forward, forward_argmax, greedy_steps and warm_up are GpuBackend's. Its `kv` is a
`GpuSplitKV`: models/layer_state.py's SplitKV over one GpuKVCache per head size, so the Engine's
truncate and prefix images treat it as they treat the CPU's (truncation is a slice).

Per layer (decode: matrix-vector kernels; prefill: the tiled products, int8 / f16 where they are on):
RMSNorm + Q|K|V, wgsl/gemma4.wgsl "qkv" (head norms, NeoX RoPE, K/V store), attention (decode:
attn_decode.wgsl with a chunk of at least head dim / 4 keys, so head dims up to 512 fit; prefill:
attn_prefill.wgsl), O + post-norm, RMSNorm + GeGLU + down + post-norm (`_ffn`: the one place a
layer's FFN is built; a layer with experts beside its MLP, the 26B-A4B shape, adds them there:
gpu/gemma4_moe.py), the per-layer branch (inp_gate, "gelu_mul" with the per-layer input, proj +
post-norm) and layer_output_scale ("scale").

Decode fused (FUSE, FUSE_ROPE below): the "qkv" pass's work done by the attention
split (ops.attn_split prep), O, down and proj write tmp and leave their post-norm (+ layer scale)
pending until the next matvec over the residual stream adds it to its x (ops.matvec pre: the FFN's
gate/up, the branch's gate, the next layer's Q|K|V; the last one a pass; not with experts), and the
branch's gate takes gelu(.) * ple in its epilogue (gelu_mul). Dispatches a decode token, attention in several
splits: 4 + 13 a layer + 3 (head, soft-cap, argmax) unfused; 4 + 8 a layer + 1 + 3 fused (42
layers: 553 against 344; the head one matvec per part of the output matrix). Without per-layer inputs: 10
a layer against 6 (9 without a layer scale).
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..errors import UnsupportedModelError
from ..models import weights as MW
from ..models.gemma4 import split_kv_layout
from ..models.layer_state import SplitKV
from ..models.layers import Rope
from ..quants import dequantize
from . import gemma4_moe, ops
from .backend import STEP_HEADER, GpuBackend, rope_table
from .gemma4_decode import Gemma4FusedDecode
from .kernels import Kernels, grid
from .kv import GpuKVCache
from .plan import Plan
from .weights import GpuMatrix, GpuWeights

G4_FIELDS = (("n_head", "u"), ("n_kv", "u"), ("n_rot", "u"), ("max_ctx", "u"), ("stride", "u"), ("v_off", "u"),
             ("eps", "f"), ("scale", "f"), ("count", "u"), ("npl", "u"), ("ldb", "u"), ("off", "u"))
MAX_HEAD_DIM = 512
# Decode folds each post-norm + residual add into the next product that reads the residual stream
# (matvec PRE), the per-layer branch's gelu(gate) * input into the gate product (matvec GELU_MUL) and
# the head norms, RoPE and K/V store ("qkv" here) into the attention split (attn_split prep): 5
# dispatches less a layer. HEARTH_GPU_G4_FUSE=0 keeps the separate passes, =post all but the last.
FUSE_MODE = os.environ.get("HEARTH_GPU_G4_FUSE", "all")
FUSE = FUSE_MODE != "0"
FUSE_ROPE = FUSE_MODE not in ("0", "post")
# Decode's down products read their x quantized once to int8 blocks, written by the gate/up product
# (as the dense decoder's past ops.INT8_PRE_K_MIN), at any row length (E4B: 10,240): E4B 184-186 tok/s
# pipelined against 159.4 with f32 x (H200, bench/README.md). HEARTH_GPU_G4_DOWN_Q8=0 keeps f32 x.
DOWN_Q8 = os.environ.get("HEARTH_GPU_G4_DOWN_Q8", "") != "0"


def g4_kernel(ks, pass_: str, head_dim: int = 0, kv_f16: bool = False):
    """A gemma4.wgsl pass. Bindings: qkv: qkv, q_out, k_cache, v_cache, cos_sin, step, q_norm, k_norm;
    ple_in: a (rw), b, g; gelu_mul: a (rw), b; scale, softcap: a (rw); norm_add_scale: b, a (rw), g."""
    access = {"qkv": ["r", "rw", "rw", "rw", "r", "r", "r", "r"], "ple_in": ["rw", "r", "r"],
              "gelu_mul": ["rw", "r"], "scale": ["rw"], "softcap": ["rw"], "norm_add_scale": ["r", "rw", "r"]}[pass_]
    return ks.get("gemma4.wgsl", access, G4_FIELDS, PASS=pass_, HD=int(head_dim), KV_F16=bool(kv_f16))


def elementwise_groups(count: int):
    gx, gy = grid(-(-count // 256))
    return gx, gy, 1


def decode_attn_chunk(head_dim: int) -> int:
    """Keys a decode attention workgroup scores: at least one thread per 4 values of the head."""
    return max(ops.ATTN_CHUNK, head_dim // 4)


class GpuSplitKV(SplitKV):
    """SplitKV over GpuKVCache's (one per head size); layer -> (cache, index) as on the CPU."""

    def touched(self) -> None:
        for c in self.caches:
            c.touched()

    def prefault(self) -> bool:
        return False

    def destroy(self) -> None:
        for c in self.caches:
            c.destroy()


def make_split_kv(dev, cfg, n_ctx: int, kv_dtype: str) -> GpuSplitKV:
    shapes, slot = split_kv_layout(cfg)
    return GpuSplitKV([GpuKVCache(dev, n, heads, hd, n_ctx, kv_dtype) for n, heads, hd in shapes], slot)


class Gemma4GpuBackend(Gemma4FusedDecode, GpuBackend):
    def _refuse(self, cfg, gguf) -> None:
        hc = cfg.hybrid
        hds = (cfg.head_dim, hc.head_dim_swa)
        if any(h > MAX_HEAD_DIM or h % 4 for h in hds) or cfg.n_embd % 32:
            raise UnsupportedModelError(f"{gguf.path.name}: head dims {hds} / width {cfg.n_embd} are outside what the "
                                        f"GPU kernels handle (head dim <= {MAX_HEAD_DIM}, multiple of 4)")

    def _hd(self, i: int) -> int:
        return self.cfg.hybrid.head_dim_swa if self.cfg.hybrid.swa_layers[i] else self.cfg.head_dim

    # ------------------------------------------------------------------ building
    def _build(self, g, n_ctx: int, chunk: int, kv_dtype: str) -> None:
        c, hc, dev = self.cfg, self.cfg.hybrid, self.dev
        ks = self.ks = Kernels(dev)
        W = self.weights = GpuWeights(dev, g)
        d, nh, nv, NL, npl = c.n_embd, c.n_head, c.n_vocab, c.n_layer, hc.n_embd_per_layer
        hd_max = max(self._hd(i) for i in range(NL))
        nff = max(hc.n_ff)
        qkv_w = max((nh + 2 * hc.n_head_kv[i]) * self._hd(i) for i in range(NL))
        widest = max(nff, qkv_w, gemma4_moe.ffn_rows(c), nh * ops.ATTN_MAX_SPLITS * (hd_max + 2), NL * npl) * 4
        chunk = max(1, min(chunk, int(dev.limits["max-storage-buffer-binding-size"]) // widest))
        self.chunk = chunk
        self.npp = -(-npl // 32) * 32                      # npl padded for the kernels (proj's rows)
        self.kv = make_split_kv(dev, c, n_ctx, kv_dtype)
        self.kv_f16 = self.kv.dtype == np.float16
        buf = dev.buffer
        self.x = buf(chunk * d * 4, "x")                   # [chunk, d] residual stream
        self.xn = buf(chunk * d * 4, "xn")                 # [chunk, d] normed
        self.tmp = buf(chunk * d * 4, "tmp")               # [chunk, d] before a post-norm
        self.qkv = buf(chunk * qkv_w * 4, "qkv")           # [chunk, stride of the layer] q | k | v
        self.q = buf(chunk * nh * hd_max * 4, "q")         # [chunk, nh, hd] normed, rotated
        self.att = buf(chunk * nh * hd_max * 4, "att")     # [chunk, nh * hd]
        self.ff = buf(chunk * nff * 4, "ff")               # [chunk, n_ff] gelu(gate) * up
        self.ffq = (buf(ops.q8_words(nff) * 4, "ff-q8") if DOWN_Q8 and self.int8 and getattr(dev, "int8", False)
                    else None)                             # [q8_words(n_ff)] u32: decode's ff as int8 blocks
        if npl:
            self.ple = buf(chunk * NL * npl * 4, "ple")    # [chunk, n_layer, npl] per-layer inputs
            self.pproj = buf(chunk * NL * npl * 4, "ple-proj")  # [chunk, n_layer * npl] per_layer_model_proj x0
            self.pg = buf(chunk * self.npp * 4, "ple-gate")  # [chunk, npp] gelu(inp_gate x) * ple, zero padded
        self.xq = (buf(max(ops.q8_rows_words(chunk, k) for k in (d, nh * hd_max, nff, self.npp or 32)) * 4, "x-q8")
                   if self.mm8 else None)                  # [q8_rows_words] u32: a prefill product's int8 X
        self.logits = buf(nv * 4, "logits")                # [n_vocab]
        self.step = buf((STEP_HEADER + chunk) * 4, "step")
        self.amax = buf(16, "argmax")
        self.max_splits = ops.attn_splits(n_ctx)
        self.part = buf(nh * self.max_splits * (hd_max + 2) * 4, "attn-partials")
        self.ppart = buf(chunk * nh * ops.ATTN_MAX_SPLITS * (hd_max + 2) * 4, "attn-partials-prefill")
        self.logits_all = None

        freq = g.tensors.get("rope_freqs.weight")
        ff_ = dequantize(freq.data, freq.type, freq.shape, freq.name).reshape(-1) if freq is not None else None
        self.cs_full = W.floats(rope_table(Rope(c.n_rot, c.rope_base, True, freq_factors=ff_), n_ctx), "rope")
        self.cs_swa = W.floats(rope_table(Rope(hc.n_rot_swa, hc.rope_base_swa, True), n_ctx), "rope-swa")
        self.emb = W.matrix("token_embd.weight", nv, d, split=True)
        self.out = self.emb if c.tied_output else W.matrix("output.weight", nv, d, split=True)
        self.out_norm = W.vector("output_norm.weight", d)
        if npl:
            self.ple_emb = W.matrix("per_layer_token_embd.weight", nv, NL * npl, split=True)
            self.ple_model_proj = W.matrix("per_layer_model_proj.weight", NL * npl, d)
            self.ple_proj_norm = W.vector("per_layer_proj_norm.weight", npl)
        self.layers = [self._layer_weights(W, g, i) for i in range(NL)]
        self.fuse = FUSE and all(L["moe"] is None for L in self.layers)
        self.fuse_rope = FUSE and FUSE_ROPE                    # with experts too
        self.x2 = buf(d * 4, "x-alt") if self.fuse else None   # [d] the decode residual stream's other buffer

        dec = self.decode_plan = Plan(dev, "decode")
        pre = self.prefill_plan = Plan(dev, "prefill")
        for P, decode in ((dec, True), (pre, False)):
            self._start_stream(decode)
            self._inputs(P, decode)
            for i, L in enumerate(self.layers):
                self._layer(P, decode, i, L)
            self._end_stream(P)
        self.decode_body, self.prefill_body = len(dec.ops), len(pre.ops)
        for P, decode in ((dec, True), (pre, False)):
            self._head(P, decode)
            P.add(ops.argmax(ks), [self.logits, self.amax], (1, 1, 1), "argmax", n=nv)
            P.finalize()
        self.all_plan = None
        self._chain_staging = None

    def _layer_weights(self, W, g, i: int) -> dict:
        c, hc, p = self.cfg, self.cfg.hybrid, f"blk.{i}."
        d, nh, hd, nkv, nff, npl = c.n_embd, c.n_head, self._hd(i), hc.n_head_kv[i], hc.n_ff[i], hc.n_embd_per_layer
        has_kv = i < hc.n_kv_layers
        has_v = has_kv and p + "attn_v.weight" in g.tensors
        scale = MW.optional(g, p + "layer_output_scale.weight", (1,))
        return dict(
            hd=hd, nkv=nkv, nff=nff, swa=hc.swa_layers[i],
            attn_norm=W.vector(p + "attn_norm.weight", d),
            wq=W.matrix(p + "attn_q.weight", nh * hd, d),
            wk=W.matrix(p + "attn_k.weight", nkv * hd, d) if has_kv else None,
            wv=W.matrix(p + "attn_v.weight", nkv * hd, d) if has_v else None,
            q_norm=W.vector(p + "attn_q_norm.weight", hd),
            k_norm=W.vector(p + "attn_k_norm.weight", hd) if has_kv else None,
            wo=W.matrix(p + "attn_output.weight", d, nh * hd),
            post_attn=W.vector(p + "post_attention_norm.weight", d),
            ffn_norm=W.vector(p + "ffn_norm.weight", d),
            gate=W.matrix(p + "ffn_gate.weight", nff, d),
            up=W.matrix(p + "ffn_up.weight", nff, d),
            down=W.matrix(p + "ffn_down.weight", d, nff),
            post_ffn=W.vector(p + "post_ffw_norm.weight", d),
            inp_gate=W.matrix(p + "inp_gate.weight", npl, d) if npl else None,
            proj=self._proj_matrix(W, g, p + "proj.weight") if npl else None,
            post_norm=W.vector(p + "post_norm.weight", d) if npl else None,
            out_scale=float(scale[0]) if scale is not None else 1.0,
            moe=gemma4_moe.Gemma4MoeFfn(self, i) if p + "ffn_gate_inp.weight" in g.tensors else None,
        )

    def _proj_matrix(self, W, g, name: str):
        """proj [d, npl]; rows of npl weights padded with zeros to a multiple of 32 (as float32) where the
        kernels need it (tiny models; the real shapes have npl = 256): pg's padding columns stay 0."""
        c, npl, npp = self.cfg, self.cfg.hybrid.n_embd_per_layer, self.npp
        if npp == npl:
            return W.matrix(name, c.n_embd, npl)
        t = g.tensors.get(name)
        if t is None or tuple(t.shape) != (npl, c.n_embd):
            raise UnsupportedModelError(f"{g.path.name}: tensor {name} is missing or not [{npl}, {c.n_embd}]")
        m = np.zeros((c.n_embd, npp), np.float32)
        m[:, :npl] = dequantize(t.data, t.type, t.shape, name).reshape(c.n_embd, npl)
        return GpuMatrix(W.floats(m, name), "F32", c.n_embd, npp)

    # one product: decode a matvec (optionally RMSNorm'd x), prefill a tiled product (int8 X quantized first)
    def _matvec(self, P, w, src, k: int, out, label: str, y_off: int = 0) -> None:
        lay, q8 = self._layout([w.qtype], k, w.rows)
        P.add(ops.matvec(self.ks, [w.qtype], layout=lay, q8x=q8), [src, out, w.buffer],
              ops.matvec_groups(w.rows, lay), label, **ops.matvec_params([w.qtype], k, [w.rows], y_off=y_off))

    def _matmul_into(self, P, w, src, k: int, out, ldy: int, y_off: int, label: str, quantize=True, **kw) -> None:
        if quantize and self._mm8(w.qtype):
            self._quantize_src(P, src, k, label)
        self._product(P, w, src, k, w.rows, out, ldy, y_off, label, **kw)

    def _rows(self, P, kern, bufs, rows, label, **prm) -> None:
        P.add(kern, bufs, lambda n, kv: ops.rows_groups(rows(n)), label, **prm)

    def _inputs(self, P: Plan, decode: bool) -> None:
        """The scaled embeddings into x; with per-layer inputs, those [n, n_layer, npl] into ple."""
        c, hc, ks = self.cfg, self.cfg.hybrid, self.ks
        d, NL, npl = c.n_embd, c.n_layer, hc.n_embd_per_layer
        groups = (1, 1, 1) if decode else (lambda n, kv: ops.rows_groups(n))
        x0 = self._stream_x()[0]                          # x, or x2 where the fused stream starts there
        tables = [(self.emb, x0, d, c.embed_scale)]
        if npl:
            tables.append((self.ple_emb, self.ple, NL * npl, math.sqrt(npl)))
        for m, out, width, scale in tables:
            prm = dict(d=width, row_bytes=ops.row_bytes(m.qtype, width), scale=scale, n=self.chunk, id_off=STEP_HEADER,
                       **{f"s{j}": r0 for j, (_, r0, _) in enumerate(m.parts) if j})
            P.add(ops.embed(ks, m.qtype, len(m.parts)), [self.step, out] + [b for b, _, _ in m.parts], groups,
                  "embed", **prm)
        if not npl:
            return
        if decode:
            self._matvec(P, self.ple_model_proj, x0, d, self.pproj, "ple.proj")
        else:
            self._matmul_into(P, self.ple_model_proj, self.x, d, self.pproj, NL * npl, 0, "ple.proj")
        P.add(g4_kernel(ks, "ple_in"), [self.ple, self.pproj, self.ple_proj_norm],
              lambda n, kv: ops.rows_groups(n * NL), "ple.in", count=lambda n, kv: n * NL, npl=npl,
              scale=1.0 / math.sqrt(d), eps=c.rms_eps)

    def _layer(self, P: Plan, decode: bool, i: int, L: dict) -> None:
        self._attention(P, decode, i, L)
        self._ffn(P, decode, i, L)
        self._per_layer_branch(P, decode, i, L)
        # else in the branch's last pass, or in the pending post-norm (fused decode)
        if L["out_scale"] != 1.0 and not self.cfg.hybrid.n_embd_per_layer and not self._fused(decode):
            d = self.cfg.n_embd
            P.add(g4_kernel(self.ks, "scale"), [self.x], lambda n, kv: elementwise_groups(n * d), f"{i}.scale",
                  count=lambda n, kv: n * d, scale=L["out_scale"])

    def _attention(self, P: Plan, decode: bool, i: int, L: dict) -> None:
        c, hc, ks = self.cfg, self.cfg.hybrid, self.ks
        d, nh, hd = c.n_embd, c.n_head, L["hd"]
        mats = [m for m in (L["wq"], L["wk"], L["wv"]) if m is not None]
        rows = [m.rows for m in mats]
        stride = sum(rows)
        if decode:
            types = [m.qtype for m in mats]
            lay, q8 = self._layout(types, d, stride, math.gcd(*rows) if len(rows) > 1 else 0)
            x, pb, pp, pre = self._stream_x()
            P.add(ops.matvec(ks, types, norm=True, layout=lay, q8x=q8, pre=pre),
                  [x, self.qkv] + [m.buffer for m in mats] + [L["attn_norm"]] + pb,
                  ops.matvec_groups(stride, lay), f"{i}.qkv", **ops.matvec_params(types, d, rows, eps=c.rms_eps), **pp)
        else:
            self._rows(P, ops.rmsnorm(ks), [self.x, self.xn, L["attn_norm"]], lambda n: n, f"{i}.norm",
                       d=d, n=self.chunk, eps=c.rms_eps)
            if any(self._mm8(m.qtype) for m in mats):
                self._quantize_src(P, self.xn, d, f"{i}.qkv")
            y_off = 0
            for j, m in enumerate(mats):
                self._matmul_into(P, m, self.xn, d, self.qkv, stride, y_off, f"{i}.qkv{j}", quantize=False)
                y_off += m.rows
        cache, slot = self.kv.kv_of(i)
        kc, vc = cache.k[slot], cache.v[slot]
        nkv_w = L["nkv"] if L["wk"] is not None else 0          # K/V heads this layer writes
        v_off = nh * hd + (L["nkv"] * hd if L["wv"] is not None else 0)
        swa = L["swa"]
        cs, n_rot = (self.cs_swa, hc.n_rot_swa) if swa else (self.cs_full, c.n_rot)
        norms = [L["q_norm"], L["k_norm"] if L["k_norm"] is not None else L["q_norm"]]
        prep = decode and self.fuse_rope
        if not prep:
            P.add(g4_kernel(ks, "qkv", hd, self.kv_f16), [self.qkv, self.q, kc, vc, cs, self.step] + norms,
                  lambda n, kv: ops.rope_groups(n, nh, nkv_w), f"{i}.rope",
                  n_head=nh, n_kv=nkv_w, n_rot=n_rot, max_ctx=cache.max_ctx, stride=stride, v_off=v_off, eps=c.rms_eps)
        ap = dict(n_head=nh, n_kv=cache.n_kv_heads, max_ctx=cache.max_ctx, scale=c.attn_scale,
                  window=hc.window if swa else 0)
        if decode:
            ch = decode_attn_chunk(hd)
            nsp = lambda kv: -(-kv // ch)  # noqa: E731
            ap["max_splits"] = self.max_splits
            # prep: the attention reads the raw Q|K|V row and does the "qkv" pass's work itself
            qsrc, extra = (self.qkv, [cs] + norms) if prep else (self.q, [])
            if prep:
                ap.update(n_rot=n_rot, v_off=v_off, eps=c.rms_eps, kv_w=int(nkv_w > 0))
            P.add(ops.attn_split(ks, hd, self.kv_f16, chunk=ch, prep=prep),
                  [qsrc, kc, vc, self.part, self.step] + extra,
                  lambda n, kv: (nsp(kv), nh, 1) if nsp(kv) > 1 else (0, 0, 0), f"{i}.attn", **ap)
            P.add(ops.attn_split(ks, hd, self.kv_f16, direct=True, chunk=ch, prep=prep),
                  [qsrc, kc, vc, self.att, self.step] + extra,
                  lambda n, kv: (1, nh, 1) if nsp(kv) == 1 else (0, 0, 0), f"{i}.attn", **ap)
            P.add(ops.attn_combine(ks, hd, chunk=ch), [self.part, self.att, self.step],
                  lambda n, kv: (nh, 1, 1) if nsp(kv) > 1 else (0, 0, 0), f"{i}.combine", **ap)
            if self.fuse:
                self._matvec(P, L["wo"], self.att, nh * hd, self.tmp, f"{i}.o")
                self.stream.pend(L["post_attn"], 1.0)
            else:
                lay, q8 = self._layout([L["wo"].qtype], nh * hd, d)
                self._decode_proj(P, L["wo"], self.att, nh * hd, None, L["post_attn"], f"{i}.o", layout=lay, q8=q8)
        else:
            ap["n_splits"] = lambda n, kv: ops.attn_prefill_splits(kv)
            P.add(ops.attn_prefill(ks, hd, self.kv_f16), [self.q, kc, vc, self.ppart, self.step],
                  lambda n, kv: ops.attn_prefill_groups(n, nh, ops.attn_prefill_splits(kv), hd), f"{i}.attn", **ap)
            P.add(ops.attn_prefill_combine(ks, hd), [self.ppart, self.att], lambda n, kv: ops.rows_groups(n * nh),
                  f"{i}.combine", **ap)
            self._prefill_proj(P, L["wo"], self.att, nh * hd, None, L["post_attn"], f"{i}.o")

    def _ffn(self, P: Plan, decode: bool, i: int, L: dict) -> None:
        """x += RMSNorm(down(gelu(gate h) * up h)) (post_ffw_norm), h = RMSNorm(x) (ffn_norm): the layer's
        FFN. With experts beside the MLP (L["moe"]), the MLP's down output goes to tmp and the experts'
        FFN (gpu/gemma4_moe.py) merges both into x."""
        c, ks, d, nff = self.cfg, self.ks, self.cfg.n_embd, L["nff"]
        moe = L["moe"]
        if decode:
            self._decode_ffn(P, i, L)
        else:
            self._rows(P, ops.rmsnorm(ks), [self.x, self.xn, L["ffn_norm"]], lambda n: n, f"{i}.ffn_norm",
                       d=d, n=self.chunk, eps=c.rms_eps)
            if self._mm8(L["gate"].qtype) or self._mm8(L["up"].qtype):
                self._quantize_src(P, self.xn, d, f"{i}.ffn")
            for name in ("gate", "up"):
                self._product(P, L[name], self.xn, d, nff, self.ff, nff, 0, f"{i}.{name}", act="gelu",
                              epi_glu=name == "up")
            if moe is not None:
                self._matmul_into(P, L["down"], self.ff, nff, self.tmp, d, 0, f"{i}.down", unbounded_x=True)
            else:
                self._prefill_proj(P, L["down"], self.ff, nff, None, L["post_ffn"], f"{i}.down", unbounded_x=True)
        if moe is not None:
            moe.add(P, decode, L)

    def _per_layer_branch(self, P: Plan, decode: bool, i: int, L: dict) -> None:
        """x = (x + RMSNorm(proj(gelu(inp_gate x) * ple[:, i])) (post_norm)) * layer_output_scale."""
        c, npl = self.cfg, self.cfg.hybrid.n_embd_per_layer
        if not npl:
            return
        d = c.n_embd
        if self._fused(decode):
            self._fused_branch(P, i, L)
            return
        if decode:
            self._matvec(P, L["inp_gate"], self.x, d, self.pg, f"{i}.ple.gate")
        else:
            self._matmul_into(P, L["inp_gate"], self.x, d, self.pg, self.npp, 0, f"{i}.ple.gate")
        P.add(g4_kernel(self.ks, "gelu_mul"), [self.pg, self.ple], lambda n, kv: elementwise_groups(n * npl),
              f"{i}.ple.mul", count=lambda n, kv: n * npl, npl=npl, stride=self.npp, ldb=c.n_layer * npl,
              off=i * npl)
        k = self.npp
        if decode:
            self._matvec(P, L["proj"], self.pg, k, self.tmp, f"{i}.ple.out")
        else:
            self._matmul_into(P, L["proj"], self.pg, k, self.tmp, d, 0, f"{i}.ple.out")
        # x = (x + RMSNorm(proj pe) post_norm) * layer_output_scale, one pass
        P.add(g4_kernel(self.ks, "norm_add_scale"), [self.tmp, self.x, L["post_norm"]],
              lambda n, kv: ops.rows_groups(n), f"{i}.ple.post", count=lambda n, kv: n, stride=d, eps=c.rms_eps,
              scale=L["out_scale"])

    def _post_kernel(self):
        return g4_kernel(self.ks, "norm_add_scale")

    def _softcap(self, P: Plan, buf_, count) -> None:
        cap = self.cfg.final_softcap
        if cap > 0:
            P.add(g4_kernel(self.ks, "softcap"), [buf_], lambda n, kv: elementwise_groups(count(n)), "softcap",
                  count=lambda n, kv: count(n), scale=cap)

    def _head(self, P: Plan, decode: bool) -> None:
        c, d, t = self.cfg, self.cfg.n_embd, [self.out.qtype]
        for buf_, r0, rows in self.out.parts:        # one matvec per part of the output matrix
            hp = dict(ops.matvec_params(t, d, [rows], eps=c.rms_eps), y_off=r0)
            if not decode:
                hp["x_off"] = lambda n, kv: (n - 1) * d
            lay, q8 = self._layout(t, d, rows)
            P.add(ops.matvec(self.ks, t, norm=True, layout=lay, q8x=q8), [self.x, self.logits, buf_, self.out_norm],
                  ops.matvec_groups(rows, lay), "head", **hp)
        self._softcap(P, self.logits, lambda n: c.n_vocab)

    def _all_logits_plan(self) -> Plan:
        if self.all_plan is None:
            super()._all_logits_plan()
            P = self.all_plan
            nv = self.cfg.n_vocab
            P.buffer.destroy()           # re-finalized below with the soft-cap after the products
            self._softcap(P, self.logits_all, lambda n: n * nv)
            P.finalize()
        return self.all_plan

    def close(self) -> None:
        kv = getattr(self, "kv", None)
        if isinstance(kv, GpuSplitKV):
            kv.destroy()
            self.kv = None
        super().close()
