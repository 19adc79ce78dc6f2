{#
The pieces of the chunked delta rule that delta_net.wgsl (HEARTH_GPU_DELTA_SCAN=old: the solve
inside the scan) and delta_chunk.wgsl (the default: the solve out of it) share, as macros:
  cumulative_decay  gs[0 .. C) <- its running sum (G: the cumulative log-decay in the chunk), by thread 0
  scan_memory       a scan workgroup's block of the state and of U
  state_in, state_out  rows j0 .. j0 + VB of head h's state M [hv, S_v, S_k] to and from mb, transposed
  chunk_rows        the chunk c's first token c0, its tokens nc, its matrices' base, thread t's token
  state_update      the end of a chunk: U <- U exp(G_last - G), then thread i, state row i of the
                    block: M^T <- exp(G_last) M^T + K^T U (K from conv's k head at kb)
Macros emit WGSL only: the names they read (t, h, j0, c, G, last, nc, c0, kb, P, M, conv) are the
calling kernel's.
#}
{% macro cumulative_decay() %}
    if (t == 0u) {
        var acc = 0.0;
        for (var s = 0u; s < C; s++) { acc += gs[s]; gs[s] = acc; }
    }
{% endmacro %}

{% macro scan_memory(VB) %}
const VB: u32 = {{VB}}u;
var<workgroup> mb: array<f32, S * VB>;     // [S_k, VB]: rows j0 .. j0 + VB of M, transposed
var<workgroup> ub: array<f32, C * VB>;     // [C, VB]: U (delta_net.wgsl: the right side, solved into U in place), then U exp(G_last - G)
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

{% macro state_update() %}
        if (live) {
            let f = exp(last - G);
            for (var jj = 0u; jj < VB; jj++) { ub[t * VB + jj] *= f; }
        }
        workgroupBarrier();
        let el = exp(last);
        for (var i = t; i < S; i += C) {
            var acc: array<f32, VB>;
            for (var jj = 0u; jj < VB; jj++) { acc[jj] = el * mb[i * VB + jj]; }
            for (var t2 = 0u; t2 < nc; t2++) {
                let kv = conv[(c0 + t2) * P.ch + kb + i];
                for (var jj = 0u; jj < VB; jj++) { acc[jj] += kv * ub[t2 * VB + jj]; }
            }
            for (var jj = 0u; jj < VB; jj++) { mb[i * VB + jj] = acc[jj]; }
        }
        workgroupBarrier();
{% endmacro %}
