// Gated DeltaNet's short causal convolution (depthwise, kernel K = KM1 + 1), then SiLU, for n
// tokens, and its carried state (engine/models/delta_net.py causal_conv is the reference):
//   full = [state (KM1 rows); x (n rows)]        x: proj[t, 0:ch] (row stride ldp)
//   out[t, c] = silu(sum_i full[t + i, c] w[c, i])      out [n, ch]
//   state <- full[n : n + KM1]                   state [KM1, ch] at float offset st_off
// MODE "serial" (decode): one thread per channel walks the tokens in order (channels are
// independent); prefill: "rows" (a thread per (token, channel), the state only read) then "state"
// (a thread per channel moves the state on), so that no output waits on the token before it.
// Params: delta_common.wgsl's, as every Gated DeltaNet kernel's.
{% set MODE = MODE | default("serial") %}
const KM1: u32 = {{KM1}}u;
const K: u32 = KM1 + 1u;
{% from "delta_common.wgsl" import params %}
{{ params() }}
@group(0) @binding(1) var<storage, read> proj: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read> w: array<f32>;

fn full(idx: u32, c: u32) -> f32 {
    if (idx < KM1) { return state[P.st_off + idx * P.ch + c]; }
    return proj[(idx - KM1) * P.ldp + c];
}

{% if MODE == "rows" %}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let e = (wid.x + wid.y * nwg.x) * 64u + t;
    if (e >= P.n * P.ch) { return; }
    let tok = e / P.ch;
    let c = e % P.ch;
    var acc = full(tok, c) * w[c * K];
    for (var i = 1u; i < K; i++) { acc += full(tok + i, c) * w[c * K + i]; }
    out[tok * P.ch + c] = acc / (1.0 + exp(-acc));
}
{% else %}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let c = (wid.x + wid.y * nwg.x) * 64u + t;
    if (c >= P.ch) { return; }
{% if MODE == "serial" %}
    for (var tok = 0u; tok < P.n; tok++) {
        var acc = full(tok, c) * w[c * K];
        for (var i = 1u; i < K; i++) { acc += full(tok + i, c) * w[c * K + i]; }
        out[tok * P.ch + c] = acc / (1.0 + exp(-acc));
    }
{% endif %}
    var ns: array<f32, KM1>;
    for (var j = 0u; j < KM1; j++) { ns[j] = full(P.n + j, c); }
    for (var j = 0u; j < KM1; j++) { state[P.st_off + j * P.ch + c] = ns[j]; }
}
{% endif %}
