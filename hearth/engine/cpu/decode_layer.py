"""One decoded token through a run of transformer layers in one compiled call.

Why: a one-token pass on a small model is mostly the interpreter's work between the kernels. On
SmolLM2-135M each of the 30 layers made ~40 Python-level calls (norms, quantizations, products,
RoPE, the K/V store, the attention's pieces, SiLU, residuals), ~4 us each: ~5 ms of a ~12 ms token
(bench/README.md). Here a layer is one numba function; only its products and its attention run as
parallel loops (rows of the products, query heads of the attention), everything between them on
the calling thread.

    decode_layers(l0, l1, wb, meta, types, scales, norms, qk_norm, bias, dims, eps, x, kb, vb, pos,
                  cos, sin, scores)
        layers [l0, l1) for one token: x float32 [d] (the residual stream, updated in place);
        wb: the mapped GGUF file's bytes (uint8), meta int64 [L, 7, 3]: where each layer's 7
        matrices q, k, v, o, gate, up, down lie in it (byte offset, rows, bytes per row);
        types int64 [L, 7] (TYPE_CODES);
        scales float32 [L, 7] (each matrix's output scale: q's carries the attention scale);
        norms float32 [L, 2, d] (attention and FFN RMSNorm weights); qk_norm float32
        [L, nh + nkv, hd] (qwen3) and bias float32 [L, (nh + 2 nkv) hd] (qwen2), each used where
        dims says so; dims int64 [9]: nh, nkv, hd, n_ff, n_rot, neox, has_bias, has_qk_norm,
        f16 (the cache's dtype); kb, vb: the K/V cache's bytes, uint8 [L, nkv, max_ctx,
        hd * itemsize], the token's K/V stored at pos (float16 rounded to nearest even); cos, sin
        float32 [n_rot / 2] for pos; scores float32 [>= nh * (pos + 1)] scratch.

The arithmetic is the one-token path's of engine/models/decoder.py: x quantized to 8 bits as
llama.cpp does (kernels_int8's quantizers) for quantized matrices, float32 x for F32/F16/BF16 ones,
each row summed by the same block code in the same order as kernels_int8 / kernels (so the products
are bit for bit theirs); RMSNorm, RoPE and SiLU x up are engine/cpu/rows.py's row functions and the
attention engine/cpu/attention.py's, which the per-operation path calls too: both paths give the
same bits (tests/test_cpu_decode_layer.py). Every split is by rows or heads, so one and several
threads give the same bits. The four products of a layer run from one call site (a loop of four
steps): each call site of `_product`, a parallel loop over a switch of 13 types' block code, adds
~16 s to the first compile (bench/README.md).
"""

from __future__ import annotations


import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from . import blocks_int8 as B8
from . import kernels as K
from . import kernels_iq as KQ
from .attention import PARALLEL_ATTENTION_FROM, attend_heads, attend_serial
from .kernels_int8 import quantize_q8_0, quantize_q8_k
from .rows import rms_row, rope_head, silu_mul_row
from .simd import F32, _ptr, fadd, fma_i, fsum, fzero

jit = njit(nogil=True, cache=True)
pjit = njit(nogil=True, cache=True, parallel=True)
inline = njit(inline="always", nogil=True, cache=True)

# Matrix type codes (`types`): the ten quantized types (8-bit x), then the float ones (float32 x).
TYPE_CODES = {"Q4_0": 0, "Q4_1": 1, "Q5_0": 2, "Q5_1": 3, "Q8_0": 4, "Q2_K": 5, "Q3_K": 6, "Q4_K": 7,
              "Q5_K": 8, "Q6_K": 9, "F32": 10, "F16": 11, "BF16": 12}
_FIRST_K, _LAST_K, _FIRST_FLOAT = 5, 9, 10
# The i-quants and MXFP4 (engine/cpu/kernels_iq.py): code 13 + their kind there; kinds 6 and 7
# (IQ4_NL, MXFP4) read x as Q8_0, the rest as Q8_K.
TYPE_CODES.update({name: 13 + v[0] for name, v in KQ.LAYOUT.items()})
_FIRST_IQ = 13
_IQ_BW = np.array([KQ.LAYOUT[n][1] for n in sorted(KQ.LAYOUT, key=lambda n: KQ.LAYOUT[n][0])], np.int64)
_IQ_BB = np.array([KQ.LAYOUT[n][2] for n in sorted(KQ.LAYOUT, key=lambda n: KQ.LAYOUT[n][0])], np.int64)
# The matrices of a layer, in `meta` order, and the products they form: [first, end) of each.
QKV, O, GATE_UP, DOWN = (0, 3), (3, 4), (4, 6), (6, 7)


