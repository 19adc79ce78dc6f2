"""One GGML block at a time: its dot product with 8-bit activations (llama.cpp's Q8_0/Q8_1/Q8_K,
engine/quant_activations.py), in integers.

For each quantized type:
    dot_T(w, o, xq, xd, xs, b, a0, a1) -> (a0, a1)
        adds the block at byte `o` of the weight row `w` (uint8), times the activations, to the
        float32 accumulators (F32x8); b is the block's index in the row. Q4_1 and Q5_1 take and
        return (a0, t) instead, t a float32 scalar for their offset terms.
Activations: xq int16 [n] the codes; for the 32-weight types xd float32 [n / 32] their scales and
xs float32 [n / 32] the block sums (max|x| / 127) * sum(q) rounded to float16 (the offset
term m * sum(x) of Q4_1 and Q5_1); for the K-quants xd float32 [n / 256] and xs int32 [n / 16] the code sums per 16.
A block's integer weights (times their sub-block scales, in int16, where the type has them) are
multiplied by the codes and summed in int32 (`madd`; Q4_K and Q5_K scale the int32 sums instead), converted to float32 once per block and
scaled by the weight scale times the activation scale: the arithmetic of llama.cpp's
ggml_vec_dot_*_q8_* up to the order of float additions.
Bounds: a weight times its sub-block scale is at most 4,096 in magnitude (Q6_K: 32 x 128), a code
127, so a block's int32 lanes stay below 2^25.
"""

from __future__ import annotations

import numpy as np

from .blocks import _i8, _q3_k, _q3_scale, _q5, _q5_k, _q6_k, inline
from .simd import (add_lane0, bit_fields, f16_at, fma_i, fma_mins, hi_nibbles, iadd, imac, izero, lo_nibbles, madd32, signed_bytes,
                   u32_at, vaddc, vmulc)


# --- the 32-weight types: one activation block per weight block ---------------------------------

# Q4_0: d f16 | qs[16]; w = d * (nibble - 8)
@inline
def dot_q4_0(w, o, xq, xd, xs, b, a0, a1):
    p = madd32(vaddc(lo_nibbles(w, o + 2), -8), vaddc(hi_nibbles(w, o + 2), -8), xq, b * 32)
    return fma_i(a0, p, f16_at(w, o) * xd[b]), a1


# Q4_1: d f16 | m f16 | qs[16]; w = d * nibble + m. The offset terms m * sum(x) go to the scalar t
# (a lane insert per block would lengthen the vector accumulator's dependency chain).
@inline
def dot_q4_1(w, o, xq, xd, xs, b, a0, t):
    p = madd32(lo_nibbles(w, o + 4), hi_nibbles(w, o + 4), xq, b * 32)
    return fma_i(a0, p, f16_at(w, o) * xd[b]), t + f16_at(w, o + 2) * xs[b]


# Q5_0: d f16 | qh u32 | qs[16]; w = d * (q - 16)
@inline
def dot_q5_0(w, o, xq, xd, xs, b, a0, a1):
    q0, q1 = _q5(w, o + 2, o + 6)
    p = madd32(vaddc(q0, -16), vaddc(q1, -16), xq, b * 32)
    return fma_i(a0, p, f16_at(w, o) * xd[b]), a1


# Q5_1: d f16 | m f16 | qh u32 | qs[16]; w = d * q + m
@inline
def dot_q5_1(w, o, xq, xd, xs, b, a0, t):
    q0, q1 = _q5(w, o + 4, o + 8)
    return fma_i(a0, madd32(q0, q1, xq, b * 32), f16_at(w, o) * xd[b]), t + f16_at(w, o + 2) * xs[b]


