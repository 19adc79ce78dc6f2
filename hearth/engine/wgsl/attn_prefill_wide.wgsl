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
// Params, the tile's setup (a slice's q and o in registers, the split's keys) and the store of o: the
// macros of attn_prefill_common.wgsl, which attn_prefill.wgsl shares.
{% from "attn_prefill_common.wgsl" import params, kv_bindings, tile_setup, store_o %}
const HD: u32 = {{HD}}u;
const BQ: u32 = {{BQ}}u;
const T: u32 = {{T}}u;
const KT: u32 = {{KT}}u;
const D: u32 = HD / T;
const PW: u32 = HD + 2u;
{% if HD % (4 * T) or KT > T %}{{ raise("attn_prefill_wide.wgsl: HD a multiple of 4 T and KT <= T") }}{% endif %}
{{ params() }}
{% call kv_bindings(KV_F16) %}
// a float32 cache (kv_bindings declares the float16 one)
@group(0) @binding(2) var<storage, read> kc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec4<f32>>;
fn kload(b: u32) -> vec4<f32> { return kc[b / 4u]; }
fn vload(b: u32) -> vec4<f32> { return vc[b / 4u]; }
{% endcall %}

var<workgroup> red: array<f32, T * KT * BQ>;   // [slice, key, query] partial scores
var<workgroup> sc: array<f32, KT * BQ>;        // [key, query] scores, -3e38 where masked

@compute @workgroup_size({{BQ * T}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let r = tid % BQ;                          // this thread's query in the tile
    let sl = tid / BQ;                         // its slice of the head: dims d0 .. d0 + D
    let d0 = sl * D;
{{ tile_setup("r", HD // T // 4, " + d0") }}
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
{{ store_o(HD // T // 4, "ob + d0") }}
        if (sl == 0u) {
            part[ob + HD] = m;
            part[ob + HD + 1u] = l;
        }
    }
}
