// The chunked delta rule with the triangular solve out of the sequential scan (models/delta_net.py
// derives the form; delta_net.wgsl holds the same passes with the solve inside the scan). What the two
// share (the chunk's cumulative decay, the scan's state block, its load, store and end-of-chunk update)
// is delta_common.wgsl's macros.
// (I + L) U = beta V - (beta exp(G) K) M0^T splits into what does not depend on the state,
//     U0 = (I + L)^-1 (beta V)    W = (I + L)^-1 (beta exp(G) K)
// solved for every chunk at once, and what does: U = U0 - W M0^T, a product the scan does per chunk.
// PASS:
//   "gram"   per (chunk, head), what does not depend on the state, as a tiled product (a thread a
//            4 x 4 block of the C x C matrices, q and k staged through workgroup memory PD dims at a
//            time): G (cumulative log-decay in the chunk) and beta -> gb [n, hv, 2];
//            mat [chunks, hv, C, C]: A^T on and above the diagonal, mat[s, t] = A[t, s] =
//            (q_t . k_s) exp(G_t - G_s) / sqrt(S) (s <= t), L below it, mat[t, s] = L[t, s] =
//            beta_t (k_t . k_s) exp(G_t - G_s) (s < t): the solve reads L's rows, the scan's token
//            threads A's rows as columns, both contiguous
//   "solve"  workgroup (block of 64 of the 2 S right-hand columns, chunk, head), a thread a column,
//            forward substitution down the chunk's rows with its column in workgroup memory;
//            W^T -> wt and (exp(G) Q / sqrt(S))^T -> qt [chunks, hv, S_k, C] (transposed, so that the
//            scan's threads, one a token, read them coalesced), U0 -> u [n, hv, S_v] (the o buffer,
//            overwritten by the scan)
//   "scan"   workgroup (VB value dims, head) walks the chunks in order with those rows of M^T in
//            workgroup memory; thread t is token t: U = U0 - W M^T, o = exp(G) (Q M^T) / sqrt(S) + A U
//            (o replaces U0 in u), then thread i is state row i: M^T <- exp(G_last) M^T +
//            K^T (exp(G_last - G) U)
{% from "delta_common.wgsl" import params, softplus, cumulative_decay, scan_memory, state_in, state_out,
   chunk_rows, state_update %}
const S: u32 = {{S}}u;
const C: u32 = {{C}}u;
{{ params() }}
@group(0) @binding(1) var<storage, read> conv: array<f32>;    // [n, ch] q | k | v heads, q/k normalized
{% if PASS == "gram" %}
@group(0) @binding(2) var<storage, read> proj: array<f32>;    // [n, ldp]: beta at b_off, alpha at a_off
@group(0) @binding(3) var<storage, read> da: array<f32>;      // [dt_bias (hv); a (hv)]
@group(0) @binding(4) var<storage, read_write> gb: array<f32>;
@group(0) @binding(5) var<storage, read_write> mat: array<f32>;
const PD: u32 = 8u;
var<workgroup> qT: array<f32, PD * C>;     // [dim, token]: PD dims of the chunk's q rows
var<workgroup> kT: array<f32, PD * C>;
var<workgroup> gs: array<f32, C>;
var<workgroup> bs: array<f32, C>;

