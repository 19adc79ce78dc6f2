// The residual add of a prefill chunk's expert outputs: y[t, r] += sum_s yd[t SLOTS + s, r], in slot
// order (each yd row already weighted by its slot's routing weight: moe_matvec.wgsl "down" with ORDER).
const SLOTS: u32 = {{SLOTS}}u;
struct Params { d: u32, n: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> yd: array<f32>;          // [n SLOTS, d]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;     // [n, d]

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n * P.d) { return; }
    let t = i / P.d;
    let r = i % P.d;
    var v = 0.0;
    for (var s = 0u; s < SLOTS; s++) { v += yd[(t * SLOTS + s) * P.d + r]; }
    y[i] += v;
}
