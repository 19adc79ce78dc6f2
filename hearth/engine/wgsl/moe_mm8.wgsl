// The experts' prefill products as tiled matrix products (llama.cpp's mul_mat_id): after moe_sort.wgsl
// groups a chunk's (token, slot) pairs by expert and cuts each expert's run into tiles of at most TN
// pairs, workgroup (row tile, pair tile) multiplies TM rows of that tile's expert with its pairs' x, as
// matmul8.wgsl multiplies a dense matrix with TN tokens: each weight block is read once for TN pairs
// (the per-pair products read it once a pair), with 8-bit integer dot products. One dispatch covers
// every expert; tiles past the last hold count 0 and their workgroups return at once.
// x: quantize_rows.wgsl's int8 blocks (MODE "gate" / "up": xn's rows, a token's; "down": ffe's rows,
// a pair's), codes from word 0, scales from word 4 s_off4. Pair j = t SLOTS + s (expert e = route[t, s]):
//   "gate": y[j, r] = Wg_e[r] . x[t] + bg[e, r]
//   "up":   y[j, r] = act(y[j, r], Wu_e[r] . x[t] + bu[e, r])    (ACT as moe_matvec.wgsl)
//   "down": y[j, r] = w_s (Wd_e[r] . x[j] + bd[e, r])              (moe_sum.wgsl adds a token's slots)
// Tile: TM = 16 RM rows x TN = 16 RN pairs; arithmetic, loaders and double buffering as matmul8.wgsl.
{% include "quant.wgsl" %}
{% if MODE not in ("gate", "up", "down") %}{{ raise("moe_mm8 mode " ~ MODE) }}{% endif %}
struct Params {
    K: u32, M: u32, rb0: u32, eb0: u32,
    s_off4: u32, n: u32, pad0: u32, pad1: u32,
}
const SLOTS: u32 = {{SLOTS}}u;
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> route: array<u32>;          // [n, 2 SLOTS]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;        // [n SLOTS, M]
@group(0) @binding(4) var<storage, read> w0: array<u32>;             // [n_expert, M, row bytes]
{% set nb = 5 %}
{% if BIAS %}
@group(0) @binding(5) var<storage, read> b0: array<f32>;             // [n_expert, M]
{% set nb = 6 %}
{% endif %}
@group(0) @binding({{nb}}) var<storage, read> tiles: array<u32>;     // [max_tiles, 2] (moe_sort.wgsl)
@group(0) @binding({{nb + 1}}) var<storage, read> order: array<u32>; // [n SLOTS]
{% from "quant.wgsl" import quant_fns %}
{{ quant_fns("w0", QTYPE) }}
{% set TM = 16 * RM %}
{% set TN = 16 * RN %}
{% set WP = (TM + 127) // 128 %}
{% set XP = (TN + 127) // 128 %}
{% set SCALE = {"Q4_0": "one", "Q8_0": "one", "Q4_1": "min", "Q4_K": "min", "Q5_K": "min", "Q6_K": "two",
                "MXFP4": "one", "IQ4_NL": "one"}.get(QTYPE, "two") %}
{% include "q16.wgsl" %}

fn dot16(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y) + dot4I8Packed(a.z, b.z) + dot4I8Packed(a.w, b.w);
}

// output row r of pair j of expert e (r < M)
fn store_pair(j: u32, e: u32, r: u32, v0: f32) {
    var v = v0;
{% if BIAS %}
    v += b0[e * P.M + r];
{% endif %}
    let o = j * P.M + r;
{% if MODE == "gate" %}
    y[o] = v;
{% elif MODE == "up" %}
    let g = y[o];
{% if ACT == "silu" %}
    y[o] = g / (1.0 + exp(-g)) * v;
{% elif ACT == "swiglu_oai" %}
    let gc = min(g, 7.0);
    let uc = clamp(v, -7.0, 7.0);
    y[o] = gc / (1.0 + exp(-1.702 * gc)) * (uc + 1.0);
{% elif ACT == "gelu" %}
    y[o] = 0.5 * g * (1.0 + tanh(clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0))) * v;
{% else %}
    {{ raise("moe_mm8 activation " ~ ACT) }}
{% endif %}
{% else %}
    y[o] = bitcast<f32>(route[(j / SLOTS) * 2u * SLOTS + SLOTS + j % SLOTS]) * v;
{% endif %}
}