@intrinsic
def put_f16(typingctx, arr, off, v):
    """The float32 v stored as float16 (rounded to nearest even) at byte offset off of a uint8 array."""
    def codegen(context, builder, sig, args):
        h = builder.fptrunc(args[2], ir.HalfType())
        builder.store(h, _ptr(context, builder, sig.args[0], args[0], args[1], ir.HalfType()), align=1)
        return context.get_dummy_value()
    return types.void(arr, off, types.float32), codegen


@intrinsic
def put_f32(typingctx, arr, off, v):
    """The float32 v stored at byte offset off of a uint8 array."""
    def codegen(context, builder, sig, args):
        builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], F32), align=1)
        return context.get_dummy_value()
    return types.void(arr, off, types.float32), codegen


# --- one row of a product: the loops of kernels_int8.matvec_T / kernels.matvec_T ------------------

@inline
def _dot_row(t, row, x, q0, d0, s0, qk, dk, sk):
    """Row `row` (uint8 bytes of type code t) times the input: 8-bit codes q0/d0/s0 (Q8_0/Q8_1) or
    qk/dk/sk (Q8_K) for quantized types, float32 x for the float ones. Not yet scaled."""
    a0, a1, tt = fzero(), fzero(), np.float32(0.0)
    if t >= _FIRST_IQ:   # the loop of kernels_iq.matvec8_T, so the same bits
        kind = t - _FIRST_IQ
        bw, bb = _IQ_BW[kind], _IQ_BB[kind]
        c64 = np.empty(32, np.uint64)
        codes = c64.view(np.uint8)
        ls, ls8 = np.empty(8, np.int32), np.empty(16, np.int8)
        q8k = kind < 6
        for b in range(row.shape[0] // bb):
            if q8k:
                acc, d = KQ._block8(kind, row, b * bb, qk, b * bw, c64, codes, ls, ls8)
                a0 = fma_i(a0, acc, d * dk[b])
            else:
                acc, d = KQ._block8(kind, row, b * bb, q0, b * bw, c64, codes, ls, ls8)
                a0 = fma_i(a0, acc, d * d0[b])
            a0, a1 = a1, a0
        return fsum(fadd(a0, a1))
    if t == 1:
        for b in range(row.shape[0] // 20):
            a0, tt = B8.dot_q4_1(row, b * 20, q0, d0, s0, b, a0, tt)
            a0, a1 = a1, a0
        return fsum(fadd(a0, a1)) + tt
    if t == 0:
        for b in range(row.shape[0] // 18):
            a0, a1 = B8.dot_q4_0(row, b * 18, q0, d0, s0, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 4:
        for b in range(row.shape[0] // 34):
            a0, a1 = B8.dot_q8_0(row, b * 34, q0, d0, s0, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 7:
        for b in range(row.shape[0] // 144):
            a0, a1 = B8.dot_q4_k(row, b * 144, qk, dk, sk, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 9:
        for b in range(row.shape[0] // 210):
            a0, a1 = B8.dot_q6_k(row, b * 210, qk, dk, sk, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 2:
        for b in range(row.shape[0] // 22):
            a0, a1 = B8.dot_q5_0(row, b * 22, q0, d0, s0, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 3:
        for b in range(row.shape[0] // 24):
            a0, tt = B8.dot_q5_1(row, b * 24, q0, d0, s0, b, a0, tt)
            a0, a1 = a1, a0
        return fsum(fadd(a0, a1)) + tt
    elif t == 8:
        for b in range(row.shape[0] // 176):
            a0, a1 = B8.dot_q5_k(row, b * 176, qk, dk, sk, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 6:
        for b in range(row.shape[0] // 110):
            a0, a1 = B8.dot_q3_k(row, b * 110, qk, dk, sk, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 5:
        for b in range(row.shape[0] // 84):
            a0, a1 = B8.dot_q2_k(row, b * 84, qk, dk, sk, b, a0, a1)
            a0, a1 = a1, a0
    elif t == 10:   # the float rows as the per-operation kernels (engine/cpu/kernels.py): the same bits
        return K.row_f32(row, x)
    elif t == 11:
        return K.row_f16(row, x)
    else:
        return K.row_bf16(row, x)
    return fsum(fadd(a0, a1))


@pjit
def _product(wb, ml, tl, sl, m0, m1, x, q0, d0, s0, qk, dk, sk, out):
    """out = the matrices m0..m1-1 of a layer (ml [7, 3]: byte offset in wb, rows, bytes per row)
    stacked, times the input (rows over all threads)."""
    n = 0
    for m in range(m0, m1):
        n += ml[m, 1]
    for g in prange(n):
        m, r = m0, np.int64(g)
        while r >= ml[m, 1]:
            r -= ml[m, 1]
            m += 1
        o, rb = ml[m, 0] + r * ml[m, 2], ml[m, 2]
        out[g] = _dot_row(tl[m], wb[o:o + rb], x, q0, d0, s0, qk, dk, sk) * sl[m]


@inline
def _quantize(tl, m0, m1, x, q0, d0, s0, qk, dk, sk):
    """x's 8-bit blocks for the quantized matrices among tl[m0:m1] (Q8_0/Q8_1 and/or Q8_K)."""
    k = x.shape[0]
    want0 = wantk = False
    for m in range(m0, m1):
        t = tl[m]
        if t < _FIRST_K or t == _FIRST_IQ + 6 or t == _FIRST_IQ + 7:
            want0 = True
        elif t <= _LAST_K or t >= _FIRST_IQ:
            wantk = True
    if want0:
        quantize_q8_0(x, q0[:k], d0[:k // 32], s0[:k // 32])
    if wantk:
        quantize_q8_k(x, qk[:k], dk[:k // 256], sk[:k // 16])


# --- the layers --------------------------------------------------------------------------------

@jit
def decode_layers(l0, l1, wb, meta, types, scales, norms, qk_norm, bias, dims, eps, x, kb, vb, pos, cos, sin, scores):
    nh, nkv, hd, n_ff, n_rot, neox = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    has_bias, has_qk_norm, f16 = dims[6] != 0, dims[7] != 0, dims[8] != 0
    d = x.shape[0]
    rep = nh // nkv
    n_qkv = (nh + 2 * nkv) * hd
    k_max = max(d, nh * hd, n_ff)
    # Zeros, so that a matrix given no rows (a profile without the products) multiplies to 0.
    h = np.zeros(d, np.float32)                          # normed residual
    qkv = np.zeros(n_qkv, np.float32)                    # q heads, k heads, v heads (rotated in place)
    att = np.zeros(nh * hd, np.float32)                  # attention output
    o = np.zeros(d, np.float32)                          # o / down product
    gu = np.zeros(2 * n_ff, np.float32)                  # gate, then up
    act = np.zeros(n_ff, np.float32)                     # silu(gate) * up
    q0, d0, s0 = np.empty(k_max, np.int8), np.empty(k_max // 32, np.float32), np.empty(k_max // 32, np.float32)
    qk, dk, sk = np.empty(k_max, np.int8), np.empty(k_max // 256 + 1, np.float32), np.empty(k_max // 16, np.int32)
    es = 2 if f16 else 4
    T = pos + 1
    for l in range(l0, l1):
        ml, tl, sl = meta[l], types[l], scales[l]
        # Four steps, each some element-wise work then one product: one call site of _product
        # (each site links and optimizes its whole type switch again: ~16 s of compile time).
        for step in range(4):
            if step == 0:                                # attention norm; q/k/v next
                rms_row(x, norms[l, 0], eps, h)
                xin, out, m0, m1 = h, qkv, QKV[0], QKV[1]
            elif step == 1:                              # RoPE, K/V store, attention; o next
                if has_bias:                             # qwen2
                    for j in range(n_qkv):
                        qkv[j] += bias[l, j]
                for hh in range(nh + nkv):               # q heads, then k heads
                    base = hh * hd
                    if has_qk_norm:                      # qwen3 (q_norm carries the attention scale)
                        seg = qkv[base:base + hd]
                        rms_row(seg, qk_norm[l, hh], eps, seg)
                    rope_head(qkv, base, cos, sin, n_rot, neox)
                for g in range(nkv):                     # this position's K/V into the cache
                    krow, vrow = kb[l, g, pos], vb[l, g, pos]
                    ko, vo = (nh + g) * hd, (nh + nkv + g) * hd
                    for e in range(hd):
                        if f16:
                            put_f16(krow, e * es, qkv[ko + e])
                            put_f16(vrow, e * es, qkv[vo + e])
                        else:
                            put_f32(krow, e * es, qkv[ko + e])
                            put_f32(vrow, e * es, qkv[vo + e])
                if nh * T * hd * 2 >= PARALLEL_ATTENTION_FROM:   # over positions [0, pos]
                    attend_heads(qkv, kb[l], vb[l], f16, 0, T, nh, rep, hd, scores, att)
                else:
                    attend_serial(qkv, kb[l], vb[l], f16, 0, T, nh, rep, hd, scores, att)
                xin, out, m0, m1 = att, o, O[0], O[1]
            elif step == 2:                              # residual, FFN norm; gate/up next
                for j in range(d):
                    x[j] += o[j]
                rms_row(x, norms[l, 1], eps, h)
                xin, out, m0, m1 = h, gu, GATE_UP[0], GATE_UP[1]
            else:                                        # SiLU x up; down next
                silu_mul_row(gu[:n_ff], gu[n_ff:], act)
                xin, out, m0, m1 = act, o, DOWN[0], DOWN[1]
            _quantize(tl, m0, m1, xin, q0, d0, s0, qk, dk, sk)
            _product(wb, ml, tl, sl, m0, m1, xin, q0, d0, s0, qk, dk, sk, out)
        for j in range(d):
            x[j] += o[j]
