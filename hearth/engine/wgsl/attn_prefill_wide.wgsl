// Causal prefill attention for wide heads (Gemma 4's 512, Qwen3.5's 256): attn_prefill.wgsl's
// parameters, key splits, masks and partials (its combine pass merges them), but a query row is
// shared by T threads, each owning D = HD / T of its dims of q and of the output accumulator, so a
// thread keeps 2 HD / T floats in registers, not 2 HD (which spill to local memory at HD 256+).
// Workgroup (query tile, head, split): BQ queries x T slices; thread tid = slice * BQ + query, so the
// threads of a warp that read a key read the same address (one broadcast load). Keys go KT at a time:
// each thread scores its slice against the KT keys, the T partial sums of a (query, key) are added
// through workgroup memory (red), and every thread of a query then takes the same online-softmax
// step over the tile (one rescale a tile) on its slice of o. K and V are read from the cache
// directly: the BQ queries of a workgroup read the same rows, which the cache serves.
// q: [n, n_head, HD] rotated, not scaled; kc, vc: [n_kv, max_ctx, HD] float32, or float16 with KV_F16.
const HD: u32 = {{HD}}u;
const BQ: u32 = {{BQ}}u;
const T: u32 = {{T}}u;
const KT: u32 = {{KT}}u;
const D: u32 = HD / T;
const PW: u32 = HD + 2u;
{% if HD % (4 * T) or KT > T %}{{ raise("attn_prefill_wide.wgsl: HD a multiple of 4 T and KT <= T") }}{% endif %}
struct Params {
    n_head: u32, n_kv: u32, max_ctx: u32, scale: f32,
    window: u32, n_splits: u32, _b: u32, _c: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
{% if KV_F16 %}
@group(0) @binding(2) var<storage, read> kc: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec2<u32>>;
{% include "f16_kv.wgsl" %}
fn kload(b: u32) -> vec4<f32> { return unpack_f16x4(kc[b / 4u]); }
fn vload(b: u32) -> vec4<f32> { return unpack_f16x4(vc[b / 4u]); }
{% else %}
@group(0) @binding(2) var<storage, read> kc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec4<f32>>;
fn kload(b: u32) -> vec4<f32> { return kc[b / 4u]; }
fn vload(b: u32) -> vec4<f32> { return vc[b / 4u]; }
{% endif %}
@group(0) @binding(4) var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read> step: array<u32>;   // [pos, n]

var<workgroup> red: array<f32, T * KT * BQ>;   // [slice, key, query] partial scores
var<workgroup> sc: array<f32, KT * BQ>;        // [key, query] scores, -3e38 where masked

@compute @workgroup_size({{BQ * T}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let r = tid % BQ;                          // this thread's query in the tile
    let sl = tid / BQ;                         // its slice of the head: dims d0 .. d0 + D
    let d0 = sl * D;
    let h = wid.y;
    let kvh = h / (P.n_head / P.n_kv);
    let pos = step[0];
    let n = step[1];
    let i = wid.x * BQ + r;
    let live = i < n;
    let qp = pos + i;
{% for d in range(HD // T // 4) %}
    var q{{d}} = vec4<f32>(0.0);
    var o{{d}} = vec4<f32>(0.0);
{% endfor %}
    if (live) {
        let qb = (i * P.n_head + h) * HD + d0;
{% for d in range(HD // T // 4) %}
        q{{d}} = vec4<f32>(q[qb + {{4 * d}}u], q[qb + {{4 * d + 1}}u], q[qb + {{4 * d + 2}}u], q[qb + {{4 * d + 3}}u]) * P.scale;
{% endfor %}
    }
    var m = -3.0e38;
    var l = 0.0;
    let last_q = min(pos + wid.x * BQ + BQ, pos + n) - 1u;
    var first = 0u;
    if (P.window > 0u && pos + wid.x * BQ + 1u > P.window) { first = pos + wid.x * BQ + 1u - P.window; }
    var lo = 0u;
    if (P.window > 0u && qp + 1u > P.window) { lo = qp + 1u - P.window; }
    let span = last_q + 1u - first;
    let per = ((span + P.n_splits - 1u) / P.n_splits + KT - 1u) / KT * KT;
    let k_begin = first + wid.z * per;
    let k_end = min(k_begin + per, last_q + 1u);
    let row0 = kvh * P.max_ctx;
    // tiles at multiples of KT, so that a query's keys fall in the same tiles (and its softmax
    // rescales at the same keys) whichever query tile and chunk it is computed in
    for (var k0 = k_begin / KT * KT; k0 < k_end; k0 += KT) {
        for (var j = 0u; j < KT; j++) {
            var s = 0.0;
            if (k0 + j < k_end) {
                let b = (row0 + k0 + j) * HD + d0;
{% for d in range(HD // T // 4) %}
                s += dot(q{{d}}, kload(b + {{4 * d}}u));
{% endfor %}
            }
            red[(sl * KT + j) * BQ + r] = s;
        }
        workgroupBarrier();
        if (sl < KT) {
            var s = 0.0;
            for (var u = 0u; u < T; u++) { s += red[(u * KT + sl) * BQ + r]; }
            let kj = k0 + sl;
            sc[sl * BQ + r] = select(-3.0e38, s, live && kj >= k_begin && kj < k_end && kj <= qp && kj >= lo);
        }
        workgroupBarrier();
        var mx = m;
        for (var j = 0u; j < KT; j++) { mx = max(mx, sc[j * BQ + r]); }
        let corr = exp(m - mx);
        l *= corr;
{% for d in range(HD // T // 4) %}
        o{{d}} *= corr;
{% endfor %}
        for (var j = 0u; j < KT; j++) {
            let s = sc[j * BQ + r];
            if (s > -1.0e38) {                 // a masked key adds nothing (its V row may lie past k_end)
                let pj = exp(s - mx);
                l += pj;
                let b = (row0 + k0 + j) * HD + d0;
{% for d in range(HD // T // 4) %}
                o{{d}} += pj * vload(b + {{4 * d}}u);
{% endfor %}
            }
        }
        m = mx;
    }
    if (live) {
        let ob = ((i * P.n_head + h) * P.n_splits + wid.z) * PW;
{% for d in range(HD // T // 4) %}
        part[ob + d0 + {{4 * d}}u] = o{{d}}.x; part[ob + d0 + {{4 * d + 1}}u] = o{{d}}.y;
        part[ob + d0 + {{4 * d + 2}}u] = o{{d}}.z; part[ob + d0 + {{4 * d + 3}}u] = o{{d}}.w;
{% endfor %}
        if (sl == 0u) {
            part[ob + HD] = m;
            part[ob + HD + 1u] = l;
        }
    }
}
