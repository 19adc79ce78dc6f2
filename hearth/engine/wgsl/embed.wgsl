// Embedding lookup: x[i, :] = scale * dequant(table row ids[id_off + i]).  ids: u32; table: GGUF rows
// [n_vocab, d] in QTYPE; x: [n, d].  One workgroup per token, 8 weights per thread per step.
// A table larger than one storage binding comes in PARTS buffers w0.. of consecutive rows; part p
// starts at row s{p} (s0 = 0).
{% from "quant.wgsl" import quant_fns %}
{% include "quant.wgsl" %}
struct Params { d: u32, row_bytes: u32, scale: f32, n: u32, id_off: u32, s1: u32, s2: u32, s3: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
{% for p in range(PARTS) %}
@group(0) @binding({{3 + p}}) var<storage, read> w{{p}}: array<u32>;
{{ quant_fns("w" ~ p, QTYPE) }}
{% endfor %}

fn row8(id: u32, c: u32) -> Deq8 {
{% for p in range(PARTS - 1, 0, -1) %}
    if (id >= P.s{{p}}) { return w{{p}}_deq8((id - P.s{{p}}) * P.row_bytes, c); }
{% endfor %}
    return w0_deq8(id * P.row_bytes, c);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let i = wid.x + wid.y * nwg.x;
    if (i >= P.n) { return; }
    let id = ids[P.id_off + i];
    for (var c = t; c < P.d / 8u; c += 64u) {
        let v = row8(id, c);
        let o = i * P.d + c * 8u;
        x[o] = v.lo.x * P.scale; x[o + 1u] = v.lo.y * P.scale; x[o + 2u] = v.lo.z * P.scale; x[o + 3u] = v.lo.w * P.scale;
        x[o + 4u] = v.hi.x * P.scale; x[o + 5u] = v.hi.y * P.scale; x[o + 6u] = v.hi.z * P.scale; x[o + 7u] = v.hi.w * P.scale;
    }
}
