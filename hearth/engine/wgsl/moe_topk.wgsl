// The router's top K from the logits lg[E] (workgroup memory, bias included) of one token, as
// llama.cpp's build_moe_ffn: shared by the route kernel (moe_route.wgsl) and decode's gate/up
// product that takes the top k itself (moe_matvec.wgsl TOPK). GATING:
//   "softmax"        p = softmax(lg over all experts); top K of p; weights p[top], divided by
//                    max(sum, MIN_SUM) where NORM_W (qwen3moe)
//   "softmax_weight" top K of lg; weights softmax(lg[top])                        (gpt-oss)
// The top K by ranks: every thread counts, for its experts, the values that beat theirs (larger, or
// equal at a lower id), so expert e lands at slot rank(e) when that is below K: E steps a thread in
// parallel, where one thread's K scans took K E dependent steps. Needs in scope: tid (of 256
// threads), workgroup arrays lg [E], red [>= 256], sel [K] (f32) and sid [K] (u32). Leaves the ids
// best first (ties: the lower id, as a stable argsort of the negated values) in sid and, where
// `weights` (a bool expression, uniform over the workgroup) holds, their weights in sel; every
// thread in uniform control flow (barriers inside).
{% macro topk_decls(E, K) %}
const MIN_SUM: f32 = 6.103515625e-5;
var<workgroup> lg: array<f32, {{E}}>;
var<workgroup> sel: array<f32, {{K}}>;
var<workgroup> sid: array<u32, {{K}}>;
{% endmacro %}
{% macro topk(E, K, GATING, NORM_W, weights="true") %}
{% if GATING == "softmax" %}
    {
        // p = softmax(lg): the max, then exp and their sum, as tree reductions over the threads
        var m = lg[0];
        for (var e = tid; e < {{E}}u; e += 256u) { m = max(m, lg[e]); }
        red[tid] = m;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {
            if (tid < s) { red[tid] = max(red[tid], red[tid + s]); }
            workgroupBarrier();
        }
        let mx = red[0];
        workgroupBarrier();
        var sm = 0.0;
        for (var e = tid; e < {{E}}u; e += 256u) { let v = exp(lg[e] - mx); lg[e] = v; sm += v; }
        red[tid] = sm;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {
            if (tid < s) { red[tid] += red[tid + s]; }
            workgroupBarrier();
        }
        let sum = red[0];
        for (var e = tid; e < {{E}}u; e += 256u) { lg[e] = lg[e] / sum; }
        workgroupBarrier();
    }
{% elif GATING != "softmax_weight" %}
    {{ raise("unknown expert gating " ~ GATING) }}
{% endif %}
    // valid ids in every slot first: NaN logits rank 0 together and leave slots unfilled
    if (tid < {{K}}u) {
        sid[tid] = tid;
        sel[tid] = 0.0;
    }
    workgroupBarrier();
    for (var e = tid; e < {{E}}u; e += 256u) {
        let v = lg[e];
        var rank = 0u;
        for (var f = 0u; f < {{E}}u; f++) {
            let u = lg[f];
            rank += select(0u, 1u, u > v || (u == v && f < e));
        }
        if (rank < {{K}}u) {
            sid[rank] = e;
            sel[rank] = v;
        }
    }
    workgroupBarrier();
    if (tid == 0u && ({{weights}})) {
{% if GATING == "softmax" %}
{% if NORM_W %}
        var tot = 0.0;
        for (var s = 0u; s < {{K}}u; s++) { tot += sel[s]; }
        tot = max(tot, MIN_SUM);
        for (var s = 0u; s < {{K}}u; s++) { sel[s] = sel[s] / tot; }
{% endif %}
{% else %}
        var tot = 0.0;
        let top = sel[0];
        for (var s = 0u; s < {{K}}u; s++) { let v = exp(sel[s] - top); sel[s] = v; tot += v; }
        for (var s = 0u; s < {{K}}u; s++) { sel[s] = sel[s] / tot; }
{% endif %}
    }
    workgroupBarrier();
{% endmacro %}
