"""One GGML block at a time: its dot product with quantized activations, and its float32 values.

The block layouts are the ones documented in engine/quants.py (the numpy reference). For each type:
    dot_T(w, o, x, xs, xb, a0, a1) -> (a0, a1)
        adds the block at byte `o` of the weight row `w` (uint8), times the activations, to the
        accumulators (F32x8); xb is the index of the block's first 32 activations (x[32 xb:]).
    deq_T(w, o, out, oo)
        writes the block's weights as float32 to out[oo:oo + block_size], equal to the reference.
Activations are float32: x [n], and xs [n / 16] (sums of x per 16, for the types with offsets,
whose offset term is m * sum(x)). A block's integer weights are converted to float32 in
registers, multiplied by x, and the products scaled by the block's scale; the 8 lanes are summed
only at the end of a row.
This is the exact float path (prefill tiles dequantize with deq_T; decode with float32 x, the
reference the consistency tests use); one-token passes by default multiply with 8-bit x instead
(engine/cpu/blocks_int8.py), as llama.cpp does. Why prefill stays float: a quantized activation
turns the float rounding noise between a batched and a one-token pass into whole quantization
steps where a value sits near a rounding boundary (even with 16 bits the logits of a chunked
prefill moved 70x more, 3e-3 on SmolLM2, than with float activations, 5e-5).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .simd import (add_lane0, bit_fields, f16_at, fadd, fdot32, fma_s, fzero, hi_nibbles, lo_nibbles, signed_bytes,
                   store_deq, u32_at, u32_bits, vaddc, vmulc, vor, vshl)

inline = njit(inline="always", nogil=True, cache=True)


@inline
def _i8(u):
    """A uint8 read as int8."""
    return (np.int64(u) ^ 128) - 128


# --- the 32-weight types ------------------------------------------------------------------------

@inline
def _pair(a, q0, q1, x, xb, s):
    """a + (q0 . x[32 xb:+16] + q1 . x[32 xb + 16:+16]) * s."""
    return fma_s(a, fdot32(q0, q1, x, xb * 32), s)


# Q4_0: d f16 | qs[16]; w = d * (nibble - 8)
@inline
def dot_q4_0(w, o, x, xs, xb, a0, a1):
    q0 = vaddc(lo_nibbles(w, o + 2), -8)
    q1 = vaddc(hi_nibbles(w, o + 2), -8)
    return _pair(a0, q0, q1, x, xb, f16_at(w, o)), a1


@inline
def deq_q4_0(w, o, out, oo):
    d = f16_at(w, o)
    store_deq(out, oo, vaddc(lo_nibbles(w, o + 2), -8), d, 0.0)
    store_deq(out, oo + 16, vaddc(hi_nibbles(w, o + 2), -8), d, 0.0)


# Q4_1: d f16 | m f16 | qs[16]; w = d * nibble + m
@inline
def dot_q4_1(w, o, x, xs, xb, a0, a1):
    a0 = _pair(a0, lo_nibbles(w, o + 4), hi_nibbles(w, o + 4), x, xb, f16_at(w, o))
    return add_lane0(a0, f16_at(w, o + 2) * (xs[2 * xb] + xs[2 * xb + 1])), a1


@inline
def deq_q4_1(w, o, out, oo):
    d, m = f16_at(w, o), f16_at(w, o + 2)
    store_deq(out, oo, lo_nibbles(w, o + 4), d, m)
    store_deq(out, oo + 16, hi_nibbles(w, o + 4), d, m)


@inline
def _q5(w, qh_at, qs_at):
    """The 5-bit values of Q5_0/Q5_1: nibbles | bit j of the u32 qh << 4, as two I16x16."""
    qh = u32_at(w, qh_at)
    q0 = vor(lo_nibbles(w, qs_at), vshl(u32_bits(qh, 0), 4))
    q1 = vor(hi_nibbles(w, qs_at), vshl(u32_bits(qh, 16), 4))
    return q0, q1


# Q5_0: d f16 | qh u32 | qs[16]; w = d * (q - 16)
@inline
def dot_q5_0(w, o, x, xs, xb, a0, a1):
    q0, q1 = _q5(w, o + 2, o + 6)
    return _pair(a0, vaddc(q0, -16), vaddc(q1, -16), x, xb, f16_at(w, o)), a1


@inline
def deq_q5_0(w, o, out, oo):
    q0, q1 = _q5(w, o + 2, o + 6)
    d = f16_at(w, o)
    store_deq(out, oo, vaddc(q0, -16), d, 0.0)
    store_deq(out, oo + 16, vaddc(q1, -16), d, 0.0)


# Q5_1: d f16 | m f16 | qh u32 | qs[16]; w = d * q + m
@inline
def dot_q5_1(w, o, x, xs, xb, a0, a1):
    q0, q1 = _q5(w, o + 4, o + 8)
    a0 = _pair(a0, q0, q1, x, xb, f16_at(w, o))
    return add_lane0(a0, f16_at(w, o + 2) * (xs[2 * xb] + xs[2 * xb + 1])), a1


@inline
def deq_q5_1(w, o, out, oo):
    q0, q1 = _q5(w, o + 4, o + 8)
    d, m = f16_at(w, o), f16_at(w, o + 2)
    store_deq(out, oo, q0, d, m)
    store_deq(out, oo + 16, q1, d, m)


# Q8_0: d f16 | qs int8[32]; w = d * q
@inline
def dot_q8_0(w, o, x, xs, xb, a0, a1):
    return _pair(a0, signed_bytes(w, o + 2), signed_bytes(w, o + 18), x, xb, f16_at(w, o)), a1


@inline
def deq_q8_0(w, o, out, oo):
    d = f16_at(w, o)
    store_deq(out, oo, signed_bytes(w, o + 2), d, 0.0)
    store_deq(out, oo + 16, signed_bytes(w, o + 18), d, 0.0)


# --- the K-quants (256 weights) -----------------------------------------------------------------

@inline
def _k_scale_min(w, s, j):
    """Q4_K/Q5_K: 6-bit scale and min of sub-block j from the 12 bytes at s."""
    if j < 4:
        return np.int64(w[s + j]) & 63, np.int64(w[s + j + 4]) & 63
    a, b, c = np.int64(w[s + j + 4]), np.int64(w[s + j - 4]), np.int64(w[s + j])
    return (a & 15) | ((b >> 6) << 4), (a >> 4) | ((c >> 6) << 4)


# Q4_K: d f16 | dmin f16 | scales[12] | qs[128]; sub-block 2j = low nibbles of qs[32j:32j+32],
# 2j + 1 = their high nibbles; w = d * sc * q - dmin * m
@inline
def dot_q4_k(w, o, x, xs, xb, a0, a1):
    d, dmin = f16_at(w, o), f16_at(w, o + 2)
    mins = np.float32(0.0)
    for j in range(4):
        g = o + 16 + 32 * j
        for h in range(2):
            i = 2 * j + h
            sc, mn = _k_scale_min(w, o + 4, i)
            if h == 0:
                q0, q1 = lo_nibbles(w, g), lo_nibbles(w, g + 16)
                a0 = _pair(a0, q0, q1, x, xb + i, d * np.float32(sc))
            else:
                q0, q1 = hi_nibbles(w, g), hi_nibbles(w, g + 16)
                a1 = _pair(a1, q0, q1, x, xb + i, d * np.float32(sc))
            mins += np.float32(mn) * (xs[2 * (xb + i)] + xs[2 * (xb + i) + 1])
    return add_lane0(a0, -dmin * mins), a1


@inline
def deq_q4_k(w, o, out, oo):
    d, dmin = f16_at(w, o), f16_at(w, o + 2)
    for j in range(4):
        g = o + 16 + 32 * j
        sc, mn = _k_scale_min(w, o + 4, 2 * j)
        s, m = d * sc, -(dmin * mn)
        store_deq(out, oo + 64 * j, lo_nibbles(w, g), s, m)
        store_deq(out, oo + 64 * j + 16, lo_nibbles(w, g + 16), s, m)
        sc, mn = _k_scale_min(w, o + 4, 2 * j + 1)
        s, m = d * sc, -(dmin * mn)
        store_deq(out, oo + 64 * j + 32, hi_nibbles(w, g), s, m)
        store_deq(out, oo + 64 * j + 48, hi_nibbles(w, g + 16), s, m)


@inline
def _q5_k(w, o, i):
    """Q5_K sub-block i as two I16x16: its nibbles | bit i of qh[l] << 4."""
    g = o + 48 + 32 * (i // 2)
    if i % 2 == 0:
        n0, n1 = lo_nibbles(w, g), lo_nibbles(w, g + 16)
    else:
        n0, n1 = hi_nibbles(w, g), hi_nibbles(w, g + 16)
    return vor(n0, vshl(bit_fields(w, o + 16, i, 1), 4)), vor(n1, vshl(bit_fields(w, o + 32, i, 1), 4))


# Q5_K: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; as Q4_K plus bit i of qh[l] as bit 4 of
# weight l of sub-block i
@inline
def dot_q5_k(w, o, x, xs, xb, a0, a1):
    d, dmin = f16_at(w, o), f16_at(w, o + 2)
    mins = np.float32(0.0)
    for i in range(8):
        sc, mn = _k_scale_min(w, o + 4, i)
        q0, q1 = _q5_k(w, o, i)
        if i % 2 == 0:
            a0 = _pair(a0, q0, q1, x, xb + i, d * np.float32(sc))
        else:
            a1 = _pair(a1, q0, q1, x, xb + i, d * np.float32(sc))
        mins += np.float32(mn) * (xs[2 * (xb + i)] + xs[2 * (xb + i) + 1])
    return add_lane0(a0, -dmin * mins), a1


@inline
def deq_q5_k(w, o, out, oo):
    d, dmin = f16_at(w, o), f16_at(w, o + 2)
    for i in range(8):
        sc, mn = _k_scale_min(w, o + 4, i)
        s, m = d * sc, -(dmin * mn)
        q0, q1 = _q5_k(w, o, i)
        store_deq(out, oo + 32 * i, q0, s, m)
        store_deq(out, oo + 32 * i + 16, q1, s, m)


@inline
def _q6_k(w, o, h, k):
    """Q6_K weights h*128 + k*32 + [0, 32) as two I16x16 of q - 32."""
    lo = o + h * 64 + (k % 2) * 32
    hb = o + 128 + h * 32
    if k < 2:
        n0, n1 = lo_nibbles(w, lo), lo_nibbles(w, lo + 16)
    else:
        n0, n1 = hi_nibbles(w, lo), hi_nibbles(w, lo + 16)
    q0 = vor(n0, vshl(bit_fields(w, hb, 2 * k, 3), 4))
    q1 = vor(n1, vshl(bit_fields(w, hb + 16, 2 * k, 3), 4))
    return vaddc(q0, -32), vaddc(q1, -32)


# Q6_K: ql[128] | qh[64] | scales int8[16] | d f16; w = d * scale * (q - 32), scale per 16 weights
@inline
def _k16(p0, p1, x, xb, h, k):
    """Products of the K-quant weights h*128 + k*32 + [0, 32) (already times their 16-weight
    scales) with x."""
    return fdot32(p0, p1, x, (xb + h * 4 + k) * 32)


# The 16-weight scales of Q6_K, Q3_K and Q2_K multiply the integer weights (one int16 multiply per 16
# lanes) so that each 32 weights need one float product; the block's d scales the sum once.
@inline
def dot_q6_k(w, o, x, xs, xb, a0, a1):
    b0, b1 = fzero(), fzero()
    for h in range(2):
        for k in range(4):
            q0, q1 = _q6_k(w, o, h, k)
            sub = o + 192 + h * 8 + k * 2
            p = _k16(vmulc(q0, _i8(w[sub])), vmulc(q1, _i8(w[sub + 1])), x, xb, h, k)
            if k % 2 == 0:
                b0 = fadd(b0, p)
            else:
                b1 = fadd(b1, p)
    d = f16_at(w, o + 208)
    return fma_s(a0, b0, d), fma_s(a1, b1, d)


@inline
def deq_q6_k(w, o, out, oo):
    d = f16_at(w, o + 208)
    for h in range(2):
        for k in range(4):
            q0, q1 = _q6_k(w, o, h, k)
            sub = h * 8 + k * 2
            e = oo + h * 128 + k * 32
            store_deq(out, e, q0, d * _i8(w[o + 192 + sub]), 0.0)
            store_deq(out, e + 16, q1, d * _i8(w[o + 193 + sub]), 0.0)


# Q2_K: scales[16] | qs[64] | d f16 | dmin f16; weight h*128 + k*32 + l is 2-bit field k of
# qs[h*32 + l]; scales[i] (i = h*8 + k*2 + l//16): low nibble scale, high nibble min;
# w = d * sc * q - dmin * m
@inline
def dot_q2_k(w, o, x, xs, xb, a0, a1):
    b0, b1 = fzero(), fzero()
    mins = np.float32(0.0)
    for h in range(2):
        for k in range(4):
            g = o + 16 + h * 32
            sub, e = h * 8 + k * 2, (xb + h * 4 + k) * 2
            s0, s1 = np.int64(w[o + sub]), np.int64(w[o + sub + 1])
            p = _k16(vmulc(bit_fields(w, g, 2 * k, 3), s0 & 15), vmulc(bit_fields(w, g + 16, 2 * k, 3), s1 & 15),
                     x, xb, h, k)
            if k % 2 == 0:
                b0 = fadd(b0, p)
            else:
                b1 = fadd(b1, p)
            mins += np.float32(s0 >> 4) * xs[e] + np.float32(s1 >> 4) * xs[e + 1]
    d, dmin = f16_at(w, o + 80), f16_at(w, o + 82)
    return add_lane0(fma_s(a0, b0, d), -dmin * mins), fma_s(a1, b1, d)


@inline
def deq_q2_k(w, o, out, oo):
    d, dmin = f16_at(w, o + 80), f16_at(w, o + 82)
    for h in range(2):
        for k in range(4):
            g = o + 16 + h * 32
            sub, e = h * 8 + k * 2, oo + h * 128 + k * 32
            s0, s1 = np.int64(w[o + sub]), np.int64(w[o + sub + 1])
            store_deq(out, e, bit_fields(w, g, 2 * k, 3), d * (s0 & 15), -(dmin * (s0 >> 4)))
            store_deq(out, e + 16, bit_fields(w, g + 16, 2 * k, 3), d * (s1 & 15), -(dmin * (s1 >> 4)))


@inline
def _q3_scale(w, s, i):
    """Q3_K: the signed 6-bit scale i of the 12 bytes at s."""
    if i < 8:
        lo = np.int64(w[s + i]) & 15
    else:
        lo = np.int64(w[s + i - 8]) >> 4
    hi = (np.int64(w[s + 8 + i % 4]) >> (2 * (i // 4))) & 3
    return (lo | (hi << 4)) - 32


@inline
def _q3_k(w, o, h, k):
    """Q3_K weights h*128 + k*32 + [0, 32): 2 bits of qs, minus 4 where the hmask bit is clear."""
    g = o + 32 + h * 32
    b = h * 4 + k
    q0 = vor(bit_fields(w, g, 2 * k, 3), vshl(bit_fields(w, o, b, 1), 2))
    q1 = vor(bit_fields(w, g + 16, 2 * k, 3), vshl(bit_fields(w, o + 16, b, 1), 2))
    return vaddc(q0, -4), vaddc(q1, -4)


# Q3_K: hmask[32] | qs[64] | scales[12] | d f16; w = d * (scale - 32) * q, q in -4..3
@inline
def dot_q3_k(w, o, x, xs, xb, a0, a1):
    b0, b1 = fzero(), fzero()
    for h in range(2):
        for k in range(4):
            q0, q1 = _q3_k(w, o, h, k)
            sub = h * 8 + k * 2
            p = _k16(vmulc(q0, _q3_scale(w, o + 96, sub)), vmulc(q1, _q3_scale(w, o + 96, sub + 1)), x, xb, h, k)
            if k % 2 == 0:
                b0 = fadd(b0, p)
            else:
                b1 = fadd(b1, p)
    d = f16_at(w, o + 108)
    return fma_s(a0, b0, d), fma_s(a1, b1, d)


@inline
def deq_q3_k(w, o, out, oo):
    d = f16_at(w, o + 108)
    for h in range(2):
        for k in range(4):
            q0, q1 = _q3_k(w, o, h, k)
            sub, e = h * 8 + k * 2, oo + h * 128 + k * 32
            store_deq(out, e, q0, d * _q3_scale(w, o + 96, sub), 0.0)
            store_deq(out, e + 16, q1, d * _q3_scale(w, o + 96, sub + 1), 0.0)
