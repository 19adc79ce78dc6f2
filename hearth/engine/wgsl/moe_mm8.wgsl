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
// Tile: TM = 16 RM rows x TN = 16 RN pairs. The tile's main loop (int8 decoding into workgroup memory,
// double buffering, the SCALE arithmetic) is mm8_tile.wgsl's, shared with matmul8.wgsl; here W's rows
// start at expert e's matrix and the tile's column ty + 16 j is pair order[start + ty + 16 j].
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
{% import "mm8_tile.wgsl" as tile %}
{% include "q16.wgsl" %}
{{ tile.decls(RM, RN) }}

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
{% call(p) tile.main_loop(RM, RN, QTYPE, w_off="e * P.eb0") %}
    let xok{{p}} = lr + {{128 * p}}u < min(TN, cnt);
    let xj{{p}} = order[start + min(lr + {{128 * p}}u, cnt - 1u)];
    let xtok{{p}} = {% if MODE == "down" %}xj{{p}}{% else %}xj{{p}} / SLOTS{% endif %};   // x's row
{% endcall %}
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
