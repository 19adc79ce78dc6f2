"""GpuHybridBackend: Qwen3.5 (arch qwen35) on the GPU, the CPU model's arithmetic
(engine/models/qwen35.py) with the dense backend's products and attention kernels.

A Gated DeltaNet layer, x [n, d]:
    proj = RMSNorm(x) * attn_norm @ [attn_qkv | attn_gate | ssm_beta | ssm_alpha]^T   [n, ch + vd + 2 hv]
    conv = silu(causal conv of proj[:, :ch]) (state: the last d_conv - 1 inputs)     [n, ch]
    q, k heads of conv L2-normalised; the delta rule -> o [n, hv, S]; o = RMSNorm(o per head) * ssm_norm
    * silu(z): one token (decode) as the recurrent update, more tokens in the chunked form (the
    kernels: delta_plan.py); x += ssm_out o. ssm_beta|ssm_alpha of one type are one matrix.
A gated attention layer: Q (the query half of attn_q's rows, uploaded apart from the gate half), K, V
from RMSNorm(x); rope_store.wgsl's q/k norms, NeoX RoPE on the first n_rot dims and the K/V store;
attention as the dense backend's; att *= sigmoid(gate); x += attn_output att.
Every layer: x += FFN (hybrid_ffn.py: pluggable, qwen35moe's experts go there).

The state is a GpuHybridState (delta_state.py): K/V for the attention layers only, conv and
delta-rule state per recurrent layer, snapshots read back to the host. Pipelined greedy decode
(GpuBackend.greedy_steps: one step in flight past the consumer) copies the recurrent buffers on the
GPU before each such step and back if the consumer stops there: a step past the resident tokens
would otherwise leave the recurrent state one token ahead, which no K/V slice undoes.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..errors import UnsupportedModelError
from ..models.layers import Rope
from . import delta_ops as D
from . import ops
from .backend import STEP_HEADER, GpuBackend, rope_table
from .delta_plan import add_decode, add_prefill, decode_gated_out
from .delta_state import GpuHybridState
from .hybrid_ffn import ffn_for
from .hybrid_moe import ffn_rows
from .kernels import Kernels
from .plan import Plan
from .weights import GpuMatrix, GpuWeights


class GpuHybridBackend(GpuBackend):

    def __init__(self, cfg, gguf, n_ctx: int, **kw):
        hc = getattr(cfg, "hybrid", None)
        if not getattr(hc, "recurrent", False):
            raise UnsupportedModelError(f"{gguf.path.name}: {cfg.arch} is not a hybrid recurrent model")
        if hc.d_state > D.MAX_STATE or hc.d_state % 8 or hc.d_conv > 64:
            raise UnsupportedModelError(f"{gguf.path.name}: recurrent state size {hc.d_state} / conv kernel "
                                        f"{hc.d_conv} is outside what the GPU kernels hold (a multiple of 8 up to {D.MAX_STATE} / 64)")
        self.gguf_name = gguf.path.name
        self.pipelined = os.environ.get("HEARTH_GPU_HYBRID_PIPELINE", "") != "0"
        self._backup = None          # the recurrent buffers before a greedy step in flight
        super().__init__(cfg, gguf, n_ctx, **kw)

    # ------------------------------------------------------------------ building
    def _build(self, g, n_ctx: int, chunk: int, kv_dtype: str) -> None:
        c, hc, dev = self.cfg, self.cfg.hybrid, self.dev
        self.ks = Kernels(dev)
        W = self.weights = GpuWeights(dev, g)
        d, hd, nh, nkv, nv = c.n_embd, c.head_dim, c.n_head, c.n_head_kv, c.n_vocab
        nff = max(c.n_ff, ffn_rows(c))      # qwen35moe: be.ff holds the shared expert's rows
        S, hv, ch, vd = hc.d_state, hc.n_v_heads, hc.conv_channels, hc.value_dim
        self.ldp = ldp = ch + vd + 2 * hv
        qkv_dim = (nh + 2 * nkv) * hd
        widest = max(nff, ldp, qkv_dim, nh * ops.ATTN_MAX_SPLITS * (hd + 2), hv * D.CHUNK) * 4
        chunk = max(1, min(chunk, int(dev.limits["max-storage-buffer-binding-size"]) // widest))
        self.chunk = chunk
        self.kv = GpuHybridState(dev, c.n_layer, hc.attn_layers, nkv, hd, n_ctx,
                                 conv_shape=(hc.d_conv - 1, ch), delta_shape=(hv, S, S), kv_dtype=kv_dtype)
        self.kv_f16 = self.kv.dtype == np.float16
        buf = dev.buffer
        self.x = buf(chunk * d * 4, "x")                 # [chunk, d] residual stream
        self.xn = buf(chunk * d * 4, "xn")               # [chunk, d] normed (prefill)
        self.tmp = buf(16, "tmp")                        # no post-norms here
        self.proj = buf(chunk * ldp * 4, "proj")         # [chunk, ch | vd (z) | hv (beta) | hv (alpha)]
        self.convo = buf(chunk * ch * 4, "conv")         # [chunk, ch] conv + SiLU, q/k normalized
        self.o = buf(chunk * vd * 4, "delta-out")        # [chunk, hv, S]
        self.gb = buf(chunk * hv * 2 * 4, "g-beta")      # [chunk, hv, 2] cumulative decay, beta
        self.mat = buf(D.mat_floats(chunk, hv) * 4, "chunk-mats")   # [chunks, hv, C, C]
        self.delta_wt = buf(D.tw_floats(chunk, hv, S) * 4, "delta-wt")   # [chunks, hv, S, C] W^T
        self.delta_qt = buf(D.tw_floats(chunk, hv, S) * 4, "delta-qt")   # [chunks, hv, S, C] scaled Q^T
        # [chunk, (nh + 2 nkv) hd]; a decoded token with fused_qg: [q | gate | k | v] (nh, nh, nkv, nkv heads)
        self.fused_qg = os.environ.get("HEARTH_GPU_HYBRID_QG", "") != "0"
        self.qkv = buf(max(chunk * qkv_dim, qkv_dim + nh * hd) * 4, "qkv")
        self.gate = buf(chunk * nh * hd * 4, "attn-gate")  # [chunk, nh hd]
        self.q = buf(max(chunk, 2) * nh * hd * 4, "q")   # [chunk, nh, hd] normed, rotated (decode: 2 nh, above)
        self.att = buf(chunk * nh * hd * 4, "att")       # [chunk, nh hd]
        self.ff = buf(chunk * nff * 4, "ff")             # [chunk, n_ff]
        self.ffq = buf(ops.q8_words(nff) * 4, "ff-q8")
        self.xq = (buf(max(ops.q8_rows_words(chunk, k) for k in (d, nh * hd, nff, vd)) * 4, "x-q8")
                   if self.mm8 else None)
        self.logits = buf(nv * 4, "logits")
        self.step = buf((STEP_HEADER + chunk) * 4, "step")
        self.amax = buf(16, "argmax")
        self.max_splits = ops.attn_splits(n_ctx)
        self.part = buf(nh * self.max_splits * (hd + 2) * 4, "attn-partials")
        self.ppart = buf(chunk * nh * ops.ATTN_MAX_SPLITS * (hd + 2) * 4, "attn-partials-prefill")
        self.logits_all = None
        self.cs = W.floats(rope_table(Rope(c.n_rot, c.rope_base, True), n_ctx), "rope")

        self.emb = W.matrix("token_embd.weight", nv, d, split=True)
        self.out = self.emb if c.tied_output else W.matrix("output.weight", nv, d, split=True)
        self.out_norm = W.vector("output_norm.weight", d)
        self.layers = [self._linear_weights(W, i) if hc.recurrent_layers[i] else self._attn_weights(W, i)
                       for i in range(c.n_layer)]

        dec = self.decode_plan = Plan(dev, "decode")
        pre = self.prefill_plan = Plan(dev, "prefill")
        self._add_embed(dec, pre)
        for i, L in enumerate(self.layers):
            if hc.recurrent_layers[i]:
                self._linear_decode(dec, i, L)
                self._linear_prefill(pre, i, L)
            else:
                self._attn_decode(dec, i, L)
                self._attn_prefill(pre, i, L)
            L["ffn"].decode(dec, f"{i}.ffn")
            L["ffn"].prefill(pre, f"{i}.ffn")
        self.decode_body = len(dec.ops)
        self.prefill_body = len(pre.ops)
        self._add_head(dec, pre)
        self.all_plan = None
        self._chain_staging = None

    def _add_embed(self, dec: Plan, pre: Plan) -> None:
        c = self.cfg
        emb_p = dict(d=c.n_embd, row_bytes=ops.row_bytes(self.emb.qtype, c.n_embd), scale=c.embed_scale, n=self.chunk,
                     id_off=STEP_HEADER, **{f"s{j}": r0 for j, (_, r0, _) in enumerate(self.emb.parts) if j})
        emb_k = ops.embed(self.ks, self.emb.qtype, len(self.emb.parts))
        emb_b = [self.step, self.x] + [b for b, _, _ in self.emb.parts]
        dec.add(emb_k, emb_b, (1, 1, 1), "embed", **emb_p)
        pre.add(emb_k, emb_b, lambda n, kv: ops.rows_groups(n), "embed", **emb_p)

    def _add_head(self, dec: Plan, pre: Plan) -> None:
        c, d = self.cfg, self.cfg.n_embd
        head_t = [self.out.qtype]
        for buf_, r0, rows in self.out.parts:
            hp = dict(ops.matvec_params(head_t, d, [rows], eps=c.rms_eps), y_off=r0)
            lay, q8 = self._layout(head_t, d, rows)
            hk = ops.matvec(self.ks, head_t, norm=True, layout=lay, q8x=q8)
            dec.add(hk, [self.x, self.logits, buf_, self.out_norm], ops.matvec_groups(rows, lay), "head", **hp)
            pre.add(hk, [self.x, self.logits, buf_, self.out_norm], ops.matvec_groups(rows, lay), "head",
                    **dict(hp, x_off=lambda n, kv: (n - 1) * d))
        for p in (dec, pre):
            p.add(ops.argmax(self.ks), [self.logits, self.amax], (1, 1, 1), "argmax", n=c.n_vocab)
            p.finalize()

    def _rows(self, W, name: str, select: np.ndarray, k: int) -> GpuMatrix:
        """Rows `select` of matrix `name` [rows, k] as a matrix of their own (a GGUF row is whole
        blocks, so a row keeps its bytes); a type without a GPU kernel as F16, as GpuWeights does."""
        t = W.g.tensors.get(name)
        if t is None:
            raise UnsupportedModelError(f"{W.g.path.name}: tensor {name} is missing")
        rows = int(t.shape[1])
        if tuple(t.shape) != (k, rows) or select.max() >= rows:
            raise UnsupportedModelError(f"{W.g.path.name}: tensor {name} has shape {list(t.shape)}, expected "
                                        f"[{k}, {select.max() + 1}+]")
        data, qtype = t.data, t.type.name
        if qtype not in ops.GPU_TYPES:
            from ..quants import dequantize  # noqa: PLC0415
            W.fallbacks.append(f"{name} ({qtype} -> F16)")
            data, qtype = dequantize(t.data, t.type, t.shape, name).astype(np.float16), "F16"
        part = np.ascontiguousarray(np.asarray(data).view(np.uint8).reshape(rows, -1)[select])
        b = self.dev.upload(part, f"{name}[{select[0]}...]")
        W.buffers.append(b)
        W.nbytes += b.size
        return GpuMatrix(b, qtype, len(select), k)

    def _linear_weights(self, W, i: int) -> dict:
        c, hc, p = self.cfg, self.cfg.hybrid, f"blk.{i}."
        d, hv = c.n_embd, hc.n_v_heads
        da = np.concatenate([self._vec(W, p + "ssm_dt.bias", hv), self._vec(W, p + "ssm_a", hv)])
        return dict(
            attn_norm=W.vector(p + "attn_norm.weight", d),
            w_in=[W.matrix(p + "attn_qkv.weight", hc.conv_channels, d), W.matrix(p + "attn_gate.weight", hc.value_dim, d)]
            + self._beta_alpha(W, p, hv, d),
            conv_w=W.vector(p + "ssm_conv1d.weight", hc.conv_channels * hc.d_conv),   # [ch, d_conv]
            da=W.floats(da, p + "dt_bias|a"),                                          # [2 hv]
            ssm_norm=W.vector(p + "ssm_norm.weight", hc.d_state),
            ssm_out=W.matrix(p + "ssm_out.weight", d, hc.value_dim),
            ffn=ffn_for(self, i))

    def _beta_alpha(self, W, p: str, hv: int, d: int) -> list:
        """ssm_beta and ssm_alpha ([hv, d] each), as one matrix of 2 hv rows where they have one GPU
        type (their outputs sit side by side in proj), so that a decoded token's in-projections are
        one matvec dispatch, not two; else the two matrices."""
        names = [p + "ssm_beta.weight", p + "ssm_alpha.weight"]
        ts = [W.g.tensors.get(n) for n in names]
        if (not D.split_decode() or any(t is None for t in ts)
                or ts[0].type != ts[1].type or ts[0].type.name not in ops.GPU_TYPES
                or any(tuple(t.shape) != (d, hv) for t in ts)):
            return [W.matrix(n, hv, d) for n in names]
        raw = np.concatenate([np.asarray(t.data).view(np.uint8).reshape(hv, -1) for t in ts])
        b = self.dev.upload(np.ascontiguousarray(raw), p + "ssm_beta|alpha")
        W.buffers.append(b)
        W.nbytes += b.size
        return [GpuMatrix(b, ts[0].type.name, 2 * hv, d)]

    @staticmethod
    def _vec(W, name: str, n: int) -> np.ndarray:
        from ..models import weights as MW  # noqa: PLC0415
        return MW.tensor(W.g, name, (n,)).astype(np.float32)

    def _attn_weights(self, W, i: int) -> dict:
        c, p = self.cfg, f"blk.{i}."
        d, hd, nh, nkv = c.n_embd, c.head_dim, c.n_head, c.n_head_kv
        # attn_q's rows are [query(hd) | gate(hd)] head after head: the two halves as two matrices
        # (decode with fused_qg: also both halves as one matrix of [query rows; gate rows], so that Q, gate,
        # K and V are one matvec: attn_q's bytes twice on the GPU)
        heads = np.arange(nh)[:, None] * 2 * hd
        query = (heads + np.arange(hd)).reshape(-1)
        return dict(
            attn_norm=W.vector(p + "attn_norm.weight", d),
            wq=self._rows(W, p + "attn_q.weight", query, d),
            wg=self._rows(W, p + "attn_q.weight", query + hd, d),
            wqg=self._rows(W, p + "attn_q.weight", np.concatenate([query, query + hd]), d) if self.fused_qg else None,
            wk=W.matrix(p + "attn_k.weight", nkv * hd, d),
            wv=W.matrix(p + "attn_v.weight", nkv * hd, d),
            q_norm=W.vector(p + "attn_q_norm.weight", hd),
            k_norm=W.vector(p + "attn_k_norm.weight", hd),
            wo=W.matrix(p + "attn_output.weight", d, nh * hd),
            ffn=ffn_for(self, i))

    def _dp(self, **kw) -> dict:
        """delta_ops' parameters of this model (kw: the per-call ones)."""
        c, hc = self.cfg, self.cfg.hybrid
        ch, vd, hv = hc.conv_channels, hc.value_dim, hc.n_v_heads
        p = dict(S=hc.d_state, hv=hv, hk=hc.n_k_heads, ch=ch, ldp=self.ldp, z_off=ch, b_off=ch + vd,
                 a_off=ch + vd + hv, K=hc.d_conv, eps=c.rms_eps, n=lambda n, kv: n)
        p.update(kw)
        return p

    def _norm_matvecs(self, P: Plan, mats, norm, out, offs, label: str, per: int = 2) -> None:
        """out[y_off:y_off + rows] = W RMSNorm(x) * norm for each matrix (decode: one token), `per`
        matrices a dispatch (matvec's concat mode: their rows side by side at y_off of the first)."""
        c = self.cfg
        for a in range(0, len(mats), per):
            group = mats[a:a + per]
            types, rows = [w.qtype for w in group], [w.rows for w in group]
            mult = math.gcd(*rows) if len(rows) > 1 else 0
            lay, q8 = self._layout(types, c.n_embd, sum(rows), mult)
            P.add(ops.matvec(self.ks, types, norm=True, layout=lay, q8x=q8),
                  [self.x, out] + [w.buffer for w in group] + [norm], ops.matvec_groups(sum(rows), lay), label,
                  **ops.matvec_params(types, c.n_embd, rows, eps=c.rms_eps, y_off=offs[a]))

    def _in_offsets(self, L: dict) -> list[int]:
        """Where each of L's in-projection matrices writes in proj's row (beta and alpha side by side)."""
        offs = [0]
        for w in L["w_in"][:-1]:
            offs.append(offs[-1] + w.rows)
        return offs

    def _linear_tail(self, P: Plan, i: int, L: dict, decode: bool) -> None:
        """From proj to the gated delta-rule output o: delta_plan.py's passes."""
        (add_decode if decode else add_prefill)(self, P, i, L)

    def _linear_decode(self, P: Plan, i: int, L: dict) -> None:
        self._norm_matvecs(P, L["w_in"], L["attn_norm"], self.proj, self._in_offsets(L), f"{i}.in",
                           per=3 if len(L["w_in"]) == 3 else 2)
        self._linear_tail(P, i, L, decode=True)
        hc, w = self.cfg.hybrid, L["ssm_out"]
        vd, d = hc.value_dim, self.cfg.n_embd
        lay, q8 = self._layout([w.qtype], vd, d)
        gated, shift = decode_gated_out(self, hc.d_state)
        if not gated:
            self._decode_proj(P, w, self.o, vd, None, None, f"{i}.ssm_out", layout=lay, q8=q8)
            return
        cst = [self.kv.conv[self.kv.recurrent_slot[i]]] if shift else []
        P.add(ops.matvec(self.ks, [w.qtype], residual=True, layout=lay, q8x=q8,
                         gated=(hc.d_state, hc.n_v_heads, hc.conv_channels if shift else 0, hc.d_conv - 1 if shift else 0)),
              [self.o, self.x, w.buffer, self.proj, L["ssm_norm"]] + cst, ops.matvec_groups(d, lay), f"{i}.ssm_out",
              **dict(ops.matvec_params([w.qtype], vd, [d], eps=self.cfg.rms_eps), a1=hc.conv_channels))

    def _linear_prefill(self, P: Plan, i: int, L: dict) -> None:
        c = self.cfg
        d = c.n_embd
        P.add(ops.rmsnorm(self.ks), [self.x, self.xn, L["attn_norm"]], lambda n, kv: ops.rows_groups(n), f"{i}.norm",
              d=d, n=self.chunk, eps=c.rms_eps)
        if any(self._mm8(w.qtype) for w in L["w_in"]):
            self._quantize_src(P, self.xn, d, f"{i}.in")
        for w, y_off in zip(L["w_in"], self._in_offsets(L)):
            self._product(P, w, self.xn, d, w.rows, self.proj, self.ldp, y_off, f"{i}.in")
        self._linear_tail(P, i, L, decode=False)
        self._prefill_proj(P, L["ssm_out"], self.o, c.hybrid.value_dim, None, None, f"{i}.ssm_out")

    def _rope(self, P: Plan, i: int, L: dict, groups, n_head: int) -> None:
        c, s = self.cfg, self.kv.attn_slot[i]
        P.add(ops.rope_store(self.ks, c.head_dim, True, self.kv_f16),
              [self.qkv, self.q, self.kv.kv.k[s], self.kv.kv.v[s], self.cs, self.step, L["q_norm"], L["k_norm"]],
              groups, f"{i}.rope", n_head=n_head, n_kv=c.n_head_kv, n_rot=c.n_rot, max_ctx=self.kv.max_ctx,
              neox=1, eps=c.rms_eps)

    def _sigmoid_gate(self, P: Plan, i: int, gate, gate_off: int) -> None:
        width = self.cfg.n_head * self.cfg.head_dim
        P.add(D.sigmoid_gate(self.ks), [self.att, gate], lambda n, kv: D.threads_groups(n * width),
              f"{i}.attn_gate", **self._dp(ch=width, z_off=gate_off))

    def _attn_decode_in(self, P: Plan, i: int, L: dict):
        """Q, gate, K, V of one token and the rope/store pass; returns (gate buffer, its offset). With
        wqg: one matvec writes [q | gate | k | v] and rope_store takes the gate heads as nh more query
        heads (q rows nh .. 2 nh, which attention never reads), so K and V sit where it looks."""
        c = self.cfg
        hd, nh, nkv = c.head_dim, c.n_head, c.n_head_kv
        if L["wqg"] is None:
            self._norm_matvecs(P, [L["wq"], L["wk"], L["wv"]], L["attn_norm"], self.qkv,
                               [0, nh * hd, (nh + nkv) * hd], f"{i}.qkv", per=3)
            self._norm_matvecs(P, [L["wg"]], L["attn_norm"], self.gate, [0], f"{i}.gate")
            self._rope(P, i, L, ops.rope_groups(1, nh, nkv), nh)
            return self.gate, 0
        self._norm_matvecs(P, [L["wqg"], L["wk"], L["wv"]], L["attn_norm"], self.qkv,
                           [0, 2 * nh * hd, (2 * nh + nkv) * hd], f"{i}.qkv", per=3)
        self._rope(P, i, L, ops.rope_groups(1, 2 * nh, nkv), 2 * nh)
        return self.qkv, nh * hd

    def _attn_decode(self, P: Plan, i: int, L: dict) -> None:
        c, ks, s = self.cfg, self.ks, self.kv.attn_slot[i]
        hd, nh, nkv = c.head_dim, c.n_head, c.n_head_kv
        gate, gate_off = self._attn_decode_in(P, i, L)
        kc, vc = self.kv.kv.k[s], self.kv.kv.v[s]
        ap = dict(self._attn_params(0), max_splits=self.max_splits)
        nsp = ops.attn_splits
        P.add(ops.attn_split(ks, hd, self.kv_f16), [self.q, kc, vc, self.part, self.step],
              lambda n, kv: (nsp(kv), nh, 1) if nsp(kv) > 1 else (0, 0, 0), f"{i}.attn", **ap)
        fold = D.gate_in_attention()
        g_off = gate_off if fold else None
        direct = ops.attn_split(ks, hd, self.kv_f16, direct=True, gate_off=g_off)
        combine = ops.attn_combine(ks, hd, gate_off=g_off)
        extra = [gate] if fold else []
        P.add(direct, [self.q, kc, vc, self.att, self.step] + extra,
              lambda n, kv: (1, nh, 1) if nsp(kv) == 1 else (0, 0, 0), f"{i}.attn", **ap)
        P.add(combine, [self.part, self.att, self.step] + extra,
              lambda n, kv: (nh, 1, 1) if nsp(kv) > 1 else (0, 0, 0), f"{i}.combine", **ap)
        if not fold:
            self._sigmoid_gate(P, i, gate, gate_off)
        lay, q8 = self._layout([L["wo"].qtype], nh * hd, c.n_embd)
        self._decode_proj(P, L["wo"], self.att, nh * hd, None, None, f"{i}.o", layout=lay, q8=q8)

    def _attn_prefill(self, P: Plan, i: int, L: dict) -> None:
        c, ks, s = self.cfg, self.ks, self.kv.attn_slot[i]
        d, hd, nh, nkv = c.n_embd, c.head_dim, c.n_head, c.n_head_kv
        P.add(ops.rmsnorm(ks), [self.x, self.xn, L["attn_norm"]], lambda n, kv: ops.rows_groups(n), f"{i}.norm",
              d=d, n=self.chunk, eps=c.rms_eps)
        if any(self._mm8(L[n].qtype) for n in ("wq", "wk", "wv", "wg")):
            self._quantize_src(P, self.xn, d, f"{i}.qkv")
        qkv_dim = (nh + 2 * nkv) * hd
        for w, y_off, name in ((L["wq"], 0, "q"), (L["wk"], nh * hd, "k"), (L["wv"], (nh + nkv) * hd, "v")):
            self._product(P, w, self.xn, d, w.rows, self.qkv, qkv_dim, y_off, f"{i}.{name}")
        self._product(P, L["wg"], self.xn, d, nh * hd, self.gate, nh * hd, 0, f"{i}.gate")
        self._rope(P, i, L, lambda n, kv: ops.rope_groups(n, nh, nkv), nh)
        ap = dict(self._attn_params(0), n_splits=lambda n, kv: ops.attn_prefill_splits(kv))
        P.add(ops.attn_prefill(ks, hd, self.kv_f16), [self.q, self.kv.kv.k[s], self.kv.kv.v[s], self.ppart, self.step],
              lambda n, kv: ops.attn_prefill_groups(n, nh, ops.attn_prefill_splits(kv), hd), f"{i}.attn", **ap)
        P.add(ops.attn_prefill_combine(ks, hd), [self.ppart, self.att], lambda n, kv: ops.rows_groups(n * nh),
              f"{i}.combine", **ap)
        self._sigmoid_gate(P, i, self.gate, 0)
        self._prefill_proj(P, L["wo"], self.att, nh * hd, None, None, f"{i}.o")

    # ------------------------------------------------------------------ running
    def greedy_steps(self, tok: int, pos: int, max_steps: int):
        """As GpuBackend's (one step in flight), the recurrent buffers copied on the GPU before each
        step that runs ahead of the consumer and copied back if it stops there (50 MB each way on a
        Qwen3.5-4B shape); HEARTH_GPU_HYBRID_PIPELINE=0: a step at a time, nothing copied."""
        if self.pipelined:
            yield from super().greedy_steps(tok, pos, max_steps)
            return
        for j in range(max_steps):
            if pos + j >= self.kv.max_ctx:
                return
            tok = self.forward_argmax([tok], pos + j)
            yield tok

    def _state_pairs(self):
        kv = self.kv
        if self._backup is None:
            self._backup = [self.dev.buffer(b.size, "state-backup") for b in kv.conv + kv.delta]
        return list(zip(kv.conv + kv.delta, self._backup))

    def _before_step_in_flight(self) -> None:
        enc = self.dev.device.create_command_encoder()
        for live, copy in self._state_pairs():
            enc.copy_buffer_to_buffer(live, 0, copy, 0, live.size)
        self.dev.submit(enc)

    def _after_step_in_flight(self) -> None:
        enc = self.dev.device.create_command_encoder()
        for live, copy in self._state_pairs():
            enc.copy_buffer_to_buffer(copy, 0, live, 0, live.size)
        self.dev.submit(enc)

    def warm_up(self) -> None:
        try:
            super().warm_up()
        finally:
            self.kv.clear()

    def close(self) -> None:
        for b in getattr(self, "_backup", None) or []:
            b.destroy()
        self._backup = None
        if isinstance(getattr(self, "kv", None), GpuHybridState):
            self.kv.destroy()
            self.kv = None
        super().close()