const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
var<workgroup> wq: array<vec4<u32>, {{2 * 2 * TM}}>;   // [2 buffers][2 halves][TM rows] codes
var<workgroup> wsc: array<f32, {{2 * 2 * TM}}>;        // [2 buffers][2 (a, b)][TM rows]
var<workgroup> xqs: array<vec4<u32>, {{2 * 2 * TN}}>;  // [2 buffers][2 halves][TN pairs] codes
var<workgroup> xsc: array<vec2<f32>, {{2 * TN}}>;      // [2 buffers][TN pairs] (dx, dx * sum of codes)

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let info = tiles[2u * wid.y + 1u];
    let cnt = info >> 24u;                            // the same for the whole workgroup
    if (cnt == 0u) {
        return;
    }
    let e = tiles[2u * wid.y];
    let start = info & 0xFFFFFFu;
    let r0 = wid.x * TM;
    let tx = t % 16u;
    let ty = t / 16u;
{% for i in range(RM) %}
{% for j in range(RN) %}
    var c{{i}}_{{j}} = 0.0;
{% endfor %}
{% endfor %}
    // loaders: W row lr + 128 p and pair lr + 128 p of the tile, half lh
    let lr = t / 2u;
    let lh = t % 2u;
    let nb = P.K / 32u;                               // blocks a row
{% for p in range(WP) %}
    let wok{{p}} = lr + {{128 * p}}u < TM;
    let wr{{p}} = e * P.eb0 + min(r0 + lr + {{128 * p}}u, P.M - 1u) * P.rb0;
    var wv{{p}} = Q16(vec4<u32>(0u), 0.0);
{% endfor %}
{% for p in range(XP) %}
    let xok{{p}} = lr + {{128 * p}}u < min(TN, cnt);
    let xj{{p}} = order[start + min(lr + {{128 * p}}u, cnt - 1u)];
    let xtok{{p}} = {% if MODE == "down" %}xj{{p}}{% else %}xj{{p}} / SLOTS{% endif %};   // x's row
    var xv{{p}} = vec4<u32>(0u);
    var xs{{p}} = vec2<f32>(0.0);
{% endfor %}
    for (var s = 0u; s <= nb; s++) {
        let cur = (s & 1u) ^ 1u;                      // the buffer step s - 1 was stored into
        let more = s < nb;
{% for p in range(WP) %}
        if (more && wok{{p}}) {
            wv{{p}} = w0_q16(wr{{p}}, s, lh);
        }
{% endfor %}
{% for p in range(XP) %}
        if (more && xok{{p}}) {
            xv{{p}} = x[xtok{{p}} * (P.K / 16u) + s * 2u + lh];
            let sv = x[P.s_off4 + (xtok{{p}} * nb + s) / 2u];
            xs{{p}} = bitcast<vec2<f32>>(select(sv.xy, sv.zw, ((xtok{{p}} * nb + s) & 1u) == 1u));
        }
{% endfor %}
        if (s > 0u) {
{% for j in range(RN) %}
            let xa{{j}} = xqs[(cur * 2u) * TN + ty + {{16 * j}}u];
            let xb{{j}} = xqs[(cur * 2u + 1u) * TN + ty + {{16 * j}}u];
            let xd{{j}} = xsc[cur * TN + ty + {{16 * j}}u];
{% endfor %}
{% for i in range(RM) %}
            {
                let wa = wq[(cur * 2u) * TM + tx + {{16 * i}}u];
                let wb = wq[(cur * 2u + 1u) * TM + tx + {{16 * i}}u];
                let sa = wsc[(cur * 2u) * TM + tx + {{16 * i}}u];
                let sb = wsc[(cur * 2u + 1u) * TM + tx + {{16 * i}}u];
{% for j in range(RN) %}
{% if SCALE == "two" %}
                c{{i}}_{{j}} = fma(fma(sa, f32(dot16(wa, xa{{j}})), sb * f32(dot16(wb, xb{{j}}))), xd{{j}}.x, c{{i}}_{{j}});
{% else %}
                c{{i}}_{{j}} = fma(f32(dot16(wa, xa{{j}}) + dot16(wb, xb{{j}})), sa * xd{{j}}.x, c{{i}}_{{j}});
{% if SCALE == "min" %}
                c{{i}}_{{j}} = fma(-sb, xd{{j}}.y, c{{i}}_{{j}});
{% endif %}
{% endif %}
{% endfor %}
            }
{% endfor %}
        }
        if (more) {
            let nbf = cur ^ 1u;
{% for p in range(WP) %}
            if (wok{{p}}) {
                wq[(nbf * 2u + lh) * TM + lr + {{128 * p}}u] = wv{{p}}.q;
                wsc[(nbf * 2u + lh) * TM + lr + {{128 * p}}u] = wv{{p}}.a;
            }
{% endfor %}
{% for p in range(XP) %}
            if (lr + {{128 * p}}u < TN) {
                xqs[(nbf * 2u + lh) * TN + lr + {{128 * p}}u] = xv{{p}};
                if (lh == 0u) {
                    xsc[nbf * TN + lr + {{128 * p}}u] = xs{{p}};
                }
            }
{% endfor %}
        }
        workgroupBarrier();
    }
{% for j in range(RN) %}
    if (ty + {{16 * j}}u < cnt) {
        let j{{j}} = order[start + ty + {{16 * j}}u];
{% for i in range(RM) %}
        if (r0 + tx + {{16 * i}}u < P.M) {
            store_pair(j{{j}}, e, r0 + tx + {{16 * i}}u, c{{i}}_{{j}});
        }
{% endfor %}
    }
{% endfor %}
}
