// Dequantization of GGUF blocks read straight from a weight buffer `array<u32>` (the file's bytes,
// padded by 4 bytes so an unaligned read of the last word stays inside the buffer).
// `quant_fns(buf, qtype)` defines, for buffer `buf`:
//   fn {buf}_deq8(rowbase: u32, c: u32) -> Deq8
// the 8 consecutive weights [8c, 8c + 8) of the row starting at byte `rowbase`.
// Byte layouts (ggml):
//   F32   4 bytes/weight.            F16  2 bytes/weight (IEEE half).
//   Q4_0  18 B / 32: d f16 | qs u8[16]; weight j<16 = low nibble of qs[j], j+16 = high nibble; w = d*(q-8)
//   Q4_1  20 B / 32: d f16 | m f16 | qs u8[16] (nibbles as Q4_0); w = d*q + m
//   Q5_0  22 B / 32: d f16 | qh u32 | qs u8[16]; q = nibble | (bit j of qh) << 4; w = d*(q-16)
//   Q5_1  24 B / 32: d f16 | m f16 | qh u32 | qs u8[16]; q as Q5_0; w = d*q + m
//   Q8_0  34 B / 32: d f16 | qs i8[32]; w = d*q
//   Q4_K 144 B / 256: d f16 | dmin f16 | scales u8[12] (6-bit scale+min per 32) | qs u8[128];
//        64-weight chunk c uses qs[32c..32c+32]: sub-block 2c the low nibbles, 2c+1 the high;
//        w = d*sc*q - dmin*m
//   Q5_K 176 B / 256: as Q4_K plus qh u8[32] before qs; 5th bit of weight l in sub-block s = bit s of qh[l]
//   Q6_K 210 B / 256: ql u8[128] | qh u8[64] | sc i8[16] | d f16; per 128-weight half n and quarter k:
//        q = (nibble of ql[64n + l + 32(k&1)], shift 4(k>>1)) | ((qh[32n + l] >> 2k) & 3) << 4, minus 32;
//        w = d * sc[8n + l/16 + 2k] * q
//   Q2_K  84 B / 256: sc u8[16] (low nibble scale, high nibble min of 16 weights) | qs u8[64] | d f16 |
//        dmin f16; weight 128n + 32j + l: q = (qs[32n + l] >> 2j) & 3, sub-block 8n + 2j + l/16;
//        w = d*(sc&15)*q - dmin*(sc>>4)
//   Q3_K 110 B / 256: hmask u8[32] | qs u8[64] | sc u8[12] | d f16; weight 128n + 32j + l: low bits
//        as Q2_K, minus 4 when bit 4n + j of hmask[l] is clear; 6-bit scale s of sub-block i =
//        (sc[i & 7] >> 4(i >> 3)) & 15 | ((sc[8 + (i & 3)] >> 2(i >> 2)) & 3) << 4; w = d*(s-32)*q

struct Deq8 { lo: vec4<f32>, hi: vec4<f32> }

// Small integers become floats without integer-to-float conversions (a quarter-rate instruction on
// NVIDIA GPUs, and these kernels do one per weight): the bits 0x4B000000 | n are the float 2^23 + n
// exactly, so n - o = bitcast(0x4B000000 | n) - (2^23 + o), where M = 2^23 + o is the argument `m`.
const MAGIC: u32 = 0x4B000000u;
const M0: f32 = 8388608.0;            // 2^23

fn bytes4(t: u32, m: f32) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(t & 255u, (t >> 8u) & 255u, (t >> 16u) & 255u, t >> 24u) | vec4<u32>(MAGIC))
        - vec4<f32>(m);
}
// the nibbles (w >> sh) & 15 of each byte, minus o (m = 2^23 + o)
fn nib4(w: u32, sh: u32, m: f32) -> vec4<f32> {
    return bytes4((w >> sh) & 0x0F0F0F0Fu, m);
}
fn i8x4(w: u32) -> vec4<f32> {
    return bytes4(w ^ 0x80808080u, M0 + 128.0);       // bias the signed bytes to 0..255
}
// 2-bit fields (w >> sh) & 3 of each byte, as vec4
fn two4(w: u32, sh: u32) -> vec4<f32> {
    return bytes4((w >> sh) & 0x03030303u, M0);
}
// bits b..b+3 of qh, as 0/16 each
fn bits4(qh: u32, b: u32) -> vec4<f32> {
    let t = qh >> b;
    return bitcast<vec4<f32>>(vec4<u32>((t & 1u) << 4u, (t & 2u) << 3u, (t & 4u) << 2u, (t & 8u) << 1u) | vec4<u32>(MAGIC))
        - vec4<f32>(M0);
}

