// Dequantization of GGUF blocks read straight from a weight buffer `array<u32>` (the file's bytes,
// padded by 4 bytes so an unaligned read of the last word stays inside the buffer).
// `quant_fns(buf, qtype, v4=False)` defines, for buffer `buf` (v4: declared `array<vec4<u32>>`, which only
// the 64-weight Q4_K / Q5_K chunks read as such; every other read takes word i through `{buf}_w(i)`):
//   fn {buf}_deq8(rowbase: u32, c: u32) -> Deq8
// the 8 consecutive weights [8c, 8c + 8) of the row starting at byte `rowbase`, and (Q8X templates,
// every quantized type):
//   fn {buf}_dq8(rowbase: u32, c: u32, q: vec2<u32>, qsum: i32) -> f32
// the dot product of those 8 weights with 8 int8 values q (byte i of q.x = value i, of q.y = value
// 4 + i; qsum = their sum), in units of q's scale: the weights' integer codes meet q in 4-way integer
// dot products (dot4I8Packed) and the block's scale (and offset, times qsum) is applied once.
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
//   IQ4_NL 18 B / 32: d f16 | qs u8[16] (nibbles as Q4_0); w = d * kvalues_iq4nl[q]
//   IQ4_XS 136 B / 256: d f16 | scales_h u16 | scales_l u8[4] | qs u8[128]; sub-block s (32 weights):
//        16 bytes of qs at 16s, nibbles as IQ4_NL; ls = (nibble s&1 of scales_l[s/2]) | ((scales_h >> 2s) & 3) << 4;
//        w = d * (ls - 32) * kvalues_iq4nl[q]
//   MXFP4  17 B / 32: e u8 (e8m0) | qs u8[16] (nibbles as Q4_0); w = 2^(e-128) * kvalues_mxfp4[q]
//   IQ2_XXS 66 B / 256: d f16 | per 32 weights two u32 a0, a1: byte l of a0 indexes iq2xxs_grid (weights
//        8l..8l+7), bits 7l..7l+6 of a1 a ksigns index (their signs), bits 28..31 the scale s;
//        w = d * (0.5 + s) / 4 * grid * sign
//   IQ2_XS  74 B / 256: d f16 | qs u16[32] | scales u8[8]; qs[i] (weights 8i..): bits 0..8 index iq2xs_grid,
//        9..15 a ksigns index; nibble (i / 2) % 2 of scales[i / 4] the scale; w as IQ2_XXS
//   IQ2_S   82 B / 256: d f16 | qs u8[32] | signs u8[32] | qh u8[8] | scales u8[8]; weights 8i..: index
//        qs[i] | ((qh[i / 4] >> 2 (i % 4)) & 3) << 8 into iq2s_grid, sign bits signs[i]; scale as IQ2_XS
//   IQ3_XXS 98 B / 256: d f16 | qs u8[64] | u32[8]; qs[j] indexes iq3xxs_grid (weights 4j..4j+3); u32 k
//        (32 weights): four ksigns indices and the scale in bits 28..31; w = d * (0.5 + s) / 2 * grid * sign
//   IQ3_S  110 B / 256: d f16 | qs u8[64] | qh u8[8] | signs u8[32] | scales u8[4]; weights 4j..: index
//        qs[j] | (bit j % 8 of qh[j / 8]) << 8 into iq3s_grid; sign of weight j bit j % 8 of signs[j / 8];
//        nibble of scales[k / 2] for 32-weight sub-block k; w = d * (1 + 2 s) * grid * sign
//   (grids: the storage buffer `iq_tab` (gpu/iq_grids.py); ksigns computed: the 7 stored sign bits and
//   an 8th that makes their count even)

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
// IQ4_NL / IQ4_XS's codebook (kvalues_iq4nl) and MXFP4's doubled e2m1 values (kvalues_mxfp4): 16 int8
// each as 4 little-endian words (engine/quants/tables.py; tests/test_gpu_iquants.py checks them)
const KV_IQ4 = vec4<u32>(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
const KV_FP4 = vec4<u32>(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);
// byte n (0..15) of the table t, chosen without a dynamic index
fn kv_byte(t: vec4<u32>, n: u32) -> u32 {
    let lo = select(t.x, t.y, (n & 4u) != 0u);
    let hi = select(t.z, t.w, (n & 4u) != 0u);
    return (select(lo, hi, (n & 8u) != 0u) >> ((n & 3u) * 8u)) & 255u;
}
// the 4-bit fields (w >> sh) & 15 of w's 4 bytes looked up in t: 4 int8 values packed in a word
fn kv_pack4(t: vec4<u32>, w: u32, sh: u32) -> u32 {
    return kv_byte(t, (w >> sh) & 15u) | (kv_byte(t, (w >> (sh + 8u)) & 15u) << 8u)
         | (kv_byte(t, (w >> (sh + 16u)) & 15u) << 16u) | (kv_byte(t, (w >> (sh + 24u)) & 15u) << 24u);
}
// kv_pack4(KV_FP4, w, sh) by arithmetic on the 4 bytes at once: the magnitude m = 0..7 becomes
// 0 1 2 3 4 6 8 12 by adding (m >= 5) + (m >= 6) + 3 (m >= 7), then bytes with bit 3 set are negated
// (0x80 - v, then bit 7 flipped: no borrow between bytes). About 20 operations against kv_pack4's 50
// selects and shifts, which bound the MXFP4 products' speed.
fn fp4_pack4(w: u32, sh: u32) -> u32 {
    let n = (w >> sh) & 0x0F0F0F0Fu;
    let m = n & 0x07070707u;
    let v = m + (((m + 0x03030303u) >> 3u) & 0x01010101u) + (((m + 0x02020202u) >> 3u) & 0x01010101u)
              + 3u * (((m + 0x01010101u) >> 3u) & 0x01010101u);
    let neg = (0x80808080u - v) ^ 0x80808080u;
    let s = ((n >> 3u) & 0x01010101u) * 255u;           // 0xFF in the bytes whose sign bit is set
    return (v & ~s) | (neg & s);
}
{% if IQ4_LUT | default("") == "wg" or FP4_LUT | default("") == "wg" %}
// The codebooks in workgroup memory, for kernels bound by kv_pack4's / fp4_pack4's arithmetic:
// [book: IQ4 0..63, MXFP4 64..127][byte k of the packed word][code] = the code's int8 value << 8k.
// Each lookup reads one 16-entry table, one entry a bank: no bank conflicts whatever the codes.
// The kernel runs kv_wg_init(its invocation index) at its start (a barrier: uniform control flow).
var<workgroup> kv_wg: array<u32, 128>;
fn kv_wg_fill(t: u32) {
    if (t < 128u) {
        kv_wg[t] = kv_byte(select(KV_IQ4, KV_FP4, t >= 64u), t & 15u) << (8u * ((t >> 4u) & 3u));
    }
}
// kv_pack4(book, w, sh) from the tables (book 0u: IQ4, 64u: MXFP4)
fn kv_wg4(book: u32, w: u32, sh: u32) -> u32 {
    return kv_wg[book + ((w >> sh) & 15u)] | kv_wg[book + 16u + ((w >> (sh + 8u)) & 15u)]
         | kv_wg[book + 32u + ((w >> (sh + 16u)) & 15u)] | kv_wg[book + 48u + ((w >> (sh + 24u)) & 15u)];
}
{% endif %}
{% macro kv_wg_init(tid) %}
{% if IQ4_LUT | default("") == "wg" or FP4_LUT | default("") == "wg" %}
    kv_wg_fill({{tid}});
    workgroupBarrier();
{% endif %}
{% endmacro %}
// MXFP4's scale byte as 2^(e - 128) (llama.cpp's ggml_e8m0_to_fp32_half; subnormal below e = 2)
fn e8m0_half(e: u32) -> f32 {
    return bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
}
{% set _iq_used = (QTYPES | default([])) | list + [QTYPE | default("")] %}
{% if ("IQ2_XXS" in _iq_used or "IQ2_XS" in _iq_used or "IQ2_S" in _iq_used or "IQ3_XXS" in _iq_used
       or "IQ3_S" in _iq_used or (IQ4_LUT | default("") == "tab" and C64 | default(False)
                                  and ("IQ4_XS" in _iq_used or "IQ4_NL" in _iq_used))) %}
// The i-quant grids and IQ4 pair table (gpu/iq_grids.py: a storage buffer, not WGSL constants, which a
// run-time index would copy into every invocation), bound by Kernels / Plan; first words of each:
@group(0) @binding(63) var<storage, read> iq_tab: array<u32>;
{% endif %}
const IQ2XXS_GRID: u32 = 0u;      // 256 entries of 2 words
const IQ2XS_GRID: u32 = 512u;     // 512 x 2
const IQ2S_GRID: u32 = 1536u;     // 1024 x 2
const IQ3XXS_GRID: u32 = 3584u;   // 256 x 1
const IQ3S_GRID: u32 = 3840u;     // 512 x 1
const IQ4_PAIRS: u32 = 4352u;     // 256: byte (hi << 4) | lo -> kvalues_iq4nl[lo] | kvalues_iq4nl[hi] << 16
// ksigns_iq2xs[s]: the 7 stored sign bits s and an 8th making the count of set bits even
fn iq_ksigns(s: u32) -> u32 {
    return s | ((countOneBits(s) & 1u) << 7u);
}
// 4 unsigned byte values v (1..127) negated where sign bit i (of s's low 4) is set: packed int8 (x ^ 0xFF
// + 1 = -x in a byte, never carrying for x >= 1); the multiply moves bit i to bit 8i
fn iq_sign4(v: u32, s: u32) -> u32 {
    let m = (((s & 15u) * 0x00204081u) & 0x01010101u) * 255u;
    return (v ^ m) + (m & 0x01010101u);
}
// 8 consecutive weights of an IQ2 / IQ3 block as int8 codes (q.x values 0..3, q.y 4..7) and their scale d
struct IQ8 { q: vec2<u32>, d: f32 }
{% if Q8X | default(0) %}
const LO4: u32 = 0x0F0F0F0Fu;
// bits b..b+3 of qh moved to bit 4 of bytes 0..3
fn spread4(qh: u32, b: u32) -> u32 {
    let v = qh >> b;
    return ((v & 1u) << 4u) | ((v & 2u) << 11u) | ((v & 4u) << 18u) | ((v & 8u) << 25u);
}
fn idot8(a: u32, b: u32, q: vec2<u32>) -> i32 {
    return dot4I8Packed(a, q.x) + dot4I8Packed(b, q.y);
}
{% if C64 | default(False) %}
// 64 int8 values of x (weights [64c, 64c + 64), two blocks of 32): codes 8 to a chunk (q[i] = chunk i),
// the chunks' code sums and the two blocks' scales
struct X64 { q: array<vec2<u32>, 8>, n: array<i32, 8>, s: vec2<f32> }
// the 8 IQ4 codes of word w looked up in kvalues_iq4nl: (low nibbles, high nibbles) as 4 int8 each.
// IQ4_LUT "tab": two bytes' codes a read of the pair table (iq_tab, 4 reads a word); "wg": the
// codebook's tables in workgroup memory (kv_wg4, 8 reads a word); else by selects on the constant KV_IQ4 (no memory, ~10 operations a code,
// which left the 8B IQ4_XS decode bound by arithmetic on an H100: bench/README.md).
fn iq4_codes(w: u32) -> vec2<u32> {
{% if IQ4_LUT | default("") == "tab" %}
    let a = iq_tab[IQ4_PAIRS + (w & 255u)] | (iq_tab[IQ4_PAIRS + ((w >> 8u) & 255u)] << 8u);
    let b = iq_tab[IQ4_PAIRS + ((w >> 16u) & 255u)] | (iq_tab[IQ4_PAIRS + (w >> 24u)] << 8u);
    return vec2<u32>((a & 0xFFFFu) | (b << 16u), (a >> 16u) | (b & 0xFFFF0000u));
{% elif IQ4_LUT | default("") == "wg" %}
    return vec2<u32>(kv_wg4(0u, w, 0u), kv_wg4(0u, w, 4u));
{% else %}
    return vec2<u32>(kv_pack4(KV_IQ4, w, 0u), kv_pack4(KV_IQ4, w, 4u));
{% endif %}
}
// sub-block j's (0..7) 6-bit (scale, min) from a K-quant's 12 scale bytes, held as 3 words s0..s2
fn kq_scale_min(s0: u32, s1: u32, s2: u32, j: u32) -> vec2<u32> {
    let bs = (j & 3u) * 8u;
    let b0 = (s0 >> bs) & 255u;
    let b1 = (s1 >> bs) & 255u;
    let b2 = (s2 >> bs) & 255u;
    let hi = j >= 4u;
    return vec2<u32>(select(b0 & 63u, (b2 & 15u) | ((b0 >> 6u) << 4u), hi),
                     select(b1 & 63u, (b2 >> 4u) | ((b1 >> 6u) << 4u), hi));
}
{% endif %}
{% endif %}

{% macro quant_fns(buf, qtype, v4=False) %}
{% set IQ_GRID_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S") %}
// word i of the buffer (`v4`: the buffer is declared array<vec4<u32>>, for 16-byte loads in `_dq64`)
fn {{buf}}_w(i: u32) -> u32 {
{% if v4 %}
    return {{buf}}[i >> 2u][i & 3u];
{% else %}
    return {{buf}}[i];
{% endif %}
}
fn {{buf}}_u32(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    return ({{buf}}_w(i) >> s) | (({{buf}}_w(i + 1u) << (31u - s)) << 1u);
}
// 8 bytes from a 2-byte aligned offset: three word loads, no branch (a shift by 32 is avoided)
fn {{buf}}_u32x2(off: u32) -> vec2<u32> {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    let a = {{buf}}_w(i); let b = {{buf}}_w(i + 1u); let c = {{buf}}_w(i + 2u);
    return vec2<u32>((a >> s) | ((b << (31u - s)) << 1u), (b >> s) | ((c << (31u - s)) << 1u));
}
fn {{buf}}_f16(off: u32) -> f32 {
    return unpack2x16float({{buf}}_w(off >> 2u) >> ((off & 2u) * 8u)).x;
}
fn {{buf}}_u8(off: u32) -> u32 {
    return ({{buf}}_w(off >> 2u) >> ((off & 3u) * 8u)) & 255u;
}
{% if qtype in IQ_GRID_TYPES %}
// a u16 at an even byte offset
fn {{buf}}_u16(off: u32) -> u32 {
    return ({{buf}}_w(off >> 2u) >> ((off & 2u) * 8u)) & 0xFFFFu;
}
fn {{buf}}_iq8(rowbase: u32, c: u32) -> IQ8 {
    let i = c & 31u;                          // 8-weight chunk within the 256-weight block
{% if qtype == "IQ2_XXS" %}
    let base = rowbase + (c >> 5u) * 66u;
    let ab = base + 2u + 8u * (i >> 2u);
    let a1 = {{buf}}_u32(ab + 4u);
    let g = 2u * {{buf}}_u8(ab + (i & 3u));
    let s = iq_ksigns((a1 >> (7u * (i & 3u))) & 127u);
    let d = {{buf}}_f16(base) * (0.5 + f32(a1 >> 28u)) * 0.25;
    return IQ8(vec2<u32>(iq_sign4(iq_tab[IQ2XXS_GRID + g], s), iq_sign4(iq_tab[IQ2XXS_GRID + g + 1u], s >> 4u)), d);
{% elif qtype == "IQ2_XS" %}
    let base = rowbase + (c >> 5u) * 74u;
    let q = {{buf}}_u16(base + 2u + 2u * i);
    let g = 2u * (q & 511u);
    let s = iq_ksigns(q >> 9u);
    let sc = ({{buf}}_u8(base + 66u + (i >> 2u)) >> (4u * ((i >> 1u) & 1u))) & 15u;
    let d = {{buf}}_f16(base) * (0.5 + f32(sc)) * 0.25;
    return IQ8(vec2<u32>(iq_sign4(iq_tab[IQ2XS_GRID + g], s), iq_sign4(iq_tab[IQ2XS_GRID + g + 1u], s >> 4u)), d);
{% elif qtype == "IQ2_S" %}
    let base = rowbase + (c >> 5u) * 82u;
    let g = 2u * ({{buf}}_u8(base + 2u + i) | ((({{buf}}_u8(base + 66u + (i >> 2u)) >> (2u * (i & 3u))) & 3u) << 8u));
    let s = {{buf}}_u8(base + 34u + i);
    let sc = ({{buf}}_u8(base + 74u + (i >> 2u)) >> (4u * ((i >> 1u) & 1u))) & 15u;
    let d = {{buf}}_f16(base) * (0.5 + f32(sc)) * 0.25;
    return IQ8(vec2<u32>(iq_sign4(iq_tab[IQ2S_GRID + g], s), iq_sign4(iq_tab[IQ2S_GRID + g + 1u], s >> 4u)), d);
{% elif qtype == "IQ3_XXS" %}
    let base = rowbase + (c >> 5u) * 98u;
    let gi = {{buf}}_u16(base + 2u + 2u * i);
    let a = {{buf}}_u32(base + 66u + 4u * (i >> 2u));
    let s = iq_ksigns((a >> (7u * (i & 3u))) & 127u);
    let d = {{buf}}_f16(base) * (0.5 + f32(a >> 28u)) * 0.5;
    return IQ8(vec2<u32>(iq_sign4(iq_tab[IQ3XXS_GRID + (gi & 255u)], s), iq_sign4(iq_tab[IQ3XXS_GRID + (gi >> 8u)], s >> 4u)), d);
{% elif qtype == "IQ3_S" %}
    let base = rowbase + (c >> 5u) * 110u;
    let gi = {{buf}}_u16(base + 2u + 2u * i);
    let h = {{buf}}_u8(base + 66u + (i >> 2u)) >> (2u * (i & 3u));
    let s = {{buf}}_u8(base + 74u + i);
    let sc = ({{buf}}_u8(base + 106u + (i >> 3u)) >> (4u * ((i >> 2u) & 1u))) & 15u;
    let d = {{buf}}_f16(base) * (1.0 + 2.0 * f32(sc));
    return IQ8(vec2<u32>(iq_sign4(iq_tab[IQ3S_GRID + ((gi & 255u) | ((h & 1u) << 8u))], s),
                         iq_sign4(iq_tab[IQ3S_GRID + ((gi >> 8u) | ((h & 2u) << 7u))], s >> 4u)), d);
{% endif %}
}
{% endif %}
fn {{buf}}_deq8(rowbase: u32, c: u32) -> Deq8 {
{% if qtype in IQ_GRID_TYPES %}
    let v = {{buf}}_iq8(rowbase, c);
    return Deq8(v.d * i8x4(v.q.x), v.d * i8x4(v.q.y));
{% elif qtype == "F32" %}
    let i = (rowbase >> 2u) + c * 8u;
    return Deq8(vec4<f32>(bitcast<f32>({{buf}}_w(i)), bitcast<f32>({{buf}}_w(i + 1u)),
                          bitcast<f32>({{buf}}_w(i + 2u)), bitcast<f32>({{buf}}_w(i + 3u))),
                vec4<f32>(bitcast<f32>({{buf}}_w(i + 4u)), bitcast<f32>({{buf}}_w(i + 5u)),
                          bitcast<f32>({{buf}}_w(i + 6u)), bitcast<f32>({{buf}}_w(i + 7u))));
{% elif qtype == "F16" %}
    let o = (rowbase >> 2u) + c * 4u;         // rows of a multiple of 32 weights: 4-byte aligned
    let a = {{buf}}_w(o); let b = {{buf}}_w(o + 1u);
    let e = {{buf}}_w(o + 2u); let f = {{buf}}_w(o + 3u);
    return Deq8(vec4<f32>(unpack2x16float(a), unpack2x16float(b)),
                vec4<f32>(unpack2x16float(e), unpack2x16float(f)));
{% elif qtype == "Q4_0" %}
    let base = rowbase + (c >> 2u) * 18u;
    let p = c & 3u;
    let d = {{buf}}_f16(base);
    let q = {{buf}}_u32x2(base + 2u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
    return Deq8(d * (nib4(q.x, sh) - 8.0), d * (nib4(q.y, sh) - 8.0));
{% elif qtype == "Q4_1" %}
    let base = rowbase + (c >> 2u) * 20u;
    let p = c & 3u;
    let dm = unpack2x16float({{buf}}_w(base >> 2u));
    let o = (base + 4u + (p & 1u) * 8u) >> 2u;
    let sh = (p >> 1u) * 4u;
    return Deq8(dm.x * nib4({{buf}}_w(o), sh) + dm.y, dm.x * nib4({{buf}}_w(o + 1u), sh) + dm.y);
{% elif qtype == "Q5_0" %}
    let base = rowbase + (c >> 2u) * 22u;
    let p = c & 3u;
    let d = {{buf}}_f16(base);
    let qh = {{buf}}_u32(base + 2u);
    let q = {{buf}}_u32x2(base + 6u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
    let e0 = p * 8u;
    return Deq8(d * (nib4(q.x, sh) + bits4(qh, e0) - 16.0),
                d * (nib4(q.y, sh) + bits4(qh, e0 + 4u) - 16.0));
{% elif qtype == "Q5_1" %}
    let base = rowbase + (c >> 2u) * 24u;
    let p = c & 3u;
    let wi = base >> 2u;
    let dm = unpack2x16float({{buf}}_w(wi));
    let qh = {{buf}}_w(wi + 1u);
    let o = wi + 2u + (p & 1u) * 2u;
    let sh = (p >> 1u) * 4u;
    let e0 = p * 8u;
    return Deq8(dm.x * (nib4({{buf}}_w(o), sh) + bits4(qh, e0)) + dm.y,
                dm.x * (nib4({{buf}}_w(o + 1u), sh) + bits4(qh, e0 + 4u)) + dm.y);
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
    let dm = unpack2x16float({{buf}}_w(base >> 2u));
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
    return Deq8(d * nib4({{buf}}_w(o), sh) - m, d * nib4({{buf}}_w(o + 1u), sh) - m);
{% else %}
    let oh = (base + 16u + l) >> 2u;
    let h0 = {{buf}}_w(oh); let h1 = {{buf}}_w(oh + 1u);
    let hlo = vec4<f32>(f32((h0 >> sub) & 1u), f32((h0 >> (sub + 8u)) & 1u),
                        f32((h0 >> (sub + 16u)) & 1u), f32((h0 >> (sub + 24u)) & 1u)) * 16.0;
    let hhi = vec4<f32>(f32((h1 >> sub) & 1u), f32((h1 >> (sub + 8u)) & 1u),
                        f32((h1 >> (sub + 16u)) & 1u), f32((h1 >> (sub + 24u)) & 1u)) * 16.0;
    return Deq8(d * (nib4({{buf}}_w(o), sh) + hlo) - m, d * (nib4({{buf}}_w(o + 1u), sh) + hhi) - m);
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
    return Deq8(s * (nib4(ql.x, shl) + 16.0 * two4(qh.x, shh) - 32.0),
                s * (nib4(ql.y, shl) + 16.0 * two4(qh.y, shh) - 32.0));
{% elif qtype == "Q2_K" %}
    let base = rowbase + (c >> 5u) * 84u;     // 4-byte aligned (84 = 4 * 21)
    let e0 = (c & 31u) * 8u;
    let n = e0 >> 7u;
    let j = (e0 >> 5u) & 3u;
    let l = e0 & 31u;
    let sc = {{buf}}_u8(base + 8u * n + 2u * j + (l >> 4u));
    let dm = unpack2x16float({{buf}}_w((base + 80u) >> 2u));
    let d = dm.x * f32(sc & 15u);
    let m = dm.y * f32(sc >> 4u);
    let o = (base + 16u + 32u * n + l) >> 2u;
    return Deq8(d * two4({{buf}}_w(o), 2u * j) - m, d * two4({{buf}}_w(o + 1u), 2u * j) - m);
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
    // a clear hmask bit subtracts 4: (bit ^ 1) * 4
    let h0 = vec4<f32>(f32(((hm.x >> hb) & 1u) ^ 1u), f32(((hm.x >> (hb + 8u)) & 1u) ^ 1u),
                       f32(((hm.x >> (hb + 16u)) & 1u) ^ 1u), f32(((hm.x >> (hb + 24u)) & 1u) ^ 1u));
    let h1 = vec4<f32>(f32(((hm.y >> hb) & 1u) ^ 1u), f32(((hm.y >> (hb + 8u)) & 1u) ^ 1u),
                       f32(((hm.y >> (hb + 16u)) & 1u) ^ 1u), f32(((hm.y >> (hb + 24u)) & 1u) ^ 1u));
    return Deq8(s * (two4(q.x, 2u * j) - 4.0 * h0), s * (two4(q.y, 2u * j) - 4.0 * h1));
{% elif qtype == "IQ4_NL" or qtype == "MXFP4" %}
{% set bb = 18 if qtype == "IQ4_NL" else 17 %}
{% set tab = "KV_IQ4" if qtype == "IQ4_NL" else "KV_FP4" %}
    let base = rowbase + (c >> 2u) * {{bb}}u;
    let p = c & 3u;
{% if qtype == "IQ4_NL" %}
    let d = {{buf}}_f16(base);
{% else %}
    let d = e8m0_half({{buf}}_u8(base));
{% endif %}
    let q = {{buf}}_u32x2(base + {{bb - 16}}u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
{% if qtype == "MXFP4" %}
    return Deq8(d * i8x4(fp4_pack4(q.x, sh)), d * i8x4(fp4_pack4(q.y, sh)));
{% else %}
    return Deq8(d * i8x4(kv_pack4({{tab}}, q.x, sh)), d * i8x4(kv_pack4({{tab}}, q.y, sh)));
{% endif %}
{% elif qtype == "IQ4_XS" %}
    let base = rowbase + (c >> 5u) * 136u;
    let e0 = (c & 31u) * 8u;
    let sub = e0 >> 5u;
    let l = e0 & 31u;
    let ls = (({{buf}}_u8(base + 4u + (sub >> 1u)) >> (4u * (sub & 1u))) & 15u) | ((({{buf}}_w(base >> 2u) >> (16u + 2u * sub)) & 3u) << 4u);
    let d = {{buf}}_f16(base) * f32(i32(ls) - 32);
    let q = {{buf}}_u32x2(base + 8u + 16u * sub + (l & 15u));
    let sh = (l >> 4u) * 4u;
    return Deq8(d * i8x4(kv_pack4(KV_IQ4, q.x, sh)), d * i8x4(kv_pack4(KV_IQ4, q.y, sh)));
{% else %}
    {{ raise("no GPU kernel for weight type " ~ qtype) }}
{% endif %}
}
{% if Q8X | default(0) and qtype not in ("F32", "F16") %}
fn {{buf}}_dq8(rowbase: u32, c: u32, q: vec2<u32>, qsum: i32) -> f32 {
{% if qtype in IQ_GRID_TYPES %}
    let v = {{buf}}_iq8(rowbase, c);
    return v.d * f32(idot8(v.q.x, v.q.y, q));
{% elif qtype == "Q4_0" %}
    let base = rowbase + (c >> 2u) * 18u;
    let p = c & 3u;
    let w = {{buf}}_u32x2(base + 2u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
    return {{buf}}_f16(base) * f32(idot8((w.x >> sh) & LO4, (w.y >> sh) & LO4, q) - 8 * qsum);
{% elif qtype == "Q4_1" %}
    let base = rowbase + (c >> 2u) * 20u;
    let p = c & 3u;
    let dm = unpack2x16float({{buf}}_w(base >> 2u));
    let o = (base + 4u + (p & 1u) * 8u) >> 2u;
    let sh = (p >> 1u) * 4u;
    return dm.x * f32(idot8(({{buf}}_w(o) >> sh) & LO4, ({{buf}}_w(o + 1u) >> sh) & LO4, q)) + dm.y * f32(qsum);
{% elif qtype == "Q5_0" %}
    let base = rowbase + (c >> 2u) * 22u;
    let p = c & 3u;
    let qh = {{buf}}_u32(base + 2u);
    let w = {{buf}}_u32x2(base + 6u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
    let e0 = p * 8u;
    let s = idot8(((w.x >> sh) & LO4) | spread4(qh, e0), ((w.y >> sh) & LO4) | spread4(qh, e0 + 4u), q);
    return {{buf}}_f16(base) * f32(s - 16 * qsum);
{% elif qtype == "Q5_1" %}
    let base = rowbase + (c >> 2u) * 24u;
    let p = c & 3u;
    let wi = base >> 2u;
    let dm = unpack2x16float({{buf}}_w(wi));
    let qh = {{buf}}_w(wi + 1u);
    let o = wi + 2u + (p & 1u) * 2u;
    let sh = (p >> 1u) * 4u;
    let e0 = p * 8u;
    let s = idot8((({{buf}}_w(o) >> sh) & LO4) | spread4(qh, e0), (({{buf}}_w(o + 1u) >> sh) & LO4) | spread4(qh, e0 + 4u), q);
    return dm.x * f32(s) + dm.y * f32(qsum);
{% elif qtype == "Q8_0" %}
    let base = rowbase + (c >> 2u) * 34u;
    let w = {{buf}}_u32x2(base + 2u + (c & 3u) * 8u);
    return {{buf}}_f16(base) * f32(idot8(w.x, w.y, q));
{% elif qtype == "Q4_K" or qtype == "Q5_K" %}
{% set bb = 144 if qtype == "Q4_K" else 176 %}
{% set qs_off = 16 if qtype == "Q4_K" else 48 %}
    let base = rowbase + (c >> 5u) * {{bb}}u;
    let e0 = (c & 31u) * 8u;
    let sub = e0 >> 5u;
    // the block is 4-byte aligned: its 12 scale bytes are 3 words; sub-block j's 6-bit scale and min
    // come from byte j & 3 of them without a branch (neighbouring lanes hold different sub-blocks)
    let wi = base >> 2u;
    let dm = unpack2x16float({{buf}}_w(wi));
    let bs = ((sub & 3u) * 8u);
    let b0 = ({{buf}}_w(wi + 1u) >> bs) & 255u;
    let b1 = ({{buf}}_w(wi + 2u) >> bs) & 255u;
    let b2 = ({{buf}}_w(wi + 3u) >> bs) & 255u;
    let hi = sub >= 4u;
    let sc = select(b0 & 63u, (b2 & 15u) | ((b0 >> 6u) << 4u), hi);
    let mn = select(b1 & 63u, (b2 >> 4u) | ((b1 >> 6u) << 4u), hi);
    let l = e0 & 31u;
    let o = (base + {{qs_off}}u + (e0 >> 6u) * 32u + l) >> 2u;
    let sh = (sub & 1u) * 4u;
    var a = ({{buf}}_w(o) >> sh) & LO4;
    var b = ({{buf}}_w(o + 1u) >> sh) & LO4;
{% if qtype == "Q5_K" %}
    let oh = (base + 16u + l) >> 2u;
    a |= (({{buf}}_w(oh) >> sub) & 0x01010101u) << 4u;
    b |= (({{buf}}_w(oh + 1u) >> sub) & 0x01010101u) << 4u;
{% endif %}
    return dm.x * f32(sc) * f32(idot8(a, b, q)) - dm.y * f32(mn) * f32(qsum);
{% elif qtype == "Q6_K" %}
    let base = rowbase + (c >> 5u) * 210u;
    let e0 = (c & 31u) * 8u;
    let n = e0 >> 7u;
    let r = e0 & 127u;
    let k = r >> 5u;
    let l = r & 31u;
    let scb = {{buf}}_u8(base + 192u + 8u * n + (l >> 4u) + 2u * k);
    let s = {{buf}}_f16(base + 208u) * f32(i32(scb << 24u) >> 24u);
    let shl = (k >> 1u) * 4u;
    let shh = 2u * k;
    let ql = {{buf}}_u32x2(base + 64u * n + l + 32u * (k & 1u));
    let qh = {{buf}}_u32x2(base + 128u + 32u * n + l);
    let a = ((ql.x >> shl) & LO4) | (((qh.x >> shh) & 0x03030303u) << 4u);
    let b = ((ql.y >> shl) & LO4) | (((qh.y >> shh) & 0x03030303u) << 4u);
    return s * f32(idot8(a, b, q) - 32 * qsum);
{% elif qtype == "Q2_K" %}
    let base = rowbase + (c >> 5u) * 84u;
    let e0 = (c & 31u) * 8u;
    let n = e0 >> 7u;
    let j = (e0 >> 5u) & 3u;
    let l = e0 & 31u;
    let sc = {{buf}}_u8(base + 8u * n + 2u * j + (l >> 4u));
    let dm = unpack2x16float({{buf}}_w((base + 80u) >> 2u));
    let o = (base + 16u + 32u * n + l) >> 2u;
    let s = idot8(({{buf}}_w(o) >> (2u * j)) & 0x03030303u, ({{buf}}_w(o + 1u) >> (2u * j)) & 0x03030303u, q);
    return dm.x * f32(sc & 15u) * f32(s) - dm.y * f32(sc >> 4u) * f32(qsum);
{% elif qtype == "Q3_K" %}
    let base = rowbase + (c >> 5u) * 110u;
    let e0 = (c & 31u) * 8u;
    let n = e0 >> 7u;
    let j = (e0 >> 5u) & 3u;
    let l = e0 & 31u;
    let i = 8u * n + 2u * j + (l >> 4u);
    let lo4 = ({{buf}}_u8(base + 96u + (i & 7u)) >> (4u * (i >> 3u))) & 15u;
    let hi2 = ({{buf}}_u8(base + 104u + (i & 3u)) >> (2u * (i >> 2u))) & 3u;
    let s = {{buf}}_f16(base + 108u) * f32(i32(lo4 | (hi2 << 4u)) - 32);
    let w = {{buf}}_u32x2(base + 32u + 32u * n + l);
    let hm = {{buf}}_u32x2(base + l);
    let hb = 4u * n + j;
    // low 2 bits + 4 * hmask bit, minus 4: a clear bit subtracts 4
    let a = ((w.x >> (2u * j)) & 0x03030303u) | (((hm.x >> hb) & 0x01010101u) << 2u);
    let b = ((w.y >> (2u * j)) & 0x03030303u) | (((hm.y >> hb) & 0x01010101u) << 2u);
    return s * f32(idot8(a, b, q) - 4 * qsum);
{% elif qtype == "IQ4_NL" or qtype == "MXFP4" %}
{% set bb = 18 if qtype == "IQ4_NL" else 17 %}
{% set tab = "KV_IQ4" if qtype == "IQ4_NL" else "KV_FP4" %}
    let base = rowbase + (c >> 2u) * {{bb}}u;
    let p = c & 3u;
    let w = {{buf}}_u32x2(base + {{bb - 16}}u + (p & 1u) * 8u);
    let sh = (p >> 1u) * 4u;
{% if qtype == "IQ4_NL" %}
    let d = {{buf}}_f16(base);
{% else %}
    let d = e8m0_half({{buf}}_u8(base));
{% endif %}
{% if qtype == "MXFP4" and FP4_LUT | default("") == "wg" %}
    return d * f32(idot8(kv_wg4(64u, w.x, sh), kv_wg4(64u, w.y, sh), q));
{% elif qtype == "MXFP4" %}
    return d * f32(idot8(fp4_pack4(w.x, sh), fp4_pack4(w.y, sh), q));
{% else %}
    return d * f32(idot8(kv_pack4({{tab}}, w.x, sh), kv_pack4({{tab}}, w.y, sh), q));
{% endif %}
{% elif qtype == "IQ4_XS" %}
    let base = rowbase + (c >> 5u) * 136u;
    let e0 = (c & 31u) * 8u;
    let sub = e0 >> 5u;
    let l = e0 & 31u;
    let ls = (({{buf}}_u8(base + 4u + (sub >> 1u)) >> (4u * (sub & 1u))) & 15u) | ((({{buf}}_w(base >> 2u) >> (16u + 2u * sub)) & 3u) << 4u);
    let w = {{buf}}_u32x2(base + 8u + 16u * sub + (l & 15u));
    let sh = (l >> 4u) * 4u;
    return {{buf}}_f16(base) * f32((i32(ls) - 32) * idot8(kv_pack4(KV_IQ4, w.x, sh), kv_pack4(KV_IQ4, w.y, sh), q));
{% else %}
    {{ raise("no int8 kernel for weight type " ~ qtype) }}
{% endif %}
}
{% if C64 | default(False) %}
// the dot product of weights [64c, 64c + 64) of the row with x's 64 int8 values, x's scales applied.
// Q4_K / Q5_K: the chunk is one 32-byte run of codes (sub-block 2p in the low nibbles, 2p + 1 in the
// high), so each sub-block's 6-bit scale and min are decoded once and its 32 products are 8 integer
// dot products summed as integers. Q6_K: four 16-weight pieces, one scale word, the codes read once
// as 17 + 9 words. Q4_0 / Q8_0 / IQ4_NL: the chunk's two blocks read once as 9 / 17 / 9 words, each
// block's 32 products summed as integers and scaled once. IQ4_XS: two sub-blocks, their scales decoded
// once, 8 aligned code words. Other types: eight 8-weight `_dq8` products.
fn {{buf}}_dq64(rowbase: u32, c: u32, x: X64) -> f32 {
{% if qtype == "Q4_K" or qtype == "Q5_K" %}
{% set bb = 144 if qtype == "Q4_K" else 176 %}
{% set qs_w = 4 if qtype == "Q4_K" else 12 %}
    let wi = (rowbase >> 2u) + (c >> 2u) * {{bb // 4}}u;     // the super-block's first word (4-byte aligned)
    let p = c & 3u;
{% if v4 %}
    // 16-byte loads: the block (144 / 176 bytes) and its header, qh and code runs start on 16 bytes
    // where a row does (K a multiple of 256 weights)
    let hv = {{buf}}[wi >> 2u];
    let dm = unpack2x16float(hv.x);
    let s0 = hv.y; let s1 = hv.z; let s2 = hv.w;
{% else %}
    let dm = unpack2x16float({{buf}}_w(wi));
    let s0 = {{buf}}_w(wi + 1u); let s1 = {{buf}}_w(wi + 2u); let s2 = {{buf}}_w(wi + 3u);
{% endif %}
    let sm0 = kq_scale_min(s0, s1, s2, 2u * p);
    let sm1 = kq_scale_min(s0, s1, s2, 2u * p + 1u);
    let o = wi + {{qs_w}}u + p * 8u;
{% if qtype == "Q5_K" %}
    let oh = wi + 4u;
{% endif %}
    var d0 = 0;
    var d1 = 0;
{% if v4 %}
    let cv0 = {{buf}}[o >> 2u]; let cv1 = {{buf}}[(o >> 2u) + 1u];
{% if qtype == "Q5_K" %}
    let hv0 = {{buf}}[oh >> 2u]; let hv1 = {{buf}}[(oh >> 2u) + 1u];
{% endif %}
{% endif %}
{% for i in range(8) %}
    {
{% if v4 %}
        let w = cv{{i // 4}}.{{"xyzw"[i % 4]}};
{% else %}
        let w = {{buf}}_w(o + {{i}}u);
{% endif %}
{% if qtype == "Q5_K" %}
{% if v4 %}
        let h = hv{{i // 4}}.{{"xyzw"[i % 4]}} >> (2u * p);
{% else %}
        let h = {{buf}}_w(oh + {{i}}u) >> (2u * p);
{% endif %}
        d0 += dot4I8Packed((w & LO4) | ((h & 0x01010101u) << 4u), x.q[{{i // 2}}].{{"xy"[i % 2]}});
        d1 += dot4I8Packed(((w >> 4u) & LO4) | ((h & 0x02020202u) << 3u), x.q[{{4 + i // 2}}].{{"xy"[i % 2]}});
{% else %}
        d0 += dot4I8Packed(w & LO4, x.q[{{i // 2}}].{{"xy"[i % 2]}});
        d1 += dot4I8Packed((w >> 4u) & LO4, x.q[{{4 + i // 2}}].{{"xy"[i % 2]}});
{% endif %}
    }
{% endfor %}
    let n0 = x.n[0] + x.n[1] + x.n[2] + x.n[3];
    let n1 = x.n[4] + x.n[5] + x.n[6] + x.n[7];
    return x.s.x * (dm.x * f32(sm0.x) * f32(d0) - dm.y * f32(sm0.y) * f32(n0))
         + x.s.y * (dm.x * f32(sm1.x) * f32(d1) - dm.y * f32(sm1.y) * f32(n1));
{% elif qtype == "Q6_K" %}
    // chunk q of the super-block: half n = q / 2 (ql bytes 64n.., qh 32n..), nibble h = q % 2; its
    // 16-weight pieces j = 0..3 have the scales sc[8n + 4h + j] (one word), low bits from ql[64n + 16j..]
    // and high bits from qh[32n + 16(j & 1)..] at shift 4h + 2(j / 2)
    let base = rowbase + (c >> 2u) * 210u;   // 2-byte aligned: words are read unaligned
    let n = (c >> 1u) & 1u;
    let h = c & 1u;
    let d = {{buf}}_f16(base + 208u);
    let scw = {{buf}}_u32(base + 192u + 8u * n + 4u * h);
    let il = (base + 64u * n) >> 2u;
    let ih = (base + 128u + 32u * n) >> 2u;
    let sh = (base & 3u) * 8u;              // 0 or 16, the same for ql and qh (64n, 128 + 32n are multiples of 4)
{% for i in range(17) %}
    let l{{i}} = {{buf}}_w(il + {{i}}u);
{% endfor %}
{% for i in range(9) %}
    let g{{i}} = {{buf}}_w(ih + {{i}}u);
{% endfor %}
    var t0 = 0;
    var t1 = 0;
{% for j in range(4) %}
    {
        var dj = 0;
{% for i in range(4) %}
{% set li = 4 * j + i %}
{% set hi = 4 * (j % 2) + i %}
        {
            let ql = (l{{li}} >> sh) | ((l{{li + 1}} << (31u - sh)) << 1u);
            let qh = (g{{hi}} >> sh) | ((g{{hi + 1}} << (31u - sh)) << 1u);
            let a = ((ql >> (4u * h)) & LO4) | (((qh >> (4u * h + {{2 * (j // 2)}}u)) & 0x03030303u) << 4u);
            dj += dot4I8Packed(a, x.q[{{2 * j + i // 2}}].{{"xy"[i % 2]}});
        }
{% endfor %}
        let sc = i32(scw << {{24 - 8 * j}}u) >> 24u;
        t{{j // 2}} += sc * (dj - 32 * (x.n[{{2 * j}}] + x.n[{{2 * j + 1}}]));
    }
{% endfor %}
    return d * (x.s.x * f32(t0) + x.s.y * f32(t1));
{% elif qtype == "Q4_0" %}
    // two whole blocks, 36 bytes from a 4-byte aligned offset (a row of K = 64n weights is 36n bytes):
    // 9 words, block 0's d and 16 code bytes from byte 0 (its codes 2 bytes off: funnel shifts),
    // block 1's d in the high half of word 4 and its codes words 5..8
    let wi = (rowbase >> 2u) + c * 9u;
{% for i in range(9) %}
    let a{{i}} = {{buf}}_w(wi + {{i}}u);
{% endfor %}
    var t0 = 0;
    var t1 = 0;
{% for m in range(4) %}
    {
        let q0 = (a{{m}} >> 16u) | (a{{m + 1}} << 16u);
        let q1 = a{{m + 5}};
        t0 += dot4I8Packed(q0 & LO4, x.q[{{m // 2}}].{{"xy"[m % 2]}}) + dot4I8Packed((q0 >> 4u) & LO4, x.q[{{2 + m // 2}}].{{"xy"[m % 2]}});
        t1 += dot4I8Packed(q1 & LO4, x.q[{{4 + m // 2}}].{{"xy"[m % 2]}}) + dot4I8Packed((q1 >> 4u) & LO4, x.q[{{6 + m // 2}}].{{"xy"[m % 2]}});
    }
{% endfor %}
    let n0 = x.n[0] + x.n[1] + x.n[2] + x.n[3];
    let n1 = x.n[4] + x.n[5] + x.n[6] + x.n[7];
    return x.s.x * unpack2x16float(a0).x * f32(t0 - 8 * n0) + x.s.y * unpack2x16float(a4).y * f32(t1 - 8 * n1);
{% elif qtype == "Q8_0" %}
    // two whole blocks, 68 bytes from a 4-byte aligned offset (K = 64n weights: 68n bytes a row): 17
    // words, block 0's d and 32 codes from byte 0 (codes 2 bytes off: funnel shifts), block 1's d in
    // the high half of word 8 and its codes words 9..16
    let wi = (rowbase >> 2u) + c * 17u;
{% for i in range(17) %}
    let a{{i}} = {{buf}}_w(wi + {{i}}u);
{% endfor %}
    var t0 = 0;
    var t1 = 0;
{% for m in range(8) %}
    t0 += dot4I8Packed((a{{m}} >> 16u) | (a{{m + 1}} << 16u), x.q[{{m // 2}}].{{"xy"[m % 2]}});
    t1 += dot4I8Packed(a{{m + 9}}, x.q[{{4 + m // 2}}].{{"xy"[m % 2]}});
{% endfor %}
    return x.s.x * unpack2x16float(a0).x * f32(t0) + x.s.y * unpack2x16float(a8).y * f32(t1);
{% elif qtype == "IQ4_XS" %}
    // sub-blocks 2p, 2p + 1 (p = c & 3) of the super-block (136 bytes, 4-byte aligned where a row of
    // K = 256n weights starts): d and scales_h in word 0, their two scale nibbles in byte p of word 1,
    // 16 code bytes each from word 2 + 8p (weight l < 16 the low nibble of byte l, 16 + l the high)
    let wi = (rowbase >> 2u) + (c >> 2u) * 34u;
    let p = c & 3u;
    let h = {{buf}}_w(wi);
    let sl = ({{buf}}_w(wi + 1u) >> (8u * p)) & 255u;
    let ls0 = i32((sl & 15u) | (((h >> (16u + 4u * p)) & 3u) << 4u)) - 32;
    let ls1 = i32((sl >> 4u) | (((h >> (18u + 4u * p)) & 3u) << 4u)) - 32;
    let o = wi + 2u + 8u * p;
    var t0 = 0;
    var t1 = 0;
{% for i in range(8) %}
    {
        let q = iq4_codes({{buf}}_w(o + {{i}}u));
        t{{i // 4}} += dot4I8Packed(q.x, x.q[{{4 * (i // 4) + (i % 4) // 2}}].{{"xy"[i % 2]}})
                     + dot4I8Packed(q.y, x.q[{{4 * (i // 4) + 2 + (i % 4) // 2}}].{{"xy"[i % 2]}});
    }
{% endfor %}
    return unpack2x16float(h).x * (x.s.x * f32(ls0 * t0) + x.s.y * f32(ls1 * t1));
{% elif qtype == "IQ4_NL" %}
    // two whole blocks as Q4_0's (36 bytes from a 4-byte aligned offset, K = 64n), codes looked up
    let wi = (rowbase >> 2u) + c * 9u;
{% for i in range(9) %}
    let a{{i}} = {{buf}}_w(wi + {{i}}u);
{% endfor %}
    var t0 = 0;
    var t1 = 0;
{% for m in range(4) %}
    {
        let q0 = iq4_codes((a{{m}} >> 16u) | (a{{m + 1}} << 16u));
        let q1 = iq4_codes(a{{m + 5}});
        t0 += dot4I8Packed(q0.x, x.q[{{m // 2}}].{{"xy"[m % 2]}}) + dot4I8Packed(q0.y, x.q[{{2 + m // 2}}].{{"xy"[m % 2]}});
        t1 += dot4I8Packed(q1.x, x.q[{{4 + m // 2}}].{{"xy"[m % 2]}}) + dot4I8Packed(q1.y, x.q[{{6 + m // 2}}].{{"xy"[m % 2]}});
    }
{% endfor %}
    return x.s.x * unpack2x16float(a0).x * f32(t0) + x.s.y * unpack2x16float(a4).y * f32(t1);
{% else %}
    var r = 0.0;
{% for i in range(8) %}
    r += {{buf}}_dq8(rowbase, c * 8u + {{i}}u, x.q[{{i}}], x.n[{{i}}]) * x.s.{{"xy"[i // 4]}};
{% endfor %}
    return r;
{% endif %}
}
{% endif %}
{% endif %}
{% endmacro %}
