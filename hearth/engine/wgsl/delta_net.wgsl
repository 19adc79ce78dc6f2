// Gated DeltaNet on the GPU (engine/models/delta_net.py is the numpy reference and derives the
// chunked form; delta_chunk.wgsl, the default prefill, takes the solve out of the scan; what prep and
// scan share with it is delta_common.wgsl's macros). Rows of the conv output `conv` [n, ch]:
// q (hk heads of S) | k (hk heads) | v (hv heads); value head h reads q/k head h % hk. proj [n, ldp]
// holds the raw alpha (column a_off + h) and beta (b_off + h); da = [dt_bias (hv); a (hv)]: g = softplus(alpha + dt_bias) * a, beta = sigmoid(beta).
// The state M [hv, S_v, S_k] at float offset m_off: row j of head h is value dim j.
// PASS:
//   "l2norm"    q and k rows of conv divided by sqrt(|x|^2 + eps), in place; a thread per (token, head)
//   "decode"    one token (n = 1): the q/k L2 norms, the recurrent update (M <- M exp(g);
//               d = beta (v - M k); M <- M + d k^T; o = M q / sqrt(S)) and gated_out.wgsl's
//               norm_silu, in one pass: a workgroup per value head, a thread per row of M
//   "prep"      per chunk of C tokens and head, what does not depend on the state: G (cumulative
//               log-decay in the chunk) and beta per token -> gb [n, hv, 2]; the chunk's C x C
//               matrix -> mat [chunks, hv, C, C]: A[t, s] = (q_t . k_s) exp(G_t - G_s) / sqrt(S) for
//               s <= t in the lower triangle, L[t, s] = beta_t (k_t . k_s) exp(G_t - G_s) for s < t
//               stored transposed in the upper one (mat[s, t])
//   "scan"      the chunks in order for each (VB value dims, head), those rows of M in workgroup
//               memory: (I + L) U = beta (v - exp(G) K M^T) by forward substitution, o = exp(G)
//               (Q M^T) / sqrt(S) + A U, M^T <- exp(G_last) M^T + K^T (exp(G_last - G) U)
{% from "delta_common.wgsl" import params, softplus, cumulative_decay, scan_memory, state_in, state_out,
   chunk_rows, state_update %}
const S: u32 = {{S}}u;
const C: u32 = {{C}}u;
{{ params() }}
{% if PASS == "l2norm" %}
@group(0) @binding(1) var<storage, read_write> conv: array<vec4<f32>>;   // whole heads: S and ch multiples of 4
{% elif PASS == "prep" or PASS == "decode" %}
@group(0) @binding(1) var<storage, read> conv: array<f32>;
@group(0) @binding(2) var<storage, read> proj: array<f32>;
@group(0) @binding(3) var<storage, read> da: array<f32>;
{% if PASS == "decode" %}
@group(0) @binding(4) var<storage, read_write> M: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;    // [hv, S]
@group(0) @binding(6) var<storage, read> nw: array<f32>;           // [S] ssm_norm
{% else %}
@group(0) @binding(4) var<storage, read_write> gb: array<f32>;     // [n, hv, 2]
@group(0) @binding(5) var<storage, read_write> mat: array<f32>;    // [chunks, hv, C, C]
{% endif %}
{% elif PASS == "scan" %}
@group(0) @binding(1) var<storage, read> conv: array<f32>;
@group(0) @binding(2) var<storage, read> gb: array<f32>;
@group(0) @binding(3) var<storage, read> mat: array<f32>;
@group(0) @binding(4) var<storage, read_write> M: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
{% else %}{{ raise("delta_net.wgsl: no pass " ~ PASS) }}{% endif %}

{{ softplus() }}

{% if PASS == "prep" or PASS == "decode" %}
fn gate(tok: u32, h: u32) -> vec2<f32> {   // (g, beta) of token tok, value head h
    let g = softplus(proj[tok * P.ldp + P.a_off + h] + da[h]) * da[P.hv + h];
    let beta = 1.0 / (1.0 + exp(-proj[tok * P.ldp + P.b_off + h]));
    return vec2<f32>(g, beta);
}
{% endif %}

{% if PASS == "l2norm" %}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = (wid.x + wid.y * nwg.x) * 64u + t;       // (token, one of 2 hk heads)
    let heads = 2u * P.hk;
    if (r >= P.n * heads) { return; }
    let b = ((r / heads) * P.ch + (r % heads) * S) / 4u;
    var ss = 0.0;
    for (var i = 0u; i < S / 4u; i++) { ss += dot(conv[b + i], conv[b + i]); }
    let inv = 1.0 / sqrt(ss + P.eps);
    for (var i = 0u; i < S / 4u; i++) { conv[b + i] = conv[b + i] * inv; }
}
{% elif PASS == "decode" %}
var<workgroup> sq: array<f32, S>;
var<workgroup> sk: array<f32, S>;
var<workgroup> so: array<f32, S>;

