// x [K] (f32) to int8 blocks of 32 in global memory, once, for the matvecs built with Q8G
// (matvec.wgsl): long rows (the down products) then read 1.6 bytes per x instead of 4, and no
// workgroup quantizes x itself. A thread a chunk of 8 values (the 4 threads of a block share their
// maxima through workgroup memory: max is exact, so d is the block's own). xg [words] (ops.q8_words):
//   [0, K/4)              codes: chunk c (values 8c .. 8c + 7) in words 2c, 2c + 1, 4 int8 each
//   [K/4, K/4 + K/8)      sums: chunk c's 8 codes added (i32 bits), for weights with an offset
//   [K/4 + K/8, + K/32)   scales: block b's d (f32 bits)
{% from "q8_block.wgsl" import q8_scale, q8_codes %}
struct Params {
    K: u32,          // values (a multiple of 32)
    x_off: u32,      // first element of x (a multiple of 4)
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xg: array<u32>;

struct X8 { lo: vec4<f32>, hi: vec4<f32> }
var<workgroup> mxs: array<f32, 256>;   // [thread] max |x| of its chunk

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let c = wid.x * 256u + tid;
    let nc = P.K / 8u;
    var v0 = X8(vec4<f32>(0.0), vec4<f32>(0.0));
    if (c < nc) {
        let i = (P.x_off >> 2u) + c * 2u;
        v0 = X8(x[i], x[i + 1u]);
    }
    let m = max(abs(v0.lo), abs(v0.hi));
    mxs[tid] = max(max(m.x, m.y), max(m.z, m.w));
    workgroupBarrier();
    if (c >= nc) { return; }
    let b = tid & ~3u;
    let amax = max(max(mxs[b], mxs[b + 1u]), max(mxs[b + 2u], mxs[b + 3u]));
{{ q8_scale("amax") }}
{{ q8_codes(0) }}
    xg[c * 2u] = pack4xI8(qa0);
    xg[c * 2u + 1u] = pack4xI8(qb0);
    xg[nc * 2u + c] = bitcast<u32>(qn0);
    if ((tid & 3u) == 0u) { xg[nc * 3u + c / 4u] = bitcast<u32>(d); }
}
