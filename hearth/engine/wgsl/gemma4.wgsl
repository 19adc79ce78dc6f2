// Gemma 4's own passes (gpu/gemma4.py), one per PASS:
//   "qkv":      per (token, slot): q heads and k heads RMSNorm'd over the head with their weights, then
//               NeoX RoPE over the first n_rot dims; v heads RMSNorm'd without a weight. q goes to
//               qo [n, n_head, HD]; k and v into the cache at position pos + token. n_kv = 0 (a layer
//               that reads another layer's K/V) writes q only. qkv: [n, stride]; q at column 0, k at
//               n_head HD, v at v_off (= k's column where the layer has no attn_v: v is k's projection).
//   "ple_in":   the per-layer inputs, per row r of npl (token, layer):
//               a[r] = (RMSNorm(b[r] * scale) * g + a[r]) * (1 / sqrt 2); a holds the scaled token rows.
//   "gelu_mul": a[r, j] = gelu_tanh(a[r, j]) * b[r ldb + off + j], j < npl, a's rows `stride` apart
//               (the per-layer branch's gate times the layer's input).
//   "scale":    a[i] *= scale (layer_output_scale).
//   "norm_add_scale": per row r of `stride` (= d): a[r] = (a[r] + RMSNorm(b[r]) g) * scale: the per-layer
//               branch's post-norm, residual add and layer_output_scale in one pass.
//   "softcap":  a[i] = cap tanh(a[i] / cap) (the final logits).
// Elementwise passes: 256 threads a workgroup, element (wid.x + wid.y nwg.x) 256 + t, count first.
{% from "rms_tree.wgsl" import inv_rms %}
struct Params {
    n_head: u32, n_kv: u32, n_rot: u32, max_ctx: u32,
    stride: u32, v_off: u32, eps: f32, scale: f32,
    count: u32, npl: u32, ldb: u32, off: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
{% if PASS == "qkv" %}
const HD: u32 = {{HD}}u;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> qo: array<f32>;
{% if KV_F16 %}
@group(0) @binding(3) var<storage, read_write> kc: array<u32>;
@group(0) @binding(4) var<storage, read_write> vc: array<u32>;
{% include "f16_kv.wgsl" %}
{% else %}
@group(0) @binding(3) var<storage, read_write> kc: array<f32>;
@group(0) @binding(4) var<storage, read_write> vc: array<f32>;
{% endif %}
@group(0) @binding(5) var<storage, read> cs: array<f32>;      // [max_ctx, n_rot / 2, 2] (cos, sin)
@group(0) @binding(6) var<storage, read> step: array<u32>;    // [pos, n]
@group(0) @binding(7) var<storage, read> qn: array<f32>;      // [HD]
@group(0) @binding(8) var<storage, read> kn: array<f32>;      // [HD] (qn again where n_kv = 0)

var<workgroup> v: array<f32, HD>;
var<workgroup> w: array<f32, HD>;
var<workgroup> red: array<f32, 64>;

// 1 / sqrt(mean(v^2) + eps) over the workgroup's v
fn rms_inv(t: u32) -> f32 {
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
    return inv;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let slots = P.n_head + P.n_kv;
    let lin = wid.x + wid.y * nwg.x;
    let tok = lin / slots;
    let slot = lin % slots;
    if (tok >= step[1]) { return; }
    let p = step[0] + tok;
    let is_q = slot < P.n_head;
    let row = tok * P.stride;
    for (var d = t; d < HD; d += 64u) { v[d] = qkv[row + slot * HD + d]; }
    workgroupBarrier();
    let inv = rms_inv(t);
    for (var d = t; d < HD; d += 64u) {
        if (is_q) { v[d] = v[d] * inv * qn[d]; } else { v[d] = v[d] * inv * kn[d]; }
    }
    workgroupBarrier();
    let half = P.n_rot / 2u;
    for (var i = t; i < half; i += 64u) {
        let c = cs[(p * half + i) * 2u];
        let s = cs[(p * half + i) * 2u + 1u];
        let a = v[i];
        let b = v[i + half];
        w[i] = a * c - b * s;
        w[i + half] = a * s + b * c;
    }
    for (var d = P.n_rot + t; d < HD; d += 64u) { w[d] = v[d]; }
    workgroupBarrier();
    // v's head (k slots only; the q slots load zeros so that every workgroup reaches the barriers)
    let j = select(0u, slot - P.n_head, !is_q);
    for (var d = t; d < HD; d += 64u) { v[d] = select(qkv[row + P.v_off + j * HD + d], 0.0, is_q); }
    workgroupBarrier();
    let vinv = rms_inv(t);
    if (is_q) {
        let dst = (tok * P.n_head + slot) * HD;
        for (var d = t; d < HD; d += 64u) { qo[dst + d] = w[d]; }
    } else {
        let dst = (j * P.max_ctx + p) * HD;
{% if KV_F16 %}
        for (var d = t; d < HD / 2u; d += 64u) {
            kc[dst / 2u + d] = pack_f16x2(w[2u * d], w[2u * d + 1u]);
            vc[dst / 2u + d] = pack_f16x2(v[2u * d] * vinv, v[2u * d + 1u] * vinv);
        }
{% else %}
        for (var d = t; d < HD; d += 64u) { kc[dst + d] = w[d]; vc[dst + d] = v[d] * vinv; }
{% endif %}
    }
}
{% elif PASS == "ple_in" %}
@group(0) @binding(1) var<storage, read_write> a: array<f32>;   // [rows, npl] token rows, then the result
@group(0) @binding(2) var<storage, read> b: array<f32>;         // [rows, npl] per_layer_model_proj x0
@group(0) @binding(3) var<storage, read> g: array<f32>;         // [npl] per_layer_proj_norm

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= P.count) { return; }
    let base = r * P.npl;
    var ss = 0.0;
    for (var d = t; d < P.npl; d += 64u) { let x = b[base + d] * P.scale; ss += x * x; }
{{ inv_rms("ss", "red", "t", 64, "P.npl") }}    for (var d = t; d < P.npl; d += 64u) {
        a[base + d] = (b[base + d] * P.scale * inv * g[d] + a[base + d]) * 0.7071067811865476;
    }
}
{% elif PASS == "norm_add_scale" %}
@group(0) @binding(1) var<storage, read> b: array<f32>;         // [rows, stride] the branch's output
@group(0) @binding(2) var<storage, read_write> a: array<f32>;   // [rows, stride] the residual stream
@group(0) @binding(3) var<storage, read> g: array<f32>;         // [stride] post_norm

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= P.count) { return; }
    let base = r * P.stride;
    var ss = 0.0;
    for (var d = t; d < P.stride; d += 256u) { ss += b[base + d] * b[base + d]; }
    red[t] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s) { red[t] += red[t + s]; }
        workgroupBarrier();
    }
    let inv = inverseSqrt(red[0] / f32(P.stride) + P.eps);
    for (var d = t; d < P.stride; d += 256u) {
        a[base + d] = (a[base + d] + b[base + d] * inv * g[d]) * P.scale;
    }
}
{% else %}
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
{% if PASS == "gelu_mul" %}
@group(0) @binding(2) var<storage, read> b: array<f32>;
{% endif %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + t;
    if (i >= P.count) { return; }
{% if PASS == "gelu_mul" %}
    let ai = (i / P.npl) * P.stride + i % P.npl;
    let x = a[ai];
    let u = b[(i / P.npl) * P.ldb + P.off + i % P.npl];
    a[ai] = 0.5 * x * (1.0 + tanh(clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -15.0, 15.0))) * u;
{% elif PASS == "scale" %}
    a[i] = a[i] * P.scale;
{% else %}
    a[i] = P.scale * tanh(clamp(a[i] / P.scale, -15.0, 15.0));
{% endif %}
}
{% endif %}
