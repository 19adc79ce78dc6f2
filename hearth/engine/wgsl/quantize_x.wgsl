// x [K] (f32) to int8 blocks of 32 in global memory, once, for the matvecs built with Q8G
// (matvec.wgsl): long rows (the down products) then read 1.6 bytes per x instead of 4, and no
// workgroup quantizes x itself. One thread a block. xg [words] (ops.q8_words):
//   [0, K/4)              codes: chunk c (values 8c .. 8c + 7) in words 2c, 2c + 1, 4 int8 each
//   [K/4, K/4 + K/8)      sums: chunk c's 8 codes added (i32 bits), for weights with an offset
//   [K/4 + K/8, + K/32)   scales: block b's d (f32 bits)
{% from "q8_block.wgsl" import q8_block %}
struct Params {
    K: u32,          // values (a multiple of 32)
    x_off: u32,      // first element of x (a multiple of 4)
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xg: array<u32>;

struct X8 { lo: vec4<f32>, hi: vec4<f32> }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let bk = gid.x;
    if (bk >= P.K / 32u) { return; }
    let i = (P.x_off >> 2u) + bk * 8u;
{% for i in range(4) %}
    let v{{i}} = X8(x[i + {{2 * i}}u], x[i + {{2 * i + 1}}u]);
{% endfor %}
{% call q8_block() %}
    let ns = P.K / 4u;
    let ds = ns + P.K / 8u;
{% for i in range(4) %}
    xg[(bk * 4u + {{i}}u) * 2u] = pack4xI8(qa{{i}});
    xg[(bk * 4u + {{i}}u) * 2u + 1u] = pack4xI8(qb{{i}});
    xg[ns + bk * 4u + {{i}}u] = bitcast<u32>(qn{{i}});
{% endfor %}
    xg[ds + bk] = bitcast<u32>(d);
{% endcall %}
}
