// The hybrid layers' output gates, in place:
//   "norm_silu"  Gated DeltaNet's output: o [n, hv, S] <- RMSNorm(o per head) * w * silu(z),
//                z = proj[t, z_off + h S + i] (row stride ldp); a thread per (token, head)
//   "sigmoid"    gated attention: y [n, width] <- y * sigmoid(gate), gate [n, width] at float offset
//                z_off of src; a thread a value
// Params: delta_common.wgsl's, as every Gated DeltaNet kernel's.
{% from "delta_common.wgsl" import params %}
{{ params() }}
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
{% if PASS == "norm_silu" %}
@group(0) @binding(3) var<storage, read> w: array<f32>;     // [S]

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = (wid.x + wid.y * nwg.x) * 64u + t;        // (token, head)
    if (r >= P.n * P.hv) { return; }
    let tok = r / P.hv;
    let h = r % P.hv;
    let b = r * P.S;
    var ss = 0.0;
    for (var i = 0u; i < P.S; i++) { ss += y[b + i] * y[b + i]; }
    let inv = inverseSqrt(ss / f32(P.S) + P.eps);
    let zb = tok * P.ldp + P.z_off + h * P.S;
    for (var i = 0u; i < P.S; i++) {
        let z = src[zb + i];
        y[b + i] = z / (1.0 + exp(-z)) * (y[b + i] * inv * w[i]);
    }
}
{% elif PASS == "sigmoid" %}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = (wid.x + wid.y * nwg.x) * 64u + t;        // P.ch: width of a row
    if (i >= P.n * P.ch) { return; }
    y[i] = y[i] / (1.0 + exp(-src[P.z_off + i]));
}
{% else %}{{ raise("gated_out.wgsl: no pass " ~ PASS) }}{% endif %}
