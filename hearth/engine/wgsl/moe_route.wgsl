// Mixture-of-experts router for each of n tokens (one workgroup a token): the router's logits
// lg[e] = W_r[e] . xn[t] (+ b[e]) for E experts, then the top K and their weights, written to
// route[t] = [K expert ids (u32), K weights (f32 bits)], best first (ties: the lower id, as a stable
// argsort of the negated values). GATING, as llama.cpp's build_moe_ffn:
//   "softmax"        p = softmax(lg over all experts); top K of p; weights p[top], divided by
//                    max(sum, MIN_SUM) where NORM_W (qwen3moe)
//   "softmax_weight" top K of lg; weights softmax(lg[top])                        (gpt-oss)
// Logits: 8 row groups of 32 lanes, each lane summing a strided part of one expert's row, a tree
// in workgroup memory after; the top K is one thread's K scans over E values (E <= 4096).
const E: u32 = {{E}}u;
const K: u32 = {{K}}u;
const MIN_SUM: f32 = 6.103515625e-5;
struct Params { d: u32, n: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> xn: array<f32>;          // [n, d] the normed FFN input
@group(0) @binding(2) var<storage, read> wr: array<f32>;          // [E, d] router (ffn_gate_inp)
{% if BIAS %}
@group(0) @binding(3) var<storage, read> br: array<f32>;          // [E] router bias
@group(0) @binding(4) var<storage, read_write> route: array<u32>; // [n, 2 K]
{% else %}
@group(0) @binding(3) var<storage, read_write> route: array<u32>; // [n, 2 K]
{% endif %}

var<workgroup> lg: array<f32, E>;
var<workgroup> used: array<u32, E>;
var<workgroup> red: array<f32, 256>;
var<workgroup> sel: array<f32, K>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= P.n) { return; }
    let grp = tid / 32u;
    let lane = tid % 32u;
    let xb = t * P.d;
    for (var e0 = 0u; e0 < E; e0 += 8u) {
        let e = e0 + grp;
        var acc = 0.0;
        if (e < E) {
            let wb = e * P.d;
            for (var i = lane; i < P.d; i += 32u) { acc += xn[xb + i] * wr[wb + i]; }
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
            used[e] = 0u;
        }
        workgroupBarrier();
    }
    if (tid != 0u) { return; }
{% if GATING == "softmax" %}
    var mx = lg[0];
    for (var e = 1u; e < E; e++) { mx = max(mx, lg[e]); }
    var sum = 0.0;
    for (var e = 0u; e < E; e++) { let v = exp(lg[e] - mx); lg[e] = v; sum += v; }
    for (var e = 0u; e < E; e++) { lg[e] = lg[e] / sum; }
{% elif GATING != "softmax_weight" %}
    {{ raise("unknown expert gating " ~ GATING) }}
{% endif %}
    let rb = t * 2u * K;
    for (var s = 0u; s < K; s++) {
        var best = E;
        var bv = 0.0;
        for (var e = 0u; e < E; e++) {
            if (used[e] == 0u && (best == E || lg[e] > bv)) { best = e; bv = lg[e]; }
        }
        used[best] = 1u;
        route[rb + s] = best;
        sel[s] = bv;
    }
{% if GATING == "softmax" %}
{% if NORM_W %}
    var tot = 0.0;
    for (var s = 0u; s < K; s++) { tot += sel[s]; }
    tot = max(tot, MIN_SUM);
    for (var s = 0u; s < K; s++) { sel[s] = sel[s] / tot; }
{% endif %}
{% else %}
    var tot = 0.0;
    let top = sel[0];
    for (var s = 0u; s < K; s++) { let v = exp(sel[s] - top); sel[s] = v; tot += v; }
    for (var s = 0u; s < K; s++) { sel[s] = sel[s] / tot; }
{% endif %}
    for (var s = 0u; s < K; s++) { route[rb + K + s] = bitcast<u32>(sel[s]); }
}