{{ softplus() }}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let c = wid.x;
    let h = wid.y;
    let c0 = c * C;
    let nc = min(C, P.n - c0);
    let kh = h % P.hk;
    if (t < C) {
        var g = 0.0;
        var beta = 0.0;
        if (t < nc) {
            let tok = c0 + t;
            g = softplus(proj[tok * P.ldp + P.a_off + h] + da[h]) * da[P.hv + h];
            beta = 1.0 / (1.0 + exp(-proj[tok * P.ldp + P.b_off + h]));
        }
        gs[t] = g;
        bs[t] = beta;
    }
    workgroupBarrier();
{{ cumulative_decay() }}
    workgroupBarrier();
    if (t < nc) {
        gb[((c0 + t) * P.hv + h) * 2u] = gs[t];
        gb[((c0 + t) * P.hv + h) * 2u + 1u] = bs[t];
    }
    let tb = (t / 16u) * 4u;                   // this thread's rows t (tokens) ...
    let sb = (t % 16u) * 4u;                   // ... and columns s of the C x C matrices
    let busy = sb <= tb + 3u;                  // some s <= t in the block
{% for x in range(4) %}
    var aq{{x}} = vec4<f32>(0.0);
    var ak{{x}} = vec4<f32>(0.0);
{% endfor %}
    for (var i0 = 0u; i0 < S; i0 += PD) {
        for (var e = t; e < C * PD; e += 256u) {
            let r = e / PD;
            let dd = e % PD;
            var qv = 0.0;
            var kv = 0.0;
            if (r < nc) {
                qv = conv[(c0 + r) * P.ch + kh * S + i0 + dd];
                kv = conv[(c0 + r) * P.ch + (P.hk + kh) * S + i0 + dd];
            }
            qT[dd * C + r] = qv;
            kT[dd * C + r] = kv;
        }
        workgroupBarrier();
        if (busy) {
            for (var dd = 0u; dd < PD; dd++) {
                let b = dd * C;
                let ks = vec4<f32>(kT[b + sb], kT[b + sb + 1u], kT[b + sb + 2u], kT[b + sb + 3u]);
{% for x in range(4) %}
                aq{{x}} += qT[b + tb + {{x}}u] * ks;
                ak{{x}} += kT[b + tb + {{x}}u] * ks;
{% endfor %}
            }
        }
        workgroupBarrier();
    }
    if (!busy) { return; }
    let base = (c * P.hv + h) * C * C;
    let scale = inverseSqrt(f32(S));
{% for x in range(4) %}
    for (var y = 0u; y < 4u; y++) {
        let tt = tb + {{x}}u;
        let ss = sb + y;
        if (tt < nc && ss <= tt) {
            let dec = exp(gs[tt] - gs[ss]);
            mat[base + ss * C + tt] = aq{{x}}[y] * dec * scale;
            if (ss < tt) { mat[base + tt * C + ss] = bs[tt] * ak{{x}}[y] * dec; }
        }
    }
{% endfor %}
}
{% else %}
@group(0) @binding(2) var<storage, read> gb: array<f32>;      // [n, hv, 2] cumulative decay G, beta
@group(0) @binding(3) var<storage, read> mat: array<f32>;     // [chunks, hv, C, C] A^T (upper), L (lower)
{% endif %}
{% if PASS == "solve" %}
@group(0) @binding(4) var<storage, read_write> wt: array<f32>; // [chunks, hv, S, C]
@group(0) @binding(5) var<storage, read_write> qt: array<f32>; // [chunks, hv, S, C]
@group(0) @binding(6) var<storage, read_write> u: array<f32>;  // [n, hv, S]

var<workgroup> col: array<f32, C * 64u>;   // [row, thread]: the solved column so far

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let cj = wid.x * 64u + t;                  // right-hand column: k dim cj, or v dim cj - S
    let c = wid.y;
    let h = wid.z;
    if (cj >= 2u * S) { return; }              // no barriers below: each thread owns its column
    let c0 = c * C;
    let nc = min(C, P.n - c0);
    let base = (c * P.hv + h) * C * C;
    let kh = h % P.hk;
    let is_k = cj < S;
    var src = 2u * P.hk * S + h * S + cj - S;  // v's column of head h
    if (is_k) { src = (P.hk + kh) * S + cj; }
    for (var r = 0u; r < nc; r++) {
        let tok = c0 + r;
        let g = gb[(tok * P.hv + h) * 2u];
        let beta = gb[(tok * P.hv + h) * 2u + 1u];
        var x = beta * conv[tok * P.ch + src];
        if (is_k) { x *= exp(g); }
        // SW sums in flight: the loads of L's row do not wait on one chain of products
        var a = vec4<f32>(0.0);
        var s = 0u;
{% set SW = [U, 4]|max %}
        for (; s + {{SW}}u <= r; s += {{SW}}u) {
{% for x in range(0, SW, 4) %}
            a += vec4<f32>(mat[base + r * C + s + {{x}}u], mat[base + r * C + s + {{x + 1}}u],
                           mat[base + r * C + s + {{x + 2}}u], mat[base + r * C + s + {{x + 3}}u])
               * vec4<f32>(col[(s + {{x}}u) * 64u + t], col[(s + {{x + 1}}u) * 64u + t],
                           col[(s + {{x + 2}}u) * 64u + t], col[(s + {{x + 3}}u) * 64u + t]);
{% endfor %}
        }
        for (; s < r; s++) { a.x += mat[base + r * C + s] * col[s * 64u + t]; }
        x -= (a.x + a.y) + (a.z + a.w);
        col[r * 64u + t] = x;
        if (is_k) {
            let e = (c * P.hv + h) * S * C + cj * C + r;
            wt[e] = x;
            qt[e] = exp(g) * inverseSqrt(f32(S)) * conv[tok * P.ch + kh * S + cj];
        } else {
            u[(tok * P.hv + h) * S + cj - S] = x;
        }
    }
}
{% elif PASS == "scan" %}
@group(0) @binding(4) var<storage, read> wt: array<f32>;      // [chunks, hv, S, C]
@group(0) @binding(5) var<storage, read> qt: array<f32>;      // [chunks, hv, S, C]
@group(0) @binding(6) var<storage, read_write> M: array<f32>; // [hv, S_v, S_k] at m_off
@group(0) @binding(7) var<storage, read_write> u: array<f32>; // [n, hv, S]: U0 in, o out
{{ scan_memory(VB) }}

