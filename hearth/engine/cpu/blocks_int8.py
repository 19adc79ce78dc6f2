"""One GGML block at a time: its dot product with 8-bit activations (llama.cpp's Q8_0/Q8_1/Q8_K,
engine/cpu/quant_activations.py), in integers.

For each quantized type:
    dot_T(w, o, xq, xd, xs, b, a0, a1) -> (a0, a1)
        adds the block at byte `o` of the weight row `w` (uint8), times the activations, to the
        float32 accumulators (F32x8); b is the block's index in the row. Q4_1 and Q5_1 take and
        return (a0, t) instead, t a float32 scalar for their offset terms.
Activations: xq int8 [n] the codes; for the 32-weight types xd float32 [n / 32] their scales and
xs float32 [n / 32] the block sums (max|x| / 127) * sum(q) rounded to float16 (the offset
term m * sum(x) of Q4_1 and Q5_1); for the K-quants xd float32 [n / 256] and xs int32 [n / 16]
the code sums per 16.
The arrangement is llama.cpp's AVX2 one (ggml_vec_dot_*_q8_*): 32 weights as bytes times 32 codes,
pairs summed in int16 (`mul_us`: pmaddubsw; signed weights through the sign trick, `mul_ss`), those
sums times the sub-block scales and summed in pairs into int32 (`scale_sum`: pmaddwd), the block's
int32 lanes converted to float32 once and scaled by the weight scale times the activation scale.
Unsigned weights (Q4_1, Q5_1, the K-quants' q) are multiplied as stored and their offsets applied
through sums of x: Q4_1/Q5_1's m * s, Q4_K/Q5_K/Q2_K's mins and Q6_K's -32 / Q3_K's -4 from the
code sums per 16.
Bounds, per type below: the int16 pair sums stay below 2^15 (pmaddubsw saturates), the int32 lanes
below 2^31.
"""

from __future__ import annotations

import numpy as np

from .blocks import inline
from .simd import (add8, bits_to_bytes, bytes32, f16_at, fma_i, fma_mins, field8, izero, mul_ss, mul_us,
                   nibbles32, or_shl8, pair_sum, q3_scales, scale_sum, scale_sum2_i8, scale_sum2_lo4, scale_sum_v,
                   sums_dot_hi4, sums_dot_i8, sums_dot_v, u32_at)


# --- the 32-weight types: one activation block per weight block ---------------------------------

# Q4_0: d f16 | qs[16]; w = d * (nibble - 8), -8..7 as int8 (|w| <= 8: pair sums <= 2,032)
@inline
def dot_q4_0(w, o, xq, xd, xs, b, a0, a1):
    p = pair_sum(mul_ss(add8(nibbles32(w, o + 2), -8), xq, b * 32))
    return fma_i(a0, p, f16_at(w, o) * xd[b]), a1


# Q4_1: d f16 | m f16 | qs[16]; w = d * nibble + m (nibbles 0..15: pair sums <= 3,810). The offset
# terms m * sum(x) go to the scalar t (a lane insert per block would lengthen the vector
# accumulator's dependency chain).
@inline
def dot_q4_1(w, o, xq, xd, xs, b, a0, t):
    p = pair_sum(mul_us(nibbles32(w, o + 4), xq, b * 32))
    return fma_i(a0, p, f16_at(w, o) * xd[b]), t + f16_at(w, o + 2) * xs[b]


@inline
def _q5(w, qh_at, qs_at):
    """The 5-bit values 0..31 of Q5_0/Q5_1: nibbles | bit j of the u32 qh << 4."""
    return or_shl8(nibbles32(w, qs_at), bits_to_bytes(u32_at(w, qh_at), 0), 4)


# Q5_0: d f16 | qh u32 | qs[16]; w = d * (q - 16), -16..15 as int8 (pair sums <= 4,064)
@inline
def dot_q5_0(w, o, xq, xd, xs, b, a0, a1):
    p = pair_sum(mul_ss(add8(_q5(w, o + 2, o + 6), -16), xq, b * 32))
    return fma_i(a0, p, f16_at(w, o) * xd[b]), a1


