// qwen35moe's shared-expert gate, in place: y[t, :m] *= sigmoid(dot(xn[t, :d], w)) for each token t
// (y: the shared expert's silu(gate) * up activations; scaling them scales its down product, which
// is linear). A workgroup a token: the dot product reduced in workgroup memory, then the scale.
struct Params { d: u32, m: u32, ldy: u32, n: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;     // [n, ldy]
@group(0) @binding(2) var<storage, read> xn: array<f32>;          // [n, d]
@group(0) @binding(3) var<storage, read> w: array<f32>;           // [d] ffn_gate_inp_shexp

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) l: u32) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= P.n) { return; }      // uniform per workgroup
    var s = 0.0;
    for (var i = l; i < P.d; i += 64u) { s += xn[t * P.d + i] * w[i]; }
    part[l] = s;
    workgroupBarrier();
    for (var h = 32u; h > 0u; h >>= 1u) {
        if (l < h) { part[l] += part[l + h]; }
        workgroupBarrier();
    }
    let g = 1.0 / (1.0 + exp(-part[0]));
    for (var j = l; j < P.m; j += 64u) { y[t * P.ldy + j] *= g; }
}
