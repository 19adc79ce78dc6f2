// Causal attention for a chunk of n queries at positions [pos, pos + n) (prefill), tiled:
// workgroup (query tile, head) gives one query to each of its BQ threads; K and V are streamed
// through workgroup memory KT keys at a time and each thread keeps an online softmax (running max,
// running sum, o[HD] in registers). Keys past a query's position, or (sliding window) at or before
// position - window, are masked.
// The keys a tile sees are split in n_splits contiguous ranges (workgroup z), so that a chunk's
// attention fills the GPU; each writes (o unnormalized, m, l) to part[(i * n_head + h) * n_splits + s]
// and the `combine` pass merges them: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
// q: [n, n_head, HD] rotated, not scaled; kc, vc: [n_kv, max_ctx, HD] float32, or float16 with KV_F16
// (f16_kv.wgsl); out: [n, n_head * HD].
// Params, the tile's setup (q and o in registers, the split's keys) and the store of o: the macros of
// attn_prefill_common.wgsl, which attn_prefill_wide.wgsl shares.
{% from "attn_prefill_common.wgsl" import params, kv_bindings, tile_setup, store_o %}
const HD: u32 = {{HD}}u;
const BQ: u32 = {{BQ}}u;
const KT: u32 = {{KT}}u;
const PW: u32 = HD + 2u;
{{ params() }}
{% if PASS == "combine" %}
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * nwg.x;           // query * n_head + head
    let S = P.n_splits;
    var mx = -3.0e38;
    for (var s = 0u; s < S; s++) { mx = max(mx, part[(r * S + s) * PW + HD]); }
    var l = 0.0;
    for (var s = 0u; s < S; s++) {
        let b = (r * S + s) * PW;
        l += exp(part[b + HD] - mx) * part[b + HD + 1u];
    }
    for (var d = t; d < HD; d += 64u) {
        var o = 0.0;
        for (var s = 0u; s < S; s++) {
            let b = (r * S + s) * PW;
            o += exp(part[b + HD] - mx) * part[b + d];
        }
        out[r * HD + d] = o / l;
    }
}
{% else %}
{% call kv_bindings(KV_F16 | default(false)) %}
// a float32 cache (kv_bindings declares the float16 one)
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
fn kload(b: u32) -> vec4<f32> { return vec4<f32>(kc[b], kc[b + 1u], kc[b + 2u], kc[b + 3u]); }
fn vload(b: u32) -> vec4<f32> { return vec4<f32>(vc[b], vc[b + 1u], vc[b + 2u], vc[b + 3u]); }
{% endcall %}

var<workgroup> ks: array<vec4<f32>, KT * HD / 4u>;
var<workgroup> vs: array<vec4<f32>, KT * HD / 4u>;

@compute @workgroup_size(BQ)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
{{ tile_setup("t", HD // 4, "") }}
    for (var k0 = k_begin; k0 < k_end; k0 += KT) {
        workgroupBarrier();
        for (var e = t; e < KT * HD / 4u; e += BQ) {
            let kj = k0 + e / (HD / 4u);
            let b = (kvh * P.max_ctx + kj) * HD + (e % (HD / 4u)) * 4u;
            if (kj < k_end) {
                ks[e] = kload(b);
                vs[e] = vload(b);
            }
        }
        workgroupBarrier();
        if (live) {
            // online softmax one key at a time; o is rescaled only when the running max grows
            let jn = min(KT, min(k_end, qp + 1u) - min(k0, min(k_end, qp + 1u)));
            for (var j = 0u; j < jn; j++) {
                if (k0 + j < lo) { continue; }
                let kb = j * (HD / 4u);
                var s = 0.0;
{% for d in range(HD // 4) %}
                s += dot(q{{d}}, ks[kb + {{d}}u]);
{% endfor %}
                if (s > m) {
                    let corr = exp(m - s);
                    l *= corr;
{% for d in range(HD // 4) %}
                    o{{d}} *= corr;
{% endfor %}
                    m = s;
                }
                let pj = exp(s - m);
                l += pj;
{% for d in range(HD // 4) %}
                o{{d}} += pj * vs[kb + {{d}}u];
{% endfor %}
            }
        }
    }
    if (live) {
{{ store_o(HD // 4, "ob") }}
        part[ob + HD] = m;
        part[ob + HD + 1u] = l;
    }
}
{% endif %}