# Q5_1: d f16 | m f16 | qh u32 | qs[16]; w = d * q + m (q 0..31: pair sums <= 7,874)
@inline
def dot_q5_1(w, o, xq, xd, xs, b, a0, t):
    p = pair_sum(mul_us(_q5(w, o + 4, o + 8), xq, b * 32))
    return fma_i(a0, p, f16_at(w, o) * xd[b]), t + f16_at(w, o + 2) * xs[b]


# Q8_0: d f16 | qs int8[32]; w = d * q (|q| <= 128: pair sums <= 32,512 < 2^15)
@inline
def dot_q8_0(w, o, xq, xd, xs, b, a0, a1):
    p = pair_sum(mul_ss(bytes32(w, o + 2), xq, b * 32))
    return fma_i(a0, p, f16_at(w, o) * xd[b]), a1


# --- the K-quants: one Q8_K block (256 codes, one scale) per weight block ------------------------

@inline
def _k_scales(w, s):
    """Q4_K/Q5_K: the 8 6-bit scales and the 8 mins of the 12 bytes at s, one per byte of two
    uint64 (llama.cpp's branch-free unpacking: one branch per sub-block costs more than its products)."""
    u0, u1, u2 = u32_at(w, s), u32_at(w, s + 4), u32_at(w, s + 8)
    sc = (u0 & 0x3F3F3F3F) | (((u2 & 0x0F0F0F0F) | (((u0 >> 6) & 0x03030303) << 4)) << 32)
    mn = (u1 & 0x3F3F3F3F) | ((((u2 >> 4) & 0x0F0F0F0F) | (((u1 >> 6) & 0x03030303) << 4)) << 32)
    return sc, mn


# Q4_K: sub-block 2j = low nibbles of qs[32j:32j+32], 2j + 1 = their high nibbles;
# w = d * sc * q - dmin * m (q 0..15: pair sums <= 3,810; times sc <= 63, 8 sub-blocks: < 2^22)
@inline
def dot_q4_k(w, o, xq, xd, xs, b, a0, a1):
    sc, mn = _k_scales(w, o + 4)
    acc = izero()
    for j in range(4):
        v, e = bytes32(w, o + 16 + 32 * j), b * 256 + 64 * j
        acc = scale_sum(acc, mul_us(field8(v, 0, 15), xq, e), (sc >> (16 * j)) & 255)
        acc = scale_sum(acc, mul_us(field8(v, 4, 15), xq, e + 32), (sc >> (16 * j + 8)) & 255)
    dx = xd[b]
    return fma_i(a0, acc, f16_at(w, o) * dx), fma_mins(a1, mn, xs, b * 16, -(f16_at(w, o + 2) * dx))


# Q5_K: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; as Q4_K plus bit i of qh[l] as bit 4 of
# weight l of sub-block i (q 0..31: pair sums <= 7,874)
@inline
def dot_q5_k(w, o, xq, xd, xs, b, a0, a1):
    sc, mn = _k_scales(w, o + 4)
    qh = bytes32(w, o + 16)
    acc = izero()
    for j in range(4):
        v, e = bytes32(w, o + 48 + 32 * j), b * 256 + 64 * j
        acc = scale_sum(acc, mul_us(or_shl8(field8(v, 0, 15), field8(qh, 2 * j, 1), 4), xq, e), (sc >> (16 * j)) & 255)
        acc = scale_sum(acc, mul_us(or_shl8(field8(v, 4, 15), field8(qh, 2 * j + 1, 1), 4), xq, e + 32),
                        (sc >> (16 * j + 8)) & 255)
    dx = xd[b]
    return fma_i(a0, acc, f16_at(w, o) * dx), fma_mins(a1, mn, xs, b * 16, -(f16_at(w, o + 2) * dx))


