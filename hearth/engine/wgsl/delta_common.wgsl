{#
What the Gated DeltaNet kernels share, as macros, each with one owner here:
  params            the parameter struct of every one of them (delta_ops.DELTA_FIELDS, in its order)
  softplus          the function of the decay g = softplus(alpha + dt_bias) * a (delta_step, delta_net,
                    delta_chunk)
and the pieces of the chunked delta rule that delta_net.wgsl (HEARTH_GPU_DELTA_SCAN=old: the solve
inside the scan) and delta_chunk.wgsl (the default: the solve out of it) share:
  cumulative_decay  gs[0 .. C) <- its running sum (G: the cumulative log-decay in the chunk), by thread 0
  scan_memory       a scan workgroup's block of the state and of U
  state_in, state_out  rows j0 .. j0 + VB of head h's state M [hv, S_v, S_k] to and from mb, transposed
  chunk_rows        the chunk c's first token c0, its tokens nc, its matrices' base, thread t's token
  state_update      the end of a chunk: U <- U exp(G_last - G), then thread i, state row i of the
                    block: M^T <- exp(G_last) M^T + K^T U (K from conv's k head at kb); U > 1: U
                    tokens' loads at a time
Macros emit WGSL only: the names they read (t, h, j0, c, G, last, nc, c0, kb, P, M, conv) are the
calling kernel's.
#}
{% macro params() %}
struct Params {
    S: u32, hv: u32, hk: u32, ch: u32, ldp: u32, a_off: u32, b_off: u32, z_off: u32,
    n: u32, st_off: u32, m_off: u32, K: u32, eps: f32, _a: u32, _b: u32, _c: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
{% endmacro %}

{% macro softplus() %}
fn softplus(x: f32) -> f32 {
    if (x > 20.0) { return x; }
    return log(1.0 + exp(x));
}
{% endmacro %}

{% macro cumulative_decay() %}
    if (t == 0u) {
        var acc = 0.0;
        for (var s = 0u; s < C; s++) { acc += gs[s]; gs[s] = acc; }
    }
{% endmacro %}

{% macro scan_memory(VB) %}
const VB: u32 = {{VB}}u;
var<workgroup> mb: array<f32, S * VB>;     // [S_k, VB]: rows j0 .. j0 + VB of M, transposed
var<workgroup> ub: array<f32, C * VB>;     // [C, VB]: U (delta_net.wgsl: the right side, solved into U
                                           // in place), then U exp(G_last - G)
var<workgroup> gsh: array<f32, C>;
{% endmacro %}

{% macro state_in() %}
    for (var e = t; e < S * VB; e += C) {
        mb[(e % S) * VB + e / S] = M[P.m_off + (h * S + j0 + e / S) * S + e % S];
    }
{% endmacro %}

{% macro state_out() %}
    for (var e = t; e < S * VB; e += C) {
        M[P.m_off + (h * S + j0 + e / S) * S + e % S] = mb[(e % S) * VB + e / S];
    }
{% endmacro %}

{% macro chunk_rows() %}
        let c0 = c * C;
        let nc = min(C, P.n - c0);
        let base = (c * P.hv + h) * C * C;
        let tok = c0 + t;
        let live = t < nc;
{% endmacro %}

{% macro state_update(U=1) %}
        if (live) {
            let f = exp(last - G);
            for (var jj = 0u; jj < VB; jj++) { ub[t * VB + jj] *= f; }
        }
        workgroupBarrier();
        let el = exp(last);
        for (var i = t; i < S; i += C) {
            var acc: array<f32, VB>;
            for (var jj = 0u; jj < VB; jj++) { acc[jj] = el * mb[i * VB + jj]; }
            var t2 = 0u;
{% if U > 1 %}
            // U tokens' k loads issued before their products: the loop is bound by load latency
            for (; t2 + {{U}}u <= nc; t2 += {{U}}u) {
{% for x in range(U) %}
                let kv{{x}} = conv[(c0 + t2 + {{x}}u) * P.ch + kb + i];
{% endfor %}
                for (var jj = 0u; jj < VB; jj++) {
                    acc[jj] += {% for x in range(U) %}kv{{x}} * ub[(t2 + {{x}}u) * VB + jj]{{ " + " if not loop.last }}{% endfor %};
                }
            }
{% endif %}
            for (; t2 < nc; t2++) {
                let kv = conv[(c0 + t2) * P.ch + kb + i];
                for (var jj = 0u; jj < VB; jj++) { acc[jj] += kv * ub[t2 * VB + jj]; }
            }
            for (var jj = 0u; jj < VB; jj++) { mb[i * VB + jj] = acc[jj]; }
        }
        workgroupBarrier();
{% endmacro %}