// Every thread sums the squares of the whole head itself from workgroup memory (no reduction barriers).
@compute @workgroup_size(S)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) j: u32) {
    let h = wid.y;
    let kh = h % P.hk;
    let row = P.m_off + (h * S + j) * S;
    sq[j] = conv[kh * S + j];
    sk[j] = conv[(P.hk + kh) * S + j];
    workgroupBarrier();
    var ssq = 0.0;
    var ssk = 0.0;
    for (var i = 0u; i < S; i++) { ssq += sq[i] * sq[i]; ssk += sk[i] * sk[i]; }
    let qn = 1.0 / sqrt(ssq + P.eps);
    let kn = 1.0 / sqrt(ssk + P.eps);
    let gbt = gate(0u, h);
    let e = exp(gbt.x);
    var mk = 0.0;
    var m: array<f32, S>;
    for (var i = 0u; i < S; i++) { m[i] = M[row + i] * e; mk += m[i] * (sk[i] * kn); }
    let d = (conv[2u * P.hk * S + h * S + j] - mk) * gbt.y;
    var o = 0.0;
    for (var i = 0u; i < S; i++) {
        let mi = m[i] + d * (sk[i] * kn);
        M[row + i] = mi;
        o += mi * (sq[i] * qn);
    }
    o *= 1.0 / sqrt(f32(S));
    so[j] = o;
    workgroupBarrier();
    var ss = 0.0;
    for (var i = 0u; i < S; i++) { ss += so[i] * so[i]; }
    let z = proj[P.z_off + h * S + j];
    out[h * S + j] = z / (1.0 + exp(-z)) * (o * inverseSqrt(ss / f32(S) + P.eps) * nw[j]);
}
{% elif PASS == "prep" %}
var<workgroup> gs: array<f32, C>;

@compute @workgroup_size(C)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let c = wid.x;
    let h = wid.y;
    let tok = c * C + t;
    let live = tok < P.n;
    var gbt = vec2<f32>(0.0, 0.0);
    if (live) { gbt = gate(tok, h); }
    gs[t] = gbt.x;
    workgroupBarrier();
{{ cumulative_decay() }}
    workgroupBarrier();
    if (!live) { return; }
    let G = gs[t];
    gb[(tok * P.hv + h) * 2u] = G;
    gb[(tok * P.hv + h) * 2u + 1u] = gbt.y;
    let kh = h % P.hk;
    let qt = tok * P.ch + kh * S;
    let kt = tok * P.ch + (P.hk + kh) * S;
    let base = (c * P.hv + h) * C * C;
    let scale = 1.0 / sqrt(f32(S));
    for (var s = 0u; s <= t; s++) {
        let ks = (c * C + s) * P.ch + (P.hk + kh) * S;
        var qk = 0.0;
        var kk = 0.0;
        for (var i = 0u; i < S; i++) { qk += conv[qt + i] * conv[ks + i]; kk += conv[kt + i] * conv[ks + i]; }
        let dec = exp(G - gs[s]);
        mat[base + t * C + s] = qk * dec * scale;
        if (s < t) { mat[base + s * C + t] = gbt.y * kk * dec; }
    }
}
{% elif PASS == "scan" %}
{{ scan_memory(VB) }}

// A workgroup per (VB value dims, head) walks the chunks in order; in each, thread t is token t
// (products with the state block, the outputs) or state row t (the state update), and VB threads
// solve the triangular system, a column each.
@compute @workgroup_size(C)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.y;
    let j0 = wid.x * VB;
    let kh = h % P.hk;
    let qb = kh * S;
    let kb = (P.hk + kh) * S;
    let vb = 2u * P.hk * S + h * S + j0;
    let scale = 1.0 / sqrt(f32(S));
{{ state_in() }}
    let chunks = (P.n + C - 1u) / C;
    for (var c = 0u; c < chunks; c++) {
{{ chunk_rows() }}
        var G = 0.0;
        var beta = 0.0;
        if (live) {
            G = gb[(tok * P.hv + h) * 2u];
            beta = gb[(tok * P.hv + h) * 2u + 1u];
        }
        gsh[t] = G;
        workgroupBarrier();
        var qm: array<f32, VB>;
        var km: array<f32, VB>;
        for (var jj = 0u; jj < VB; jj++) { qm[jj] = 0.0; km[jj] = 0.0; }
        if (live) {
            for (var i = 0u; i < S; i++) {
                let kv = conv[tok * P.ch + kb + i];
                let qv = conv[tok * P.ch + qb + i];
                for (var jj = 0u; jj < VB; jj++) { km[jj] += kv * mb[i * VB + jj]; qm[jj] += qv * mb[i * VB + jj]; }
            }
            let eg = exp(G);
            for (var jj = 0u; jj < VB; jj++) {
                ub[t * VB + jj] = beta * conv[tok * P.ch + vb + jj] - beta * eg * km[jj];
                qm[jj] = eg * qm[jj] * scale;
            }
        }
        workgroupBarrier();
        if (t < VB) {
            for (var t2 = 1u; t2 < nc; t2++) {
                var r = ub[t2 * VB + t];
                for (var s = 0u; s < t2; s++) { r -= mat[base + s * C + t2] * ub[s * VB + t]; }
                ub[t2 * VB + t] = r;
            }
        }
        workgroupBarrier();
        let last = gsh[nc - 1u];
        if (live) {
            for (var s = 0u; s <= t; s++) {
                let a = mat[base + t * C + s];
                for (var jj = 0u; jj < VB; jj++) { qm[jj] += a * ub[s * VB + jj]; }
            }
            for (var jj = 0u; jj < VB; jj++) { out[(tok * P.hv + h) * S + j0 + jj] = qm[jj]; }
        }
        workgroupBarrier();
{{ state_update() }}
    }
{{ state_out() }}
}
{% endif %}