{% macro quant_fns(buf, qtype) %}
fn {{buf}}_u32(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    return ({{buf}}[i] >> s) | (({{buf}}[i + 1u] << (31u - s)) << 1u);
}
// 8 bytes from a 2-byte aligned offset: three word loads, no branch (a shift by 32 is avoided)
fn {{buf}}_u32x2(off: u32) -> vec2<u32> {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    let a = {{buf}}[i]; let b = {{buf}}[i + 1u]; let c = {{buf}}[i + 2u];
    return vec2<u32>((a >> s) | ((b << (31u - s)) << 1u), (b >> s) | ((c << (31u - s)) << 1u));
}
fn {{buf}}_f16(off: u32) -> f32 {
    return unpack2x16float({{buf}}[off >> 2u] >> ((off & 2u) * 8u)).x;
}
fn {{buf}}_u8(off: u32) -> u32 {
    return ({{buf}}[off >> 2u] >> ((off & 3u) * 8u)) & 255u;
}
fn {{buf}}_deq8(rowbase: u32, c: u32) -> Deq8 {
{% if qtype == "F32" %}
    let i = (rowbase >> 2u) + c * 8u;
    return Deq8(vec4<f32>(bitcast<f32>({{buf}}[i]), bitcast<f32>({{buf}}[i + 1u]),
                          bitcast<f32>({{buf}}[i + 2u]), bitcast<f32>({{buf}}[i + 3u])),
                vec4<f32>(bitcast<f32>({{buf}}[i + 4u]), bitcast<f32>({{buf}}[i + 5u]),
                          bitcast<f32>({{buf}}[i + 6u]), bitcast<f32>({{buf}}[i + 7u])));
{% elif qtype == "F16" %}
    let o = (rowbase >> 2u) + c * 4u;         // rows of a multiple of 32 weights: 4-byte aligned
    let a = {{buf}}[o]; let b = {{buf}}[o + 1u];
    let e = {{buf}}[o + 2u]; let f = {{buf}}[o + 3u];
    return Deq8(vec4<f32>(unpack2x16float(a), unpack2x16float(b)),
                vec4<f32>(unpack2x16float(e), unpack2x16float(f)));
{% elif qtype == "Q4_0" %}
    let base = rowbase + (c >> 2u) * 18u;
    let p = c & 3u;
    let d = {{buf}}_f16(base);
    let q = {{buf}}_u32x2(base + 2u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
    return Deq8(d * nib4(q.x, sh, M0 + 8.0), d * nib4(q.y, sh, M0 + 8.0));
{% elif qtype == "Q4_1" %}
    let base = rowbase + (c >> 2u) * 20u;
    let p = c & 3u;
    let dm = unpack2x16float({{buf}}[base >> 2u]);
    let o = (base + 4u + (p & 1u) * 8u) >> 2u;
    let sh = (p >> 1u) * 4u;
    return Deq8(dm.x * nib4({{buf}}[o], sh, M0) + dm.y, dm.x * nib4({{buf}}[o + 1u], sh, M0) + dm.y);
{% elif qtype == "Q5_0" %}
    let base = rowbase + (c >> 2u) * 22u;
    let p = c & 3u;
    let d = {{buf}}_f16(base);
    let qh = {{buf}}_u32(base + 2u);
    let q = {{buf}}_u32x2(base + 6u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
    let e0 = p * 8u;
    return Deq8(d * (nib4(q.x, sh, M0 + 16.0) + bits4(qh, e0)),
                d * (nib4(q.y, sh, M0 + 16.0) + bits4(qh, e0 + 4u)));
{% elif qtype == "Q5_1" %}
    let base = rowbase + (c >> 2u) * 24u;
    let p = c & 3u;
    let wi = base >> 2u;
    let dm = unpack2x16float({{buf}}[wi]);
    let qh = {{buf}}[wi + 1u];
    let o = wi + 2u + (p & 1u) * 2u;
    let sh = (p >> 1u) * 4u;
    let e0 = p * 8u;
    return Deq8(dm.x * (nib4({{buf}}[o], sh, M0) + bits4(qh, e0)) + dm.y,
                dm.x * (nib4({{buf}}[o + 1u], sh, M0) + bits4(qh, e0 + 4u)) + dm.y);
{% elif qtype == "Q8_0" %}
    let base = rowbase + (c >> 2u) * 34u;
    let d = {{buf}}_f16(base);
    let q = {{buf}}_u32x2(base + 2u + (c & 3u) * 8u);
    return Deq8(d * i8x4(q.x), d * i8x4(q.y));
{% elif qtype == "Q4_K" or qtype == "Q5_K" %}
{% set bb = 144 if qtype == "Q4_K" else 176 %}
{% set qs_off = 16 if qtype == "Q4_K" else 48 %}
    let base = rowbase + (c >> 5u) * {{bb}}u;
    let e0 = (c & 31u) * 8u;          // first weight within the super-block
    let sub = e0 >> 5u;               // sub-block 0..7
    let dm = unpack2x16float({{buf}}[base >> 2u]);
    let sc_base = base + 4u;
    // the 12 scale bytes as 3 words (no branch: the lanes of a warp read different sub-blocks)
    let s0 = {{buf}}[(sc_base >> 2u)]; let s1 = {{buf}}[(sc_base >> 2u) + 1u]; let s2 = {{buf}}[(sc_base >> 2u) + 2u];
    let j4 = (sub & 3u) * 8u;
    let b_a = (s0 >> j4) & 255u;                     // byte sub & 3
    let b_b = (s1 >> j4) & 255u;                     // byte 4 + (sub & 3)
    let b_c = (s2 >> j4) & 255u;                     // byte 8 + (sub & 3)
    let sc = select(b_a & 63u, (b_c & 15u) | ((b_a >> 6u) << 4u), sub >= 4u);
    let mn = select(b_b & 63u, (b_c >> 4u) | ((b_b >> 6u) << 4u), sub >= 4u);
    let l = e0 & 31u;
    let o = (base + {{qs_off}}u + (e0 >> 6u) * 32u + l) >> 2u;
    let sh = (sub & 1u) * 4u;
    let d = dm.x * f32(sc);
    let m = dm.y * f32(mn);
{% if qtype == "Q4_K" %}
    return Deq8(d * nib4({{buf}}[o], sh, M0) - m, d * nib4({{buf}}[o + 1u], sh, M0) - m);
{% else %}
    let oh = (base + 16u + l) >> 2u;
    let h0 = {{buf}}[oh]; let h1 = {{buf}}[oh + 1u];
    // bit `sub` of each byte of qh, moved to bit 4 (the 5th bit of q)
    let q0 = ((h0 >> sub) & 0x01010101u) << 4u | (({{buf}}[o] >> sh) & 0x0F0F0F0Fu);
    let q1 = ((h1 >> sub) & 0x01010101u) << 4u | (({{buf}}[o + 1u] >> sh) & 0x0F0F0F0Fu);
    return Deq8(d * bytes4(q0, M0) - m, d * bytes4(q1, M0) - m);
{% endif %}
{% elif qtype == "Q6_K" %}
    let base = rowbase + (c >> 5u) * 210u;
    let e0 = (c & 31u) * 8u;
    let n = e0 >> 7u;
    let r = e0 & 127u;
    let k = r >> 5u;
    let l = r & 31u;
    let d = {{buf}}_f16(base + 208u);
    let scb = {{buf}}_u8(base + 192u + 8u * n + (l >> 4u) + 2u * k);
    let s = d * f32(i32(scb << 24u) >> 24u);
    let ol = base + 64u * n + l + 32u * (k & 1u);
    let oh = base + 128u + 32u * n + l;
    let shl = (k >> 1u) * 4u;
    let shh = 2u * k;
    let ql = {{buf}}_u32x2(ol);
    let qh = {{buf}}_u32x2(oh);
    // q = nibble | 2 high bits << 4, minus 32
    let q0 = ((ql.x >> shl) & 0x0F0F0F0Fu) | (((qh.x >> shh) & 0x03030303u) << 4u);
    let q1 = ((ql.y >> shl) & 0x0F0F0F0Fu) | (((qh.y >> shh) & 0x03030303u) << 4u);
    return Deq8(s * bytes4(q0, M0 + 32.0), s * bytes4(q1, M0 + 32.0));
{% elif qtype == "Q2_K" %}
    let base = rowbase + (c >> 5u) * 84u;     // 4-byte aligned (84 = 4 * 21)
    let e0 = (c & 31u) * 8u;
    let n = e0 >> 7u;
    let j = (e0 >> 5u) & 3u;
    let l = e0 & 31u;
    let sc = {{buf}}_u8(base + 8u * n + 2u * j + (l >> 4u));
    let dm = unpack2x16float({{buf}}[(base + 80u) >> 2u]);
    let d = dm.x * f32(sc & 15u);
    let m = dm.y * f32(sc >> 4u);
    let o = (base + 16u + 32u * n + l) >> 2u;
    return Deq8(d * two4({{buf}}[o], 2u * j) - m, d * two4({{buf}}[o + 1u], 2u * j) - m);
{% elif qtype == "Q3_K" %}
    let base = rowbase + (c >> 5u) * 110u;    // 2-byte aligned
    let e0 = (c & 31u) * 8u;
    let n = e0 >> 7u;
    let j = (e0 >> 5u) & 3u;
    let l = e0 & 31u;
    let i = 8u * n + 2u * j + (l >> 4u);      // sub-block of 16 weights
    let lo4 = ({{buf}}_u8(base + 96u + (i & 7u)) >> (4u * (i >> 3u))) & 15u;
    let hi2 = ({{buf}}_u8(base + 104u + (i & 3u)) >> (2u * (i >> 2u))) & 3u;
    let s = {{buf}}_f16(base + 108u) * f32(i32(lo4 | (hi2 << 4u)) - 32);
    let q = {{buf}}_u32x2(base + 32u + 32u * n + l);
    let hm = {{buf}}_u32x2(base + l);
    let hb = 4u * n + j;
    // q = low 2 bits + 4 * hmask bit, minus 4 (a clear bit subtracts 4)
    let q0 = ((q.x >> (2u * j)) & 0x03030303u) | (((hm.x >> hb) & 0x01010101u) << 2u);
    let q1 = ((q.y >> (2u * j)) & 0x03030303u) | (((hm.y >> hb) & 0x01010101u) << 2u);
    return Deq8(s * bytes4(q0, M0 + 4.0), s * bytes4(q1, M0 + 4.0));
{% else %}
    {{ raise("no GPU kernel for weight type " ~ qtype) }}
{% endif %}
}
{% endmacro %}
