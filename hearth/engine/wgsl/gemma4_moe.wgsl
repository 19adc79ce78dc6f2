// Gemma 4's mixture-of-experts layer (gpu/gemma4_moe.py), one pass per PASS:
//   "combine": per row r of d (one workgroup a row), the FFN's two branches merged into the residual:
//              f = RMSNorm(mlp[r]) g1 + RMSNorm(moe[r]) g2        (post_ffw_norm_1, post_ffw_norm_2)
//              x[r] += RMSNorm(f) g                                (post_ffw_norm)
//              f is left in mlp[r]; moe[r] is set to 0, so the next layer's expert products, which add
//              into it, start from zero.
//   "expert_scale": per (token t, slot s) of route [n, 2 K]: w_s *= scale[e_s] (ffn_down_exps.scale,
//              one factor an expert; the down product is linear, so scaling its weight scales its output).
{% from "rms_tree.wgsl" import inv_rms %}
struct Params { d: u32, n: u32, eps: f32, _a: u32 }
@group(0) @binding(0) var<uniform> P: Params;
{% if PASS == "combine" %}
@group(0) @binding(1) var<storage, read_write> mlp: array<f32>;   // [n, d] the dense MLP's down output
@group(0) @binding(2) var<storage, read_write> moe: array<f32>;   // [n, d] the experts' weighted sum
@group(0) @binding(3) var<storage, read_write> x: array<f32>;     // [n, d] the residual
@group(0) @binding(4) var<storage, read> g1: array<f32>;          // [d] post_ffw_norm_1
@group(0) @binding(5) var<storage, read> g2: array<f32>;          // [d] post_ffw_norm_2
@group(0) @binding(6) var<storage, read> g: array<f32>;           // [d] post_ffw_norm

var<workgroup> ra: array<f32, 256>;
var<workgroup> rb: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= P.n) { return; }
    let b = r * P.d;
    var sa = 0.0;
    var sb = 0.0;
    for (var i = t; i < P.d; i += 256u) {
        sa += mlp[b + i] * mlp[b + i];
        sb += moe[b + i] * moe[b + i];
    }
    ra[t] = sa;
    rb[t] = sb;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s) {
            ra[t] += ra[t + s];
            rb[t] += rb[t + s];
        }
        workgroupBarrier();
    }
    let ia = inverseSqrt(ra[0] / f32(P.d) + P.eps);
    let ib = inverseSqrt(rb[0] / f32(P.d) + P.eps);
    workgroupBarrier();
    var sf = 0.0;
    for (var i = t; i < P.d; i += 256u) {
        let f = mlp[b + i] * ia * g1[i] + moe[b + i] * ib * g2[i];
        mlp[b + i] = f;
        moe[b + i] = 0.0;
        sf += f * f;
    }
{{ inv_rms("sf", "ra", "t", 256, "P.d") }}    // each thread reads back the f values it wrote itself
    for (var i = t; i < P.d; i += 256u) { x[b + i] += mlp[b + i] * inv * g[i]; }
}
{% elif PASS == "expert_scale" %}
const K: u32 = {{K}}u;
@group(0) @binding(1) var<storage, read_write> route: array<u32>;  // [n, 2 K] ids, then weights' bits
@group(0) @binding(2) var<storage, read> scale: array<f32>;        // [n_expert]

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * 256u;
    if (j >= P.n * K) { return; }
    let o = (j / K) * 2u * K;
    let s = j % K;
    route[o + K + s] = bitcast<u32>(bitcast<f32>(route[o + K + s]) * scale[route[o + s]]);
}
{% else %}
{{ raise("gemma4_moe.wgsl pass " ~ PASS) }}
{% endif %}
