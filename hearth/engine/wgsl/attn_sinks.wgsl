// The merge of attention's split partials (attn_decode.wgsl pass 1, or attn_prefill.wgsl's split
// pass) with one learned sink logit per head (gpt-oss: attn_sinks.weight), which joins the softmax's
// denominator and adds no value, as ggml_soft_max_ext with sinks:
//   out = sum_s e^(m_s - M) o_s / (sum_s e^(m_s - M) l_s + e^(sink_h - M)),  M = max(max_s m_s, sink_h)
// (scores and sinks in the same units: q.k times the attention scale). PASS "decode": workgroup h
// merges head h's splits of the one query (partials [n_head, max_splits, HD + 2]; step = [pos, n]);
// "prefill": workgroup r = query * n_head + head merges its n_splits (partials [r, n_splits, HD + 2]).
// PASS "window" (decode, a windowed layer whose window a = W fits a workgroup of WS >= W threads):
// workgroup h scores head h's last min(kv_len, W) keys itself, thread t key t (as attn_decode.wgsl's
// split pass scores a chunk), and writes the merged output with the sink: the split pass and this
// merge in one dispatch, reading the window's keys and values only (the split pass reads every
// split's values past the window). Bindings: q [n_head, HD], k and v caches [n_kv, max_ctx, HD]
// (float16 with KV_F16), out [n_head, HD], sinks, step.
{% if PASS == "window" %}
{% include "attn_sinks_window.wgsl" %}
{% else %}
const HD: u32 = {{HD}}u;
const PW: u32 = HD + 2u;
struct Params {
    n_head: u32, n_kv: u32, max_ctx: u32, a: u32,   // a: max_splits (decode)
    scale: f32, b: u32, c: u32, d: u32,             // prefill: b = window, c = n_splits
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> sinks: array<f32>;     // [n_head]
{% if PASS == "decode" %}
@group(0) @binding(4) var<storage, read> step: array<u32>;
{% elif PASS not in ("prefill", "window") %}
{{ raise("attn_sinks pass " ~ PASS) }}
{% endif %}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
{% if PASS == "decode" %}
    let r = wid.x;                                   // head
    let h = r;
    let ns = (step[0] + step[1] + {{CHUNK}}u - 1u) / {{CHUNK}}u;
    let first = r * P.a;
{% else %}
    let r = wid.x + wid.y * nwg.x;                   // query * n_head + head
    let h = r % P.n_head;
    let ns = P.c;
    let first = r * ns;
{% endif %}
    let sk = sinks[h];
    var mx = sk;
    for (var s = 0u; s < ns; s++) { mx = max(mx, part[(first + s) * PW + HD]); }
    var l = exp(sk - mx);
    for (var s = 0u; s < ns; s++) {
        let b = (first + s) * PW;
        l += exp(part[b + HD] - mx) * part[b + HD + 1u];
    }
    for (var d = t; d < HD; d += 64u) {
        var o = 0.0;
        for (var s = 0u; s < ns; s++) {
            let b = (first + s) * PW;
            o += exp(part[b + HD] - mx) * part[b + d];
        }
        out[r * HD + d] = o / l;
    }
}
{% endif %}
