// The int8 prefill products' weight decoder (matmul8.wgsl, moe_mm8.wgsl), included after quant.wgsl's
// quant_fns("w0", QTYPE) (with Q8X = 1, C64 for kq_scale_min). Every type here has SCALE "one",
// "min" or "two" in mm8_tile.wgsl's arithmetic (the main loop both kernels share).
// 16 bytes from any byte offset: five word loads, no branch (a shift by 32 is avoided)
fn w0_u32x4(off: u32) -> vec4<u32> {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    let a = w0_w(i); let b = w0_w(i + 1u); let c = w0_w(i + 2u); let d = w0_w(i + 3u); let e = w0_w(i + 4u);
    return vec4<u32>((a >> s) | ((b << (31u - s)) << 1u), (b >> s) | ((c << (31u - s)) << 1u),
                     (c >> s) | ((d << (31u - s)) << 1u), (d >> s) | ((e << (31u - s)) << 1u));
}
// half h (weights 16h .. 16h + 15) of block s (weights 32s .. 32s + 31) of the row at byte rowbase:
// 16 int8 codes, 4 to a word, and the scale this half contributes (h 0: a, h 1: b; see SCALE)
struct Q16 { q: vec4<u32>, a: f32 }
fn w0_q16(rowbase: u32, s: u32, h: u32) -> Q16 {
{% if QTYPE == "Q8_0" %}
    let base = rowbase + s * 34u;                     // 2-byte aligned
    let lo = w0_u32x2(base + 2u + 16u * h);
    let hi = w0_u32x2(base + 10u + 16u * h);
    return Q16(vec4<u32>(lo, hi), w0_f16(base));
{% elif QTYPE == "Q4_0" %}
    let base = rowbase + s * 18u;                     // 2-byte aligned: weight j < 16 the low nibble of qs[j], j + 16 the high
    let lo = w0_u32x2(base + 2u);
    let hi = w0_u32x2(base + 10u);
    let sh = 4u * h;
    // q - 8 as a signed byte: q + 0x78 stays in its byte, and flipping bit 7 recentres it
    let q = (((vec4<u32>(lo, hi) >> vec4<u32>(sh)) & vec4<u32>(LO4)) + vec4<u32>(0x78787878u)) ^ vec4<u32>(0x80808080u);
    return Q16(q, w0_f16(base));
{% elif QTYPE == "Q4_1" %}
    let wi = (rowbase >> 2u) + s * 5u;                // 20-byte blocks: 4-byte aligned
    let dm = unpack2x16float(w0_w(wi));
    let q = (vec4<u32>(w0_w(wi + 1u), w0_w(wi + 2u), w0_w(wi + 3u), w0_w(wi + 4u)) >> vec4<u32>(4u * h)) & vec4<u32>(LO4);
    return Q16(q, select(dm.x, -dm.y, h == 1u));      // w = d q + m: b = -m
{% elif QTYPE == "Q4_K" or QTYPE == "Q5_K" %}
{% set bw = 36 if QTYPE == "Q4_K" else 44 %}
    let wi = (rowbase >> 2u) + (s >> 3u) * {{bw}}u;       // the super-block's first word (144 / 176-byte blocks)
    let j = s & 7u;                                   // sub-block
    let dm = unpack2x16float(w0_w(wi));
    let sm = kq_scale_min(w0_w(wi + 1u), w0_w(wi + 2u), w0_w(wi + 3u), j);
    let o = wi + {{4 if QTYPE == "Q4_K" else 12}}u + (j >> 1u) * 8u + 4u * h;        // its 32 code bytes, nibble j & 1
    let sh = 4u * (j & 1u);
{% if QTYPE == "Q4_K" %}
    let q = (vec4<u32>(w0_w(o), w0_w(o + 1u), w0_w(o + 2u), w0_w(o + 3u)) >> vec4<u32>(sh)) & vec4<u32>(LO4);
{% else %}
    // the 5th bit of weight l of sub-block j: bit j of qh[l] (qh: bytes 16 .. 48, words 4 .. 11)
    let oh = wi + 4u + 4u * h;
    let hb = ((vec4<u32>(w0_w(oh), w0_w(oh + 1u), w0_w(oh + 2u), w0_w(oh + 3u)) >> vec4<u32>(j)) & vec4<u32>(0x01010101u)) << vec4<u32>(4u);
    let q = ((vec4<u32>(w0_w(o), w0_w(o + 1u), w0_w(o + 2u), w0_w(o + 3u)) >> vec4<u32>(sh)) & vec4<u32>(LO4)) | hb;
{% endif %}
    return Q16(q, select(dm.x * f32(sm.x), dm.y * f32(sm.y), h == 1u));
{% elif QTYPE == "Q6_K" %}
    let base = rowbase + (s >> 3u) * 210u;            // 2-byte aligned
    let e0 = (s & 7u) * 32u;
    let n = e0 >> 7u;
    let k = (e0 >> 5u) & 3u;
    let l = 16u * h;
    let ol = base + 64u * n + l + 32u * (k & 1u);
    let oh = base + 128u + 32u * n + l;
    let ql = vec4<u32>(w0_u32x2(ol), w0_u32x2(ol + 8u));
    let qh = vec4<u32>(w0_u32x2(oh), w0_u32x2(oh + 8u));
    let q6 = ((ql >> vec4<u32>(4u * (k >> 1u))) & vec4<u32>(LO4)) | (((qh >> vec4<u32>(2u * k)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    // q - 32 as a signed byte (q + 0x60 stays in its byte)
    let q = (q6 + vec4<u32>(0x60606060u)) ^ vec4<u32>(0x80808080u);
    let scb = w0_u8(base + 192u + 8u * n + h + 2u * k);
    return Q16(q, w0_f16(base + 208u) * f32(i32(scb << 24u) >> 24u));
{% elif QTYPE in ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S") %}
    // two 8-weight chunks with signed codes; their scale covers the 16-weight half (IQ2_XS / IQ2_S) or more
    let c = 4u * s + 2u * h;
    let a = w0_iq8(rowbase, c);
    let b = w0_iq8(rowbase, c + 1u);
    return Q16(vec4<u32>(a.q, b.q), a.d);
{% elif QTYPE == "MXFP4" or QTYPE == "IQ4_NL" %}
{% set bb = 17 if QTYPE == "MXFP4" else 18 %}
    // weight j < 16 the low nibble of qs[j], j + 16 the high (as Q4_0); codes through the type's
    // int8 table (MXFP4: doubled e2m1 values, its scale 2^(e - 128) makes up for the doubling)
    let base = rowbase + s * {{bb}}u;
    let qs = w0_u32x4(base + {{bb - 16}}u);
    let sh = 4u * h;
{% if QTYPE == "MXFP4" %}
    let q = vec4<u32>(fp4_pack4(qs.x, sh), fp4_pack4(qs.y, sh), fp4_pack4(qs.z, sh), fp4_pack4(qs.w, sh));
    return Q16(q, e8m0_half(w0_u8(base)));
{% else %}
    let q = vec4<u32>(kv_pack4(KV_IQ4, qs.x, sh), kv_pack4(KV_IQ4, qs.y, sh), kv_pack4(KV_IQ4, qs.z, sh),
                      kv_pack4(KV_IQ4, qs.w, sh));
    return Q16(q, w0_f16(base));
{% endif %}
{% elif QTYPE == "IQ4_XS" %}
    let wi = (rowbase >> 2u) + (s >> 3u) * 34u;       // 136-byte super-blocks: 4-byte aligned
    let j = s & 7u;                                   // sub-block: 16 code bytes from word 2 + 4j
    let hd = w0_w(wi);
    let ls = ((w0_w(wi + 1u) >> (4u * j)) & 15u) | (((hd >> (16u + 2u * j)) & 3u) << 4u);
    let o = wi + 2u + 4u * j;
    let sh = 4u * h;
    return Q16(vec4<u32>(kv_pack4(KV_IQ4, w0_w(o), sh), kv_pack4(KV_IQ4, w0_w(o + 1u), sh),
                         kv_pack4(KV_IQ4, w0_w(o + 2u), sh), kv_pack4(KV_IQ4, w0_w(o + 3u), sh)),
               unpack2x16float(hd).x * f32(i32(ls) - 32));
{% else %}
    {{ raise("no int8 prefill product for weight type " ~ QTYPE) }}
{% endif %}
}

