// Quantized matrix-vector product for decode: y[r] = W[r, :] . x  (one token).
// Template: QTYPES (one GGUF type per weight buffer w0..), MODE:
//   "concat": rows [0, M0) from w0, [M0, M0+M1) from w1, ... written to y (e.g. Q|K|V)
//   "glu":    y[r] = act(w0[r].x) * (w1[r].x), act = ACT ("silu" or "gelu")
// NORM: x is first RMS-normalized with weight g (every workgroup recomputes the norm: K is small).
// RESIDUAL: y[r] += result.  BIAS: + b[r].
// Each workgroup of 256 threads computes ROWS rows with 256/ROWS lanes per row; a lane takes
// 8-weight chunks lane, lane + LANES, ... of its row, then the lanes are summed.
// SUBGROUPS: sums within a subgroup by shuffles, then one barrier to add the subgroups of a row (a
// barrier is costly on CPU rasterizers like lavapipe, which run invocations as coroutines); without
// it, a shared-memory tree.
{% from "quant.wgsl" import quant_fns %}
{% include "quant.wgsl" %}
const ROWS: u32 = {{ROWS}}u;
const LANES: u32 = 256u / ROWS;

struct Params {
    K: u32,          // row length (weights)
    M: u32,          // total output rows
    m0: u32, m1: u32, // rows from w0, w1 (concat); the rest from w2
    rb0: u32, rb1: u32, rb2: u32, // bytes per row of w0, w1, w2
    x_off: u32,      // first element of x
    y_off: u32,      // first element of y
    eps: f32,
    _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
{% for t in QTYPES %}
@group(0) @binding({{3 + loop.index0}}) var<storage, read> w{{loop.index0}}: array<u32>;
{% endfor %}
{% set nb = 3 + QTYPES|length %}
{% if NORM %}
@group(0) @binding({{nb}}) var<storage, read> g: array<f32>;
{% set nb = nb + 1 %}
{% endif %}
{% if BIAS %}
@group(0) @binding({{nb}}) var<storage, read> b: array<f32>;
{% endif %}

{% for t in QTYPES %}
{{ quant_fns("w" ~ loop.index0, t) }}
{% endfor %}

var<workgroup> red: array<f32, 256>;
var<workgroup> rn: array<f32, 256>;
{% if MODE == "glu" %}
var<workgroup> red2: array<f32, 256>;
{% endif %}

fn xin(i: u32) -> vec4<f32> {
    let o = P.x_off + i;
{% if NORM %}
    return vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]) * vec4<f32>(g[i], g[i + 1u], g[i + 2u], g[i + 3u]);
{% else %}
    return vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]);
{% endif %}
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32{% if SUBGROUPS %}, @builtin(subgroup_size) sg: u32{% endif %}) {
    let row_in_wg = tid / LANES;
    let lane = tid % LANES;
    let r = (wid.x + wid.y * nwg.x) * ROWS + row_in_wg;
{% if NORM %}
    var ss = 0.0;
    for (var i = tid; i < P.K; i += 256u) { let v = x[P.x_off + i]; ss += v * v; }
{% if SUBGROUPS %}
    for (var o = 1u; o < sg; o <<= 1u) { ss += subgroupShuffleXor(ss, o); }
    rn[tid] = ss;
    workgroupBarrier();
    var tot = 0.0;
    for (var j = 0u; j < 256u; j += sg) { tot += rn[j]; }
    let inv = inverseSqrt(tot / f32(P.K) + P.eps);
{% else %}
    rn[tid] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (tid < s) { rn[tid] += rn[tid + s]; }
        workgroupBarrier();
    }
    let inv = inverseSqrt(rn[0] / f32(P.K) + P.eps);
{% endif %}
{% else %}
    let inv = 1.0;
{% endif %}
    let nc = P.K / 8u;
    var acc = 0.0;
{% if MODE == "glu" %}
    var acc2 = 0.0;
{% endif %}
    if (r < P.M) {
{% if MODE == "glu" %}
        let rb0 = r * P.rb0;
        let rb1 = r * P.rb1;
        for (var c = lane; c < nc; c += LANES) {
            let xa = xin(c * 8u); let xb = xin(c * 8u + 4u);
            let a = w0_deq8(rb0, c);
            let q = w1_deq8(rb1, c);
            acc += dot(a.lo, xa) + dot(a.hi, xb);
            acc2 += dot(q.lo, xa) + dot(q.hi, xb);
        }
{% else %}
{% for t in QTYPES %}
{% set i = loop.index0 %}
        {% if not loop.first %}else {% endif %}{% if not loop.last %}if (r < {% if i == 0 %}P.m0{% else %}P.m0 + P.m1{% endif %}) {% endif %}{
            let rr = r{% if i >= 1 %} - P.m0{% endif %}{% if i >= 2 %} - P.m1{% endif %};
            let rb = rr * P.rb{{i}};
            for (var c = lane; c < nc; c += LANES) {
                let a = w{{i}}_deq8(rb, c);
                acc += dot(a.lo, xin(c * 8u)) + dot(a.hi, xin(c * 8u + 4u));
            }
        }
{% endfor %}
{% endif %}
    }
{% if SUBGROUPS %}
    let w = min(sg, LANES);
    for (var o = 1u; o < w; o <<= 1u) {
        acc += subgroupShuffleXor(acc, o);
{% if MODE == "glu" %}
        acc2 += subgroupShuffleXor(acc2, o);
{% endif %}
    }
    red[tid] = acc;
{% if MODE == "glu" %}
    red2[tid] = acc2;
{% endif %}
    workgroupBarrier();
    if (lane == 0u) {
        for (var j = w; j < LANES; j += w) {
            red[tid] += red[tid + j];
{% if MODE == "glu" %}
            red2[tid] += red2[tid + j];
{% endif %}
        }
    }
{% else %}
    red[tid] = acc;
{% if MODE == "glu" %}
    red2[tid] = acc2;
{% endif %}
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            red[tid] += red[tid + s];
{% if MODE == "glu" %}
            red2[tid] += red2[tid + s];
{% endif %}
        }
        workgroupBarrier();
    }
{% endif %}
    if (lane == 0u && r < P.M) {
        var v = red[tid] * inv;
{% if BIAS %}
        v += b[r];
{% endif %}
{% if MODE == "glu" %}
        let u = red2[tid] * inv;
{% if ACT == "silu" %}
        v = v / (1.0 + exp(-v)) * u;
{% else %}
        v = 0.5 * v * (1.0 + tanh(clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -15.0, 15.0))) * u;
{% endif %}
{% endif %}
{% if RESIDUAL %}
        y[P.y_off + r] += v;
{% else %}
        y[P.y_off + r] = v;
{% endif %}
    }
}
