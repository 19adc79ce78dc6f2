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
// GROUPS (E a multiple of 32, at least 64): the ranks in two rounds, E / 32 + C steps a thread
// instead of E: each expert's rank within its group of 32 (an expert of the top K is among its
// group's top min(K, 32)), those candidates (C = E / 32 groups x min(K, 32)) to cv / ci, then each
// candidate's rank among them, which is its rank overall where that is below K (everything that
// beats a top-K expert is a candidate). Decode's gate/up product runs this in every workgroup, so
// its cost is paid hundreds of times a layer (moe_decode.TOPK_GROUPS).
// SHARED (qwen35moe's shared expert as one more slot, moe_decode.SHEXP_FUSE): lg [E + 1] holds the
// shared expert's gate logit at E; slot K gets id E and weight sigmoid(lg[E]) (sid, sel [K + 1]).
{% macro topk_groups(E, K, groups) %}{{ "1" if groups and E % 32 == 0 and E >= 64 else "" }}{% endmacro %}
{% macro topk_decls(E, K, groups=False, shared=False) %}
const MIN_SUM: f32 = 6.103515625e-5;
var<workgroup> lg: array<f32, {{E + (1 if shared else 0)}}>;
var<workgroup> sel: array<f32, {{K + (1 if shared else 0)}}>;
var<workgroup> sid: array<u32, {{K + (1 if shared else 0)}}>;
{% if topk_groups(E, K, groups) %}
var<workgroup> cv: array<f32, {{(E // 32) * [K, 32] | min}}>;
var<workgroup> ci: array<u32, {{(E // 32) * [K, 32] | min}}>;
{% endif %}
{% endmacro %}
{% macro topk(E, K, GATING, NORM_W, weights="true", groups=False, shared=False) %}
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
{% if shared %}
    if (tid == {{K}}u) {
        sid[tid] = {{E}}u;
        sel[tid] = 1.0 / (1.0 + exp(-lg[{{E}}]));
    }
{% endif %}
{% if topk_groups(E, K, groups) %}
{% set KC = [K, 32] | min %}
{% set C = (E // 32) * KC %}
    for (var c = tid; c < {{C}}u; c += 256u) {
        ci[c] = (c / {{KC}}u) * 32u + c % {{KC}}u;
        cv[c] = lg[ci[c]];
    }
    workgroupBarrier();
    for (var e = tid; e < {{E}}u; e += 256u) {
        let v = lg[e];
        let g0 = e & ~31u;
        var rank = 0u;
        for (var f = g0; f < g0 + 32u; f++) {
            let u = lg[f];
            rank += select(0u, 1u, u > v || (u == v && f < e));
        }
        if (rank < {{KC}}u) {
            cv[(g0 / 32u) * {{KC}}u + rank] = v;
            ci[(g0 / 32u) * {{KC}}u + rank] = e;
        }
    }
    workgroupBarrier();
    for (var c = tid; c < {{C}}u; c += 256u) {
        let v = cv[c];
        let e = ci[c];
        var rank = 0u;
        for (var f = 0u; f < {{C}}u; f++) {
            let u = cv[f];
            rank += select(0u, 1u, u > v || (u == v && ci[f] < e));
        }
        if (rank < {{K}}u) {
            sid[rank] = e;
            sel[rank] = v;
        }
    }
{% else %}
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
{% endif %}
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
