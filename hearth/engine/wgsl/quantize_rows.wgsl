// X [n, ldx] f32 to int8 blocks of 32 a row, for the int8 prefill product (matmul8.wgsl), with
// quantize_x's code (q8_block.wgsl: scale d = max |x| / 127, codes round(x / d)), so a block has the
// same bits whichever pass wrote it. A thread a chunk of 8 values; the 4 threads of a block share
// their maxima and code sums through workgroup memory. xq [words] (ops.q8_rows_words):
//   [0, n K/4)               codes: row t's chunk c (values 8c .. 8c + 7) in words t K/4 + 2c, + 1
//   [s_off, s_off + n K/16)  per block (row t, block b) at s_off + 2 (t K/32 + b): d, then d * (sum
//                            of its 32 codes) (f32 bits), for weights with an offset (Q4_K's mins)
{% from "q8_block.wgsl" import q8_scale, q8_codes %}
struct Params {
    K: u32,          // values a row (a multiple of 32)
    n: u32,          // rows
    ldx: u32,        // X's row stride (a multiple of 4)
    s_off: u32,      // first word of the scales
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;

struct X8 { lo: vec4<f32>, hi: vec4<f32> }
var<workgroup> mxs: array<f32, 256>;   // [thread] max |x| of its chunk
var<workgroup> sms: array<i32, 256>;   // [thread] the sum of its chunk's codes

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let c = (wid.x + wid.y * nwg.x) * 256u + tid;     // chunk over all rows
    let cr = P.K / 8u;                                // chunks a row
    let ok = c < cr * P.n;
    let t = c / cr;
    let cc = c % cr;
    var v0 = X8(vec4<f32>(0.0), vec4<f32>(0.0));
    if (ok) {
        let i = t * (P.ldx / 4u) + cc * 2u;
        v0 = X8(x[i], x[i + 1u]);
    }
    let m = max(abs(v0.lo), abs(v0.hi));
    mxs[tid] = max(max(m.x, m.y), max(m.z, m.w));
    workgroupBarrier();
    let b = tid & ~3u;                                // chunks of a block: 4 consecutive threads (K/8 % 4 == 0)
    let amax = max(max(mxs[b], mxs[b + 1u]), max(mxs[b + 2u], mxs[b + 3u]));
{{ q8_scale("amax") }}
{{ q8_codes(0) }}
    sms[tid] = qn0;
    workgroupBarrier();
    if (!ok) { return; }
    xq[t * (P.K / 4u) + cc * 2u] = pack4xI8(qa0);
    xq[t * (P.K / 4u) + cc * 2u + 1u] = pack4xI8(qb0);
    if ((tid & 3u) == 0u) {
        let sum = sms[b] + sms[b + 1u] + sms[b + 2u] + sms[b + 3u];
        let o = P.s_off + 2u * (t * (P.K / 32u) + cc / 4u);
        xq[o] = bitcast<u32>(d);
        xq[o + 1u] = bitcast<u32>(d * f32(sum));
    }
}