@compute @workgroup_size(C)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.y;
    let j0 = wid.x * VB;
    let kh = h % P.hk;
    let kb = (P.hk + kh) * S;
{{ state_in() }}
    workgroupBarrier();
    let chunks = (P.n + C - 1u) / C;
    for (var c = 0u; c < chunks; c++) {
{{ chunk_rows() }}
        let row = (tok * P.hv + h) * S;
        var G = 0.0;
        if (live) { G = gb[(tok * P.hv + h) * 2u]; }
        gsh[t] = G;
        var qm: array<f32, VB>;
        var wm: array<f32, VB>;
        for (var jj = 0u; jj < VB; jj++) { qm[jj] = 0.0; wm[jj] = 0.0; }
        if (live) {
            let cb = (c * P.hv + h) * S * C + t;
            var i = 0u;
{% if U > 1 %}
            // U state rows' W and Q loads issued before their products: the loop is bound by load latency
            for (; i + {{U}}u <= S; i += {{U}}u) {
{% for x in range(U) %}
                let wv{{x}} = wt[cb + (i + {{x}}u) * C];
                let qv{{x}} = qt[cb + (i + {{x}}u) * C];
{% endfor %}
                for (var jj = 0u; jj < VB; jj++) {
{% for x in range(U) %}
                    let m{{x}} = mb[(i + {{x}}u) * VB + jj];
{% endfor %}
                    wm[jj] += {% for x in range(U) %}wv{{x}} * m{{x}}{{ " + " if not loop.last }}{% endfor %};
                    qm[jj] += {% for x in range(U) %}qv{{x}} * m{{x}}{{ " + " if not loop.last }}{% endfor %};
                }
            }
{% endif %}
            for (; i < S; i++) {
                let wv = wt[cb + i * C];
                let qv = qt[cb + i * C];
                for (var jj = 0u; jj < VB; jj++) { wm[jj] += wv * mb[i * VB + jj]; qm[jj] += qv * mb[i * VB + jj]; }
            }
            for (var jj = 0u; jj < VB; jj++) { ub[t * VB + jj] = u[row + j0 + jj] - wm[jj]; }
        }
        workgroupBarrier();
        let last = gsh[nc - 1u];
        if (live) {
            var s = 0u;
{% if U > 1 %}
            for (; s + {{U}}u <= t + 1u; s += {{U}}u) {
{% for x in range(U) %}
                let a{{x}} = mat[base + (s + {{x}}u) * C + t];
{% endfor %}
                for (var jj = 0u; jj < VB; jj++) {
                    qm[jj] += {% for x in range(U) %}a{{x}} * ub[(s + {{x}}u) * VB + jj]{{ " + " if not loop.last }}{% endfor %};
                }
            }
{% endif %}
            for (; s <= t; s++) {
                let a = mat[base + s * C + t];
                for (var jj = 0u; jj < VB; jj++) { qm[jj] += a * ub[s * VB + jj]; }
            }
            for (var jj = 0u; jj < VB; jj++) { u[row + j0 + jj] = qm[jj]; }
        }
        workgroupBarrier();
{{ state_update(U) }}
    }
{{ state_out() }}
}
{% elif PASS != "gram" %}{{ raise("delta_chunk.wgsl: no pass " ~ PASS) }}{% endif %}
