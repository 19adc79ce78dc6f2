// Mixture-of-experts router for each of n tokens (one workgroup a token): the router's logits
// lg[e] = W_r[e] . xn[t] (+ b[e]) for E experts, then the top K and their weights, written to
// route[t] = [K expert ids (u32), K weights (f32 bits)], best first (ties: the lower id, as a stable
// argsort of the negated values); GATING and the top k: moe_topk.wgsl.
// Logits: 8 row groups of 32 lanes, each lane summing a strided part of one expert's row, a tree
// in workgroup memory after.
// NORM: the input is the residual x [n, d] and the kernel does the FFN's RMSNorm itself (weight g,
// as rmsnorm.wgsl computes it), writing xn for the experts; Q8 (with NORM): it also writes xn's rows
// as int8 blocks of 32 (quantize_rows.wgsl's layout and code, scales from word s_off) for the
// experts' int8-x products. Both save a dispatch a layer.
{% from "rms_tree.wgsl" import inv_rms %}
{% from "q8_block.wgsl" import q8_block %}
{% from "moe_topk.wgsl" import topk, topk_decls %}
{% set Q8 = Q8 | default(False) %}
// LOGITS (decode): binding 2 holds the logits [E] already (+ bias: the dense matvec computed them
// over many workgroups; one workgroup reading the whole router is slow on a large GPU); the kernel
// takes the top k (and with NORM still writes xn and its blocks).
{% set LOGITS = LOGITS | default(False) %}
{% if LOGITS and BIAS %}{{ raise("the router bias is in the logits already") }}{% endif %}
{% if Q8 and not NORM %}{{ raise("the route kernel writes int8 blocks of a norm it computes") }}{% endif %}
const E: u32 = {{E}}u;
{% if K > 256 %}{{ raise("a top k past 256 experts") }}{% endif %}
const K: u32 = {{K}}u;
struct Params { d: u32, n: u32, eps: f32, s_off: u32 }
@group(0) @binding(0) var<uniform> P: Params;
{% if NORM %}
@group(0) @binding(1) var<storage, read> x: array<f32>;           // [n, d] the residual
{% else %}
@group(0) @binding(1) var<storage, read> xn: array<f32>;          // [n, d] the normed FFN input
{% endif %}
@group(0) @binding(2) var<storage, read> wr: array<f32>;          // [E, d] router (ffn_gate_inp)
{% set nb = 3 %}
{% if BIAS %}
@group(0) @binding(3) var<storage, read> br: array<f32>;          // [E] router bias
{% set nb = 4 %}
{% endif %}
@group(0) @binding({{nb}}) var<storage, read_write> route: array<u32>; // [n, 2 K]
{% if NORM %}
@group(0) @binding({{nb + 1}}) var<storage, read> g: array<f32>;       // [d] the norm's weight
@group(0) @binding({{nb + 2}}) var<storage, read_write> xo: array<f32>; // [n, d] xn out
{% endif %}
{% if Q8 %}
@group(0) @binding({{nb + 3}}) var<storage, read_write> xq: array<u32>;  // xn as int8 blocks
struct X8 { lo: vec4<f32>, hi: vec4<f32> }
{% endif %}

var<workgroup> red: array<f32, 256>;
{{ topk_decls(E, K, TK_GROUPS | default(False)) }}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= P.n) { return; }
    let grp = tid / 32u;
    let lane = tid % 32u;
    let xb = t * P.d;
{% if NORM %}
    var ss = 0.0;
    for (var i = tid; i < P.d; i += 256u) { ss += x[xb + i] * x[xb + i]; }
{{ inv_rms("ss", "red", "tid", 256, "P.d") }}    workgroupBarrier();
    for (var i = tid; i < P.d; i += 256u) { xo[xb + i] = x[xb + i] * inv * g[i]; }
{% if Q8 %}
    for (var bk = tid; bk < P.d / 32u; bk += 256u) {
        let o = xb + bk * 32u;
{% for i in range(4) %}
        let v{{i}} = X8(vec4<f32>(x[o + {{8 * i}}u] * inv * g[bk * 32u + {{8 * i}}u], x[o + {{8 * i + 1}}u] * inv * g[bk * 32u + {{8 * i + 1}}u],
                                  x[o + {{8 * i + 2}}u] * inv * g[bk * 32u + {{8 * i + 2}}u], x[o + {{8 * i + 3}}u] * inv * g[bk * 32u + {{8 * i + 3}}u]),
                        vec4<f32>(x[o + {{8 * i + 4}}u] * inv * g[bk * 32u + {{8 * i + 4}}u], x[o + {{8 * i + 5}}u] * inv * g[bk * 32u + {{8 * i + 5}}u],
                                  x[o + {{8 * i + 6}}u] * inv * g[bk * 32u + {{8 * i + 6}}u], x[o + {{8 * i + 7}}u] * inv * g[bk * 32u + {{8 * i + 7}}u]));
{% endfor %}
{{ q8_block() }}
{% for i in range(4) %}
        xq[(xb + bk * 32u) / 4u + {{2 * i}}u] = pack4xI8(qa{{i}});
        xq[(xb + bk * 32u) / 4u + {{2 * i + 1}}u] = pack4xI8(qb{{i}});
{% endfor %}
        let so = P.s_off + 2u * (xb / 32u + bk);
        xq[so] = bitcast<u32>(d);
        xq[so + 1u] = bitcast<u32>(d * f32(qn0 + qn1 + qn2 + qn3));
    }
{% endif %}
{% endif %}
{% if LOGITS %}
    for (var e = tid; e < E; e += 256u) { lg[e] = wr[e]; }
    workgroupBarrier();
{% else %}
    for (var e0 = 0u; e0 < E; e0 += 8u) {
        let e = e0 + grp;
        var acc = 0.0;
        if (e < E) {
            let wb = e * P.d;
{% if NORM %}
            for (var i = lane; i < P.d; i += 32u) { acc += x[xb + i] * inv * g[i] * wr[wb + i]; }
{% else %}
            for (var i = lane; i < P.d; i += 32u) { acc += xn[xb + i] * wr[wb + i]; }
{% endif %}
        }
        red[tid] = acc;
        workgroupBarrier();
        for (var s = 16u; s > 0u; s >>= 1u) {
            if (lane < s) { red[tid] += red[tid + s]; }
            workgroupBarrier();
        }
        if (lane == 0u && e < E) {
{% if BIAS %}
            lg[e] = red[tid] + br[e];
{% else %}
            lg[e] = red[tid];
{% endif %}
        }
        workgroupBarrier();
    }
{% endif %}
{{ topk(E, K, GATING, NORM_W, "true", TK_GROUPS | default(False)) }}
    let rb = t * 2u * K;
    if (tid < K) {
        route[rb + tid] = sid[tid];
        route[rb + K + tid] = bitcast<u32>(sel[tid]);
    }
}
