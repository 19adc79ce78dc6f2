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
//   Q8_0  34 B / 32: d f16 | qs i8[32]; w = d*q
//   Q4_K 144 B / 256: d f16 | dmin f16 | scales u8[12] (6-bit scale+min per 32) | qs u8[128];
//        64-weight chunk c uses qs[32c..32c+32]: sub-block 2c the low nibbles, 2c+1 the high;
//        w = d*sc*q - dmin*m
//   Q5_K 176 B / 256: as Q4_K plus qh u8[32] before qs; 5th bit of weight l in sub-block s = bit s of qh[l]
//   Q6_K 210 B / 256: ql u8[128] | qh u8[64] | sc i8[16] | d f16; per 128-weight half n and quarter k:
//        q = (nibble of ql[64n + l + 32(k&1)], shift 4(k>>1)) | ((qh[32n + l] >> 2k) & 3) << 4, minus 32;
//        w = d * sc[8n + l/16 + 2k] * q

struct Deq8 { lo: vec4<f32>, hi: vec4<f32> }

fn nib4(w: u32, sh: u32) -> vec4<f32> {
    return vec4<f32>(f32((w >> sh) & 15u), f32((w >> (sh + 8u)) & 15u),
                     f32((w >> (sh + 16u)) & 15u), f32((w >> (sh + 24u)) & 15u));
}
fn i8x4(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(i32(w << 24u) >> 24u), f32(i32(w << 16u) >> 24u),
                     f32(i32(w << 8u) >> 24u), f32(i32(w) >> 24u));
}
// 2-bit fields (w >> sh) & 3 of each byte, as vec4
fn two4(w: u32, sh: u32) -> vec4<f32> {
    return vec4<f32>(f32((w >> sh) & 3u), f32((w >> (sh + 8u)) & 3u),
                     f32((w >> (sh + 16u)) & 3u), f32((w >> (sh + 24u)) & 3u));
}
// bits b..b+3 of qh, as 0/16 each
fn bits4(qh: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(f32((qh >> b) & 1u), f32((qh >> (b + 1u)) & 1u),
                     f32((qh >> (b + 2u)) & 1u), f32((qh >> (b + 3u)) & 1u)) * 16.0;
}

{% macro quant_fns(buf, qtype) %}
fn {{buf}}_u32(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    if (s == 0u) { return {{buf}}[i]; }
    return ({{buf}}[i] >> s) | ({{buf}}[i + 1u] << (32u - s));
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
    let o = rowbase + c * 16u;
    let a = {{buf}}_u32(o); let b = {{buf}}_u32(o + 4u);
    let e = {{buf}}_u32(o + 8u); let f = {{buf}}_u32(o + 12u);
    return Deq8(vec4<f32>(unpack2x16float(a), unpack2x16float(b)),
                vec4<f32>(unpack2x16float(e), unpack2x16float(f)));
{% elif qtype == "Q4_0" %}
    let base = rowbase + (c >> 2u) * 18u;
    let p = c & 3u;
    let d = {{buf}}_f16(base);
    let o = base + 2u + (p & 1u) * 8u;
    let sh = (p >> 1u) * 4u;
    return Deq8(d * (nib4({{buf}}_u32(o), sh) - 8.0), d * (nib4({{buf}}_u32(o + 4u), sh) - 8.0));
{% elif qtype == "Q4_1" %}
    let base = rowbase + (c >> 2u) * 20u;
    let p = c & 3u;
    let dm = unpack2x16float({{buf}}[base >> 2u]);
    let o = (base + 4u + (p & 1u) * 8u) >> 2u;
    let sh = (p >> 1u) * 4u;
    return Deq8(dm.x * nib4({{buf}}[o], sh) + dm.y, dm.x * nib4({{buf}}[o + 1u], sh) + dm.y);
{% elif qtype == "Q5_0" %}
    let base = rowbase + (c >> 2u) * 22u;
    let p = c & 3u;
    let d = {{buf}}_f16(base);
    let qh = {{buf}}_u32(base + 2u);
    let o = base + 6u + (p & 1u) * 8u;
    let sh = (p >> 1u) * 4u;
    let e0 = p * 8u;
    return Deq8(d * (nib4({{buf}}_u32(o), sh) + bits4(qh, e0) - 16.0),
                d * (nib4({{buf}}_u32(o + 4u), sh) + bits4(qh, e0 + 4u) - 16.0));
{% elif qtype == "Q8_0" %}
    let base = rowbase + (c >> 2u) * 34u;
    let d = {{buf}}_f16(base);
    let o = base + 2u + (c & 3u) * 8u;
    return Deq8(d * i8x4({{buf}}_u32(o)), d * i8x4({{buf}}_u32(o + 4u)));
{% elif qtype == "Q4_K" or qtype == "Q5_K" %}
{% set bb = 144 if qtype == "Q4_K" else 176 %}
{% set qs_off = 16 if qtype == "Q4_K" else 48 %}
    let base = rowbase + (c >> 5u) * {{bb}}u;
    let e0 = (c & 31u) * 8u;          // first weight within the super-block
    let sub = e0 >> 5u;               // sub-block 0..7
    let dm = unpack2x16float({{buf}}[base >> 2u]);
    let sc_base = base + 4u;
    var sc: u32; var mn: u32;
    if (sub < 4u) {
        sc = {{buf}}_u8(sc_base + sub) & 63u;
        mn = {{buf}}_u8(sc_base + sub + 4u) & 63u;
    } else {
        sc = ({{buf}}_u8(sc_base + sub + 4u) & 15u) | (({{buf}}_u8(sc_base + sub - 4u) >> 6u) << 4u);
        mn = ({{buf}}_u8(sc_base + sub + 4u) >> 4u) | (({{buf}}_u8(sc_base + sub) >> 6u) << 4u);
    }
    let l = e0 & 31u;
    let o = (base + {{qs_off}}u + (e0 >> 6u) * 32u + l) >> 2u;
    let sh = (sub & 1u) * 4u;
    let d = dm.x * f32(sc);
    let m = dm.y * f32(mn);
{% if qtype == "Q4_K" %}
    return Deq8(d * nib4({{buf}}[o], sh) - m, d * nib4({{buf}}[o + 1u], sh) - m);
{% else %}
    let oh = (base + 16u + l) >> 2u;
    let h0 = {{buf}}[oh]; let h1 = {{buf}}[oh + 1u];
    let hlo = vec4<f32>(f32((h0 >> sub) & 1u), f32((h0 >> (sub + 8u)) & 1u),
                        f32((h0 >> (sub + 16u)) & 1u), f32((h0 >> (sub + 24u)) & 1u)) * 16.0;
    let hhi = vec4<f32>(f32((h1 >> sub) & 1u), f32((h1 >> (sub + 8u)) & 1u),
                        f32((h1 >> (sub + 16u)) & 1u), f32((h1 >> (sub + 24u)) & 1u)) * 16.0;
    return Deq8(d * (nib4({{buf}}[o], sh) + hlo) - m, d * (nib4({{buf}}[o + 1u], sh) + hhi) - m);
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
    return Deq8(s * (nib4({{buf}}_u32(ol), shl) + 16.0 * two4({{buf}}_u32(oh), shh) - 32.0),
                s * (nib4({{buf}}_u32(ol + 4u), shl) + 16.0 * two4({{buf}}_u32(oh + 4u), shh) - 32.0));
{% else %}
    {{ raise("no GPU kernel for weight type " ~ qtype) }}
{% endif %}
}
{% endmacro %}
