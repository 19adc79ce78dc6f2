// Per token and head: optional per-head RMSNorm of q/k (qwen3, gemma3), RoPE, then q to `qo`
// [n, n_head, hd] and k, v into the cache at position pos + token.
// Cache layout per layer: kc, vc float32 [n_kv, max_ctx, hd], or with KV_F16 float16 in u32 words
// (f16_kv.wgsl) [n_kv, max_ctx, hd / 2].  qkv: [n, (n_head + 2 n_kv) hd].
// cs: the RoPE table float32 [max_ctx, n_rot / 2, 2] (cos, sin) computed on the CPU exactly as the
// numpy backend computes it.  Normal RoPE rotates pairs (2i, 2i + 1), NeoX (i, i + n_rot / 2).
// One workgroup per (token, slot): slots [0, n_head) are q heads, [n_head, n_head + n_kv) kv heads.
const HD: u32 = {{HD}}u;
struct Params {
    n_head: u32, n_kv: u32, n_rot: u32, max_ctx: u32,
    neox: u32, eps: f32, _a: u32, _b: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> qo: array<f32>;
{% if KV_F16 | default(false) %}
@group(0) @binding(3) var<storage, read_write> kc: array<u32>;
@group(0) @binding(4) var<storage, read_write> vc: array<u32>;
{% include "f16_kv.wgsl" %}
{% else %}
@group(0) @binding(3) var<storage, read_write> kc: array<f32>;
@group(0) @binding(4) var<storage, read_write> vc: array<f32>;
{% endif %}
@group(0) @binding(5) var<storage, read> cs: array<f32>;
@group(0) @binding(6) var<storage, read> step: array<u32>;   // [pos, n]
{% if QK_NORM %}
@group(0) @binding(7) var<storage, read> qn: array<f32>;
@group(0) @binding(8) var<storage, read> kn: array<f32>;
{% endif %}

var<workgroup> v: array<f32, HD>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let slots = P.n_head + P.n_kv;
    let lin = wid.x + wid.y * nwg.x;
    let tok = lin / slots;
    let slot = lin % slots;
    let pos = step[0];
    if (tok >= step[1]) { return; }
    let stride = (P.n_head + 2u * P.n_kv) * HD;
    let is_q = slot < P.n_head;
    let src = tok * stride + slot * HD;       // q heads then k heads are contiguous in qkv
    for (var d = t; d < HD; d += 64u) { v[d] = qkv[src + d]; }
    workgroupBarrier();
{% if QK_NORM %}
    var ss = 0.0;
    for (var d = t; d < HD; d += 64u) { ss += v[d] * v[d]; }
    red[t] = ss;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) { red[t] += red[t + s]; }
        workgroupBarrier();
    }
    let inv = inverseSqrt(red[0] / f32(HD) + P.eps);
    workgroupBarrier();
    for (var d = t; d < HD; d += 64u) {
        if (is_q) { v[d] = v[d] * inv * qn[d]; } else { v[d] = v[d] * inv * kn[d]; }
    }
    workgroupBarrier();
{% endif %}
    let p = pos + tok;
    let half = P.n_rot / 2u;
    var a0 = 0.0; var b0 = 0.0; var a1 = 0.0; var b1 = 0.0;
    // each thread owns pairs t and t + 64 (HD <= 256 so at most 2 pairs per thread)
    for (var i = t; i < half; i += 64u) {
        var ia: u32; var ib: u32;
        if (P.neox != 0u) { ia = i; ib = i + half; } else { ia = 2u * i; ib = 2u * i + 1u; }
        let c = cs[(p * half + i) * 2u];
        let s = cs[(p * half + i) * 2u + 1u];
        let a = v[ia]; let b = v[ib];
        if (i == t) { a0 = a * c - b * s; b0 = a * s + b * c; } else { a1 = a * c - b * s; b1 = a * s + b * c; }
    }
    workgroupBarrier();
    for (var i = t; i < half; i += 64u) {
        var ia: u32; var ib: u32;
        if (P.neox != 0u) { ia = i; ib = i + half; } else { ia = 2u * i; ib = 2u * i + 1u; }
        if (i == t) { v[ia] = a0; v[ib] = b0; } else { v[ia] = a1; v[ib] = b1; }
    }
    workgroupBarrier();
    if (is_q) {
        let dst = (tok * P.n_head + slot) * HD;
        for (var d = t; d < HD; d += 64u) { qo[dst + d] = v[d]; }
    } else {
        let j = slot - P.n_head;
        let dst = (j * P.max_ctx + p) * HD;
        let vsrc = tok * stride + (P.n_head + P.n_kv + j) * HD;
{% if KV_F16 | default(false) %}
        for (var d = t; d < HD / 2u; d += 64u) {
            kc[dst / 2u + d] = pack_f16x2(v[2u * d], v[2u * d + 1u]);
            vc[dst / 2u + d] = pack_f16x2(qkv[vsrc + 2u * d], qkv[vsrc + 2u * d + 1u]);
        }
{% else %}
        for (var d = t; d < HD; d += 64u) { kc[dst + d] = v[d]; vc[dst + d] = qkv[vsrc + d]; }
{% endif %}
    }
}
