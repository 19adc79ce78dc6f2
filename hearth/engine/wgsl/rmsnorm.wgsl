// RMSNorm over rows of d: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * g.  With ADD (Gemma's post-norms):
// y[r] += norm(x[r]) * g, the residual add fused.  One workgroup of 256 threads per row.
{% from "rms_tree.wgsl" import inv_rms %}
struct Params { d: u32, n: u32, eps: f32, _a: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= P.n) { return; }
    let b = r * P.d;
    var ss = 0.0;
    for (var i = t; i < P.d; i += 256u) { ss += x[b + i] * x[b + i]; }
{{ inv_rms("ss", "red", "t", 256, "P.d") }}    for (var i = t; i < P.d; i += 256u) {
{% if ADD %}
        y[b + i] += x[b + i] * inv * g[i];
{% else %}
        y[b + i] = x[b + i] * inv * g[i];
{% endif %}
    }
}
