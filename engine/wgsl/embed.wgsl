// Embedding lookup: x[i, :] = scale * dequant(table row ids[id_off + i]).  ids: u32; table: GGUF rows
// [n_vocab, d] in QTYPE; x: [n, d].  One workgroup per token, 8 weights per thread per step.
{% from "quant.wgsl" import quant_fns %}
{% include "quant.wgsl" %}
struct Params { d: u32, row_bytes: u32, scale: f32, n: u32, id_off: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;
{{ quant_fns("w", QTYPE) }}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = wid.x + wid.y * nwg.x;
    if (i >= P.n) { return; }
    let rb = ids[P.id_off + i] * P.row_bytes;
    for (var c = t; c < P.d / 8u; c += 64u) {
        let v = w_deq8(rb, c);
        let o = i * P.d + c * 8u;
        x[o] = v.lo.x * P.scale; x[o + 1u] = v.lo.y * P.scale; x[o + 2u] = v.lo.z * P.scale; x[o + 3u] = v.lo.w * P.scale;
        x[o + 4u] = v.hi.x * P.scale; x[o + 5u] = v.hi.y * P.scale; x[o + 6u] = v.hi.z * P.scale; x[o + 7u] = v.hi.w * P.scale;
    }
}
