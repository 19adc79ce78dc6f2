// The chunked delta rule with the triangular solve out of the sequential scan (delta_net.wgsl's
// "prep" comes first and gives gb and the chunk matrices A, L; models/delta_net.py derives the form).
// (I + L) U = beta V - (beta exp(G) K) M0^T splits into what does not depend on the state,
//     U0 = (I + L)^-1 (beta V)    W = (I + L)^-1 (beta exp(G) K)
// solved for every chunk at once, and what does: U = U0 - W M0^T, a product the scan does per chunk.
// PASS:
//   "solve"  workgroup (block of 64 of the 2 S right-hand columns, chunk, head), a thread a column,
//            forward substitution down the chunk's rows with its column in workgroup memory;
//            W^T -> wt and (exp(G) Q / sqrt(S))^T -> qt [chunks, hv, S_k, C] (transposed, so that the
//            scan's threads, one a token, read them coalesced), U0 -> u [n, hv, S_v] (the o buffer,
//            overwritten by the scan)
//   "scan"   workgroup (VB value dims, head) walks the chunks in order with those rows of M^T in
//            workgroup memory; thread t is token t: U = U0 - W M^T, o = exp(G) (Q M^T) / sqrt(S) + A U
//            (o replaces U0 in u), then thread i is state row i: M^T <- exp(G_last) M^T +
//            K^T (exp(G_last - G) U)
const S: u32 = {{S}}u;
const C: u32 = {{C}}u;
struct Params {
    S: u32, hv: u32, hk: u32, ch: u32, ldp: u32, a_off: u32, b_off: u32, z_off: u32,
    n: u32, st_off: u32, m_off: u32, K: u32, eps: f32, _a: u32, _b: u32, _c: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> conv: array<f32>;    // [n, ch] q | k | v heads, q/k normalized
@group(0) @binding(2) var<storage, read> gb: array<f32>;      // [n, hv, 2] cumulative decay G, beta
@group(0) @binding(3) var<storage, read> mat: array<f32>;     // [chunks, hv, C, C] A (lower), L^T (upper)
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
        // four sums in flight: the loads of L's row do not wait on one chain of products
        var a = vec4<f32>(0.0);
        var s = 0u;
        for (; s + 4u <= r; s += 4u) {
            a += vec4<f32>(mat[base + s * C + r], mat[base + (s + 1u) * C + r], mat[base + (s + 2u) * C + r],
                           mat[base + (s + 3u) * C + r])
               * vec4<f32>(col[s * 64u + t], col[(s + 1u) * 64u + t], col[(s + 2u) * 64u + t], col[(s + 3u) * 64u + t]);
        }
        for (; s < r; s++) { a.x += mat[base + s * C + r] * col[s * 64u + t]; }
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
const VB: u32 = {{VB}}u;
var<workgroup> mb: array<f32, S * VB>;     // [S_k, VB]: rows j0 .. j0 + VB of M, transposed
var<workgroup> ub: array<f32, C * VB>;     // [C, VB]: U, then U exp(G_last - G)
var<workgroup> gsh: array<f32, C>;

@compute @workgroup_size(C)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.y;
    let j0 = wid.x * VB;
    let kh = h % P.hk;
    let kb = (P.hk + kh) * S;
    for (var e = t; e < S * VB; e += C) {
        mb[(e % S) * VB + e / S] = M[P.m_off + (h * S + j0 + e / S) * S + e % S];
    }
    workgroupBarrier();
    let chunks = (P.n + C - 1u) / C;
    for (var c = 0u; c < chunks; c++) {
        let c0 = c * C;
        let nc = min(C, P.n - c0);
        let base = (c * P.hv + h) * C * C;
        let tok = c0 + t;
        let live = t < nc;
        let row = (tok * P.hv + h) * S;
        var G = 0.0;
        if (live) { G = gb[(tok * P.hv + h) * 2u]; }
        gsh[t] = G;
        var qm: array<f32, VB>;
        var wm: array<f32, VB>;
        for (var jj = 0u; jj < VB; jj++) { qm[jj] = 0.0; wm[jj] = 0.0; }
        if (live) {
            let cb = (c * P.hv + h) * S * C + t;
            for (var i = 0u; i < S; i++) {
                let wv = wt[cb + i * C];
                let qv = qt[cb + i * C];
                for (var jj = 0u; jj < VB; jj++) { wm[jj] += wv * mb[i * VB + jj]; qm[jj] += qv * mb[i * VB + jj]; }
            }
            for (var jj = 0u; jj < VB; jj++) { ub[t * VB + jj] = u[row + j0 + jj] - wm[jj]; }
        }
        workgroupBarrier();
        let last = gsh[nc - 1u];
        if (live) {
            for (var s = 0u; s <= t; s++) {
                let a = mat[base + t * C + s];
                for (var jj = 0u; jj < VB; jj++) { qm[jj] += a * ub[s * VB + jj]; }
            }
            for (var jj = 0u; jj < VB; jj++) { u[row + j0 + jj] = qm[jj]; }
        }
        workgroupBarrier();
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
    }
    for (var e = t; e < S * VB; e += C) {
        M[P.m_off + (h * S + j0 + e / S) * S + e % S] = mb[(e % S) * VB + e / S];
    }
}
{% else %}{{ raise("delta_chunk.wgsl: no pass " ~ PASS) }}{% endif %}