# Q6_K: ql[128] | qh[64] | scales int8[16] | d f16; w = d * scale * (q - 32), a scale per 16
# weights; weight h*128 + k*32 + l: nibble k // 2 of ql[h*64 + (k % 2)*32 + l], bits 2k of
# qh[h*32 + l] above it. q taken as 0..63 (pair sums <= 16,002; times |scale| <= 128, 16 of them:
# < 2^26), the -32 from the code sums per 16 times the scales.
@inline
def _q6_half(w, o, xq, e, acc, h):
    """The products of weights h*128 .. h*128 + 127 (h a constant, as in _q3_half)."""
    qh = bytes32(w, o + 128 + h * 32)
    for k in range(4):
        v = bytes32(w, o + h * 64 + (k % 2) * 32)
        q = or_shl8(field8(v, 4 * (k // 2), 15), field8(qh, 2 * k, 3), 4)
        acc = scale_sum2_i8(acc, mul_us(q, xq, e + h * 128 + k * 32), w, o + 192 + h * 8 + k * 2)
    return acc


@inline
def dot_q6_k(w, o, xq, xd, xs, b, a0, a1):
    acc = _q6_half(w, o, xq, b * 256, sums_dot_i8(izero(), xs, b * 16, w, o + 192, -32), 0)
    acc = _q6_half(w, o, xq, b * 256, acc, 1)
    return fma_i(a0, acc, f16_at(w, o + 208) * xd[b]), a1


# Q3_K: hmask[32] | qs[64] | scales[12] | d f16; w = d * (scale - 32) * (q - 4); weight
# h*128 + k*32 + l: 2-bit field k of qs[h*32 + l], bit h*4 + k of hmask[l] above it. q taken as
# 0..7 (pair sums <= 1,778; times |scale - 32| <= 32, 16 of them: < 2^20), the -4 from the code
# sums per 16 times the scales.
@inline
def _q3_half(w, o, xq, e, acc, sc, hm, h):
    """The products of weights h*128 .. h*128 + 127 (h a constant: the shifts and scale lanes below
    are then constants, where a loop over h leaves them variables)."""
    v = bytes32(w, o + 32 + h * 32)
    for k in range(4):
        q = or_shl8(field8(v, 2 * k, 3), field8(hm, h * 4 + k, 1), 2)
        acc = scale_sum_v(acc, mul_us(q, xq, e + h * 128 + k * 32), sc, h * 8 + k * 2)
    return acc


@inline
def dot_q3_k(w, o, xq, xd, xs, b, a0, a1):
    sc = q3_scales(w, o + 96)
    hm = bytes32(w, o)
    acc = _q3_half(w, o, xq, b * 256, sums_dot_v(izero(), xs, b * 16, sc, -4), sc, hm, 0)
    acc = _q3_half(w, o, xq, b * 256, acc, sc, hm, 1)
    return fma_i(a0, acc, f16_at(w, o + 108) * xd[b]), a1


# Q2_K: scales[16] | qs[64] | d f16 | dmin f16; weight h*128 + k*32 + l is 2-bit field k of
# qs[h*32 + l]; scales[i] low nibble scale, high nibble min (i = h*8 + k*2 + l // 16);
# w = d * sc * q - dmin * m (q 0..3: pair sums <= 762)
@inline
def _q2_half(w, o, xq, e, acc, h):
    """The products of weights h*128 .. h*128 + 127 (h a constant, as in _q3_half)."""
    v = bytes32(w, o + 16 + h * 32)
    for k in range(4):
        acc = scale_sum2_lo4(acc, mul_us(field8(v, 2 * k, 3), xq, e + h * 128 + k * 32), w, o + h * 8 + k * 2)
    return acc


@inline
def dot_q2_k(w, o, xq, xd, xs, b, a0, a1):
    acc = _q2_half(w, o, xq, b * 256, _q2_half(w, o, xq, b * 256, izero(), 0), 1)
    dx = xd[b]
    mins = sums_dot_hi4(izero(), xs, b * 16, w, o, 1)
    return fma_i(a0, acc, f16_at(w, o + 80) * dx), fma_i(a1, mins, -(f16_at(w, o + 82) * dx))