# Q8_0: d f16 | qs int8[32]; w = d * q
@inline
def dot_q8_0(w, o, xq, xd, xs, b, a0, a1):
    p = madd32(signed_bytes(w, o + 2), signed_bytes(w, o + 18), xq, b * 32)
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
# w = d * sc * q - dmin * m
@inline
def dot_q4_k(w, o, xq, xd, xs, b, a0, a1):
    sc, mn = _k_scales(w, o + 4)
    acc = izero()
    for j in range(4):
        g, e = o + 16 + 32 * j, b * 256 + 64 * j
        acc = imac(acc, madd32(lo_nibbles(w, g), lo_nibbles(w, g + 16), xq, e), (sc >> (16 * j)) & 255)
        acc = imac(acc, madd32(hi_nibbles(w, g), hi_nibbles(w, g + 16), xq, e + 32), (sc >> (16 * j + 8)) & 255)
    dx = xd[b]
    return fma_i(a0, acc, f16_at(w, o) * dx), fma_mins(a1, mn, xs, b * 16, -(f16_at(w, o + 2) * dx))


# Q5_K: as Q4_K plus bit i of qh[l] as bit 4 of weight l of sub-block i
@inline
def dot_q5_k(w, o, xq, xd, xs, b, a0, a1):
    sc, mn = _k_scales(w, o + 4)
    acc = izero()
    for i in range(8):
        q0, q1 = _q5_k(w, o, i)
        acc = imac(acc, madd32(q0, q1, xq, b * 256 + 32 * i), (sc >> (8 * i)) & 255)
    dx = xd[b]
    return fma_i(a0, acc, f16_at(w, o) * dx), fma_mins(a1, mn, xs, b * 16, -(f16_at(w, o + 2) * dx))


# Q6_K: w = d * scale * (q - 32), an int8 scale per 16 weights
@inline
def dot_q6_k(w, o, xq, xd, xs, b, a0, a1):
    acc = izero()
    for h in range(2):
        for k in range(4):
            q0, q1 = _q6_k(w, o, h, k)
            sub = o + 192 + h * 8 + k * 2
            acc = iadd(acc, madd32(vmulc(q0, _i8(w[sub])), vmulc(q1, _i8(w[sub + 1])), xq,
                                   b * 256 + h * 128 + k * 32))
    return fma_i(a0, acc, f16_at(w, o + 208) * xd[b]), a1


# Q3_K: w = d * (scale - 32) * q, q in -4..3
@inline
def dot_q3_k(w, o, xq, xd, xs, b, a0, a1):
    acc = izero()
    for h in range(2):
        for k in range(4):
            q0, q1 = _q3_k(w, o, h, k)
            sub = h * 8 + k * 2
            acc = iadd(acc, madd32(vmulc(q0, _q3_scale(w, o + 96, sub)), vmulc(q1, _q3_scale(w, o + 96, sub + 1)),
                                   xq, b * 256 + h * 128 + k * 32))
    return fma_i(a0, acc, f16_at(w, o + 108) * xd[b]), a1


# Q2_K: weight h*128 + k*32 + l is 2-bit field k of qs[h*32 + l]; scales[i] low nibble scale, high
# nibble min; w = d * sc * q - dmin * m
@inline
def dot_q2_k(w, o, xq, xd, xs, b, a0, a1):
    acc = izero()
    mins = 0
    for h in range(2):
        for k in range(4):
            g = o + 16 + h * 32
            sub = h * 8 + k * 2
            s0, s1 = np.int64(w[o + sub]), np.int64(w[o + sub + 1])
            acc = iadd(acc, madd32(vmulc(bit_fields(w, g, 2 * k, 3), s0 & 15), vmulc(bit_fields(w, g + 16, 2 * k, 3), s1 & 15),
                                   xq, b * 256 + h * 128 + k * 32))
            mins += (s0 >> 4) * np.int64(xs[b * 16 + sub]) + (s1 >> 4) * np.int64(xs[b * 16 + sub + 1])
    dx = xd[b]
    a0 = fma_i(a0, acc, f16_at(w, o + 80) * dx)
    return add_lane0(a0, -(f16_at(w, o + 82) * dx) * np.float32(mins)), a1
