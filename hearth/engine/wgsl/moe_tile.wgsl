// The chosen experts' products for a prefill chunk, a tile of up to T (token, slot) pairs of one
// expert a workgroup (moe_sort.wgsl's tiles and order): each weight chunk is decoded once (quant.wgsl
// `_deq8`) and multiplied with the T pairs' x, so a chunk's expert matrices are decoded about
// n k / T times instead of n k. Workgroup (tile, row group); ROWS rows of 256 / ROWS lanes.
//   "glu":  y[j, r] = act(Wg_e[r] . x[t] + bg[e, r]) * (Wu_e[r] . x[t] + bu[e, r])  (j = t SLOTS + s)
//   "down": y[j, r] = w_s (Wd_e[r] . x[j] + bd[e, r])       (moe_sum.wgsl adds a token's slots)
// Activations as moe_matvec.wgsl. Q8X: x is quantize_rows.wgsl's int8 blocks, read as their values
// (code times scale, in f32: what the int8 products multiply), scales from word s_off. A row group's
// sums: row_sum.wgsl's tree (lane 0 reads them from red).
{% from "quant.wgsl" import quant_fns with context %}
{% from "row_sum.wgsl" import tree_sum %}
{% include "quant.wgsl" %}
{% set GLU = MODE == "glu" %}
{% set Q8 = Q8X | default(0) %}
{% if MODE not in ("glu", "down") %}{{ raise("moe_tile mode " ~ MODE) }}{% endif %}
const ROWS: u32 = {{ROWS}}u;
const LANES: u32 = {{256 // ROWS}}u;
const SLOTS: u32 = {{SLOTS}}u;
{% set NV = T * (2 if GLU else 1) %}
struct Params {
    K: u32, M: u32, rb0: u32, rb1: u32, eb0: u32, eb1: u32, n: u32, s_off: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
{% if Q8 %}
@group(0) @binding(1) var<storage, read> x: array<u32>;
{% else %}
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;       // glu [n, K]; down [n SLOTS, K]
{% endif %}
@group(0) @binding(2) var<storage, read> route: array<u32>;         // [n, 2 SLOTS]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;       // [n SLOTS, M]
@group(0) @binding(4) var<storage, read> w0: array<u32>;
{% if GLU %}
@group(0) @binding(5) var<storage, read> w1: array<u32>;
{% set nb = 6 %}
{% else %}
{% set nb = 5 %}
{% endif %}
{% if BIAS %}
@group(0) @binding({{nb}}) var<storage, read> b0: array<f32>;       // [n_expert, M]
{% set nb = nb + 1 %}
{% if GLU %}
@group(0) @binding({{nb}}) var<storage, read> b1: array<f32>;
{% set nb = nb + 1 %}
{% endif %}
{% endif %}
@group(0) @binding({{nb}}) var<storage, read> tiles: array<u32>;    // [max_tiles, 2]
@group(0) @binding({{nb + 1}}) var<storage, read> order: array<u32>; // [n SLOTS]

{{ quant_fns("w0", QTYPES[0]) }}
{% if GLU %}
{{ quant_fns("w1", QTYPES[1]) }}
{% endif %}

var<workgroup> red: array<f32, {{NV * 256}}>;

// chunk c (values 8c .. 8c + 7) of the x row starting at word / vec4 xb (row K / 4)
fn xload(xb: u32, c: u32) -> Deq8 {
{% if Q8 %}
    let s = bitcast<f32>(x[P.s_off + (xb >> 2u) + 2u * (c >> 2u)]);
    return Deq8(vec4<f32>(unpack4xI8(x[xb + 2u * c])) * s, vec4<f32>(unpack4xI8(x[xb + 2u * c + 1u])) * s);
{% else %}
    return Deq8(x[xb + 2u * c], x[xb + 2u * c + 1u]);
{% endif %}
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let info = tiles[2u * wid.x + 1u];
    let cnt = info >> 24u;
    if (cnt == 0u) { return; }
    let e = tiles[2u * wid.x];
    let start = info & 0xFFFFFFu;
    let grp = tid / LANES;
    let lane = tid % LANES;
    let row = wid.y * ROWS + grp;
    let r = min(row, P.M - 1u);
    let nc = P.K / 8u;
    let ra = e * P.eb0 + r * P.rb0;
{% if GLU %}
    let rb = e * P.eb1 + r * P.rb1;
{% endif %}
{% for p in range(T) %}
    let j{{p}} = order[start + min({{p}}u, cnt - 1u)];   // past cnt: a duplicate, not written
{% if GLU %}
    let xb{{p}} = (j{{p}} / SLOTS) * (P.K / 4u);
    var acu{{p}} = 0.0;
{% else %}
    let xb{{p}} = j{{p}} * (P.K / 4u);
{% endif %}
    var acc{{p}} = 0.0;
{% endfor %}
    for (var c = lane; c < nc; c += LANES) {
        let a = w0_deq8(ra, c);
{% if GLU %}
        let b = w1_deq8(rb, c);
{% endif %}
{% for p in range(T) %}
        {
            let v = xload(xb{{p}}, c);
            acc{{p}} += dot(a.lo, v.lo) + dot(a.hi, v.hi);
{% if GLU %}
            acu{{p}} += dot(b.lo, v.lo) + dot(b.hi, v.hi);
{% endif %}
        }
{% endfor %}
    }
{% set names = [] %}
{% for p in range(T) %}{% set _ = names.append("acc" ~ p) %}{% if GLU %}{% set _ = names.append("acu" ~ p) %}{% endif %}{% endfor %}
{{ tree_sum(names) }}
    if (lane != 0u || row >= P.M) { return; }
{% for p in range(T) %}
    if ({{p}}u < cnt) {
{% if GLU %}
        var g = red[{{2 * p * 256}}u + tid];
        var u = red[{{(2 * p + 1) * 256}}u + tid];
{% if BIAS %}
        g += b0[e * P.M + r];
        u += b1[e * P.M + r];
{% endif %}
{% if ACT == "silu" %}
        y[j{{p}} * P.M + r] = g / (1.0 + exp(-g)) * u;
{% elif ACT == "swiglu_oai" %}
        let gc = min(g, 7.0);
        let uc = clamp(u, -7.0, 7.0);
        y[j{{p}} * P.M + r] = gc / (1.0 + exp(-1.702 * gc)) * (uc + 1.0);
{% elif ACT == "gelu" %}
        y[j{{p}} * P.M + r] = 0.5 * g * (1.0 + tanh(clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0))) * u;
{% else %}
        {{ raise("moe_tile activation " ~ ACT) }}
{% endif %}
{% else %}
        let t = j{{p}} / SLOTS;
        let ws = bitcast<f32>(route[t * 2u * SLOTS + SLOTS + j{{p}} % SLOTS]);
{% if BIAS %}
        y[j{{p}} * P.M + r] = ws * (red[{{p * 256}}u + tid] + b0[e * P.M + r]);
{% else %}
        y[j{{p}} * P.M + r] = ws * red[{{p * 256}}u + tid];
{% endif %}
{% endif %}
    }
{% endfor %}
}
