// The store of one output of a prefill product, Y[tok, y_off + r] = v (tok < n, r < M; others are
// the padding of a partial tile and are dropped): plus the bias; EPI_GLU: Y holds gate = X Wg^T
// already and v is up, so Y = act(gate) * v in place; RESIDUAL: added to Y. Included by the matmul
// kernels after their bindings (P, y, b).
fn store_y(tok: u32, r: u32, v0: f32) {
    if (tok >= P.n || r >= P.M) {
        return;
    }
    var v = v0;
{% if BIAS %}
    v += b[r];
{% endif %}
    let o = tok * P.ldy + P.y_off + r;
{% if EPI_GLU %}
    let gt = y[o];
{% if ACT == "silu" %}
    v = gt / (1.0 + exp(-gt)) * v;
{% else %}
    v = 0.5 * gt * (1.0 + tanh(clamp(0.7978845608028654 * (gt + 0.044715 * gt * gt * gt), -15.0, 15.0))) * v;
{% endif %}
{% endif %}
{% if RESIDUAL %}
    y[o] += v;
{% else %}
    y[o] = v;
{% endif %}
}
