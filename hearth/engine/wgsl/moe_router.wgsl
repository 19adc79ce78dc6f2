// Decode's router for one token over G = E / EPW workgroups (EPW experts each, 256 / EPW lanes an
// expert): every workgroup takes the FFN's RMSNorm of the residual x itself (weight g, as
// rmsnorm.wgsl computes it: d values, cheap beside its EPW router rows), then writes
//   logits[e] = W_r[e] . xn (+ b[e])     for its experts, and
//   xn's blocks of 32 bk = wid, wid + G, ... (f32 to xo; with Q8 also as int8 blocks, quantize_rows'
//   layout and code, scales from word s_off, for the experts' int8-x products),
// so the norm, the router and xn's blocks are one dispatch spread over the GPU; the top k follows
// inside decode's gate/up product (moe_matvec.wgsl TOPK), which reads these logits.
// SHX (qwen35moe's shared expert in the experts' passes, moe_decode.SHEXP_FUSE): one workgroup more,
// G, writes logits[E] = w_sh . xn, the shared expert's gate logit (ffn_gate_inp_shexp).
{% from "rms_tree.wgsl" import inv_rms %}
{% from "q8_block.wgsl" import q8_block %}
{% set Q8 = Q8 | default(False) %}
const E: u32 = {{E}}u;
const EPW: u32 = {{EPW}}u;
const LANES: u32 = {{256 // EPW}}u;
const G: u32 = E / EPW;                                            // workgroups of the routed experts
struct Params { d: u32, n: u32, eps: f32, s_off: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [d] the residual
@group(0) @binding(2) var<storage, read> wr: array<vec4<f32>>;     // [E, d] router (ffn_gate_inp)
@group(0) @binding(3) var<storage, read_write> logits: array<f32>; // [E]
@group(0) @binding(4) var<storage, read> g: array<vec4<f32>>;      // [d] the norm's weight
@group(0) @binding(5) var<storage, read_write> xo: array<vec4<f32>>; // [d] xn out
{% set nb = 6 %}
{% if Q8 %}
@group(0) @binding(6) var<storage, read_write> xq: array<u32>;     // xn as int8 blocks
struct X8 { lo: vec4<f32>, hi: vec4<f32> }
{% set nb = 7 %}
{% endif %}
{% if BIAS %}
@group(0) @binding({{nb}}) var<storage, read> br: array<f32>;      // [E] router bias
{% set nb = nb + 1 %}
{% endif %}
{% if SHX %}
@group(0) @binding({{nb}}) var<storage, read> wsh: array<vec4<f32>>; // [d] the shared expert's gate
{% endif %}

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let d4 = P.d / 4u;
    var ss = 0.0;
    for (var i = tid; i < d4; i += 256u) { ss += dot(x[i], x[i]); }
{{ inv_rms("ss", "red", "tid", 256, "P.d") }}    workgroupBarrier();
    // this workgroup's share of xn's blocks: one block of 32 a thread
    let bk = wid.x + G * tid;
    if (bk < P.d / 32u && wid.x < G) {
{% for i in range(4) %}
        let v{{i}}_lo = x[bk * 8u + {{2 * i}}u] * inv * g[bk * 8u + {{2 * i}}u];
        let v{{i}}_hi = x[bk * 8u + {{2 * i + 1}}u] * inv * g[bk * 8u + {{2 * i + 1}}u];
        xo[bk * 8u + {{2 * i}}u] = v{{i}}_lo;
        xo[bk * 8u + {{2 * i + 1}}u] = v{{i}}_hi;
{% endfor %}
{% if Q8 %}
{% for i in range(4) %}
        let v{{i}} = X8(v{{i}}_lo, v{{i}}_hi);
{% endfor %}
{{ q8_block() }}
{% for i in range(4) %}
        xq[bk * 8u + {{2 * i}}u] = pack4xI8(qa{{i}});
        xq[bk * 8u + {{2 * i + 1}}u] = pack4xI8(qb{{i}});
{% endfor %}
        xq[P.s_off + 2u * bk] = bitcast<u32>(d);
        xq[P.s_off + 2u * bk + 1u] = bitcast<u32>(d * f32(qn0 + qn1 + qn2 + qn3));
{% endif %}
    }
    // the logits of this workgroup's experts: LANES lanes an expert, a tree after
    let grp = tid / LANES;
    let lane = tid % LANES;
    let e = wid.x * EPW + grp;
    var acc = 0.0;
{% if SHX %}
    if (wid.x == G) {
        for (var i = lane; i < d4; i += LANES) { acc += dot(x[i] * g[i], wsh[i]); }
    } else {
        for (var i = lane; i < d4; i += LANES) { acc += dot(x[i] * g[i], wr[e * d4 + i]); }
    }
{% else %}
    for (var i = lane; i < d4; i += LANES) { acc += dot(x[i] * g[i], wr[e * d4 + i]); }
{% endif %}
    red[tid] = acc * inv;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) { red[tid] += red[tid + s]; }
        workgroupBarrier();
    }
{% if SHX %}
    if (wid.x == G) {
        if (tid == 0u) { logits[E] = red[0]; }
        return;
    }
{% endif %}
    if (lane == 0u) {
{% if BIAS %}
        logits[e] = red[tid] + br[e];
{% else %}
        logits[e] = red[tid];
{% endif %}
    }
}
