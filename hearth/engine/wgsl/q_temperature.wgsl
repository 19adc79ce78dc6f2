// Llama 4's attention temperature tuning (mistral3): each token's q row [width] times the factor
// of its position, tq[pos + r]; tq float32 [max_ctx] holds 1 + s ln(floor(p / n) + 1), computed on
// the CPU as the numpy backend computes it (float64, then float32), so the product is the same.
// q: [n, width] rotated queries; step: [pos, n, ...]. One workgroup per token.
struct Params { width: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read> tq: array<f32>;
@group(0) @binding(3) var<storage, read> step: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= step[1]) { return; }
    let f = tq[step[0] + r];
    let b = r * P.width;
    for (var i = t; i < P.width; i += 64u) { q[b + i] = q[b + i] * f; }
}
