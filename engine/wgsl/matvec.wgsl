// Quantized matrix-vector product for decode: y[r] = W[r, :] . x  (one token).
// Template: QTYPES (one GGUF type per weight buffer w0..), MODE:
//   "concat": rows [0, M0) from w0, [M0, M0+M1) from w1, ... written to y (e.g. Q|K|V)
//   "glu":    y[r] = act(w0[r].x) * (w1[r].x), act = ACT ("silu" or "gelu")
// NORM: x is first RMS-normalized with weight g (every workgroup recomputes the norm: K is small).
// RESIDUAL: y[r] += result.  BIAS: + b[r].
// ATTN_X: x is not a vector but decode attention's split partials (attn_decode.wgsl, pass 1); every
// workgroup merges them into the attention output in workgroup memory first (the combine pass fused
// into the output projection: one dispatch less per layer). a0 = head dim, a1 = max splits.
// ROPE ("normal" or "neox"; Q|K|V concat, 8 rows per workgroup): RoPE and the KV-cache store fused in.
// The q and k rows are dispatched as rotation pairs (a workgroup's rows 0-3 and 4-7 are partners), so
// after the sums a workgroup rotates its 4 pairs at the current position and writes q to y
// [n_head * hd] and k, v straight into the cache [n_kv, max_ctx, hd]. a0 = head dim, a1 = max_ctx.
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
    a0: u32, a1: u32,
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
{% set nb = nb + 1 %}
{% endif %}
{% if ROPE %}
@group(0) @binding({{nb}}) var<storage, read_write> kc: array<f32>;
@group(0) @binding({{nb + 1}}) var<storage, read_write> vc: array<f32>;
@group(0) @binding({{nb + 2}}) var<storage, read> cs: array<f32>;
@group(0) @binding({{nb + 3}}) var<storage, read> step: array<u32>;
var<workgroup> res: array<f32, ROWS>;

// the physical row computed by dispatch row `r` (identity outside the q and k rows)
fn phys_row(r: u32) -> u32 {
    if (r >= P.m0 + P.m1) { return r; }
    let pair = (r / 8u) * 4u + (r % 4u);
    let partner = (r % 8u) / 4u;
    let half = P.a0 / 2u;
    let head = pair / half;
    let i = pair % half;
{% if ROPE == "neox" %}
    return head * P.a0 + i + partner * half;
{% else %}
    return head * P.a0 + 2u * i + partner;
{% endif %}
}
{% endif %}
{% if ATTN_X %}
@group(0) @binding({{nb}}) var<storage, read> step: array<u32>;
var<workgroup> xs: array<f32, {{ATTN_X}}>;
var<workgroup> wsp: array<f32, {{ATTN_WS}}>;   // [heads][max splits]: e^(m_s - M) / L of each split
var<workgroup> mh: array<f32, 256>;
var<workgroup> lh: array<f32, 256>;
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
{% if ATTN_X %}
    return vec4<f32>(xs[i], xs[i + 1u], xs[i + 2u], xs[i + 3u]);
{% elif NORM %}
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
{% if ROPE %}
    let r_dispatch = (wid.x + wid.y * nwg.x) * ROWS + row_in_wg;
    let r = phys_row(r_dispatch);
{% else %}
    let r = (wid.x + wid.y * nwg.x) * ROWS + row_in_wg;
{% endif %}
{% if ATTN_X %}
    {
        let hd = P.a0;
        let ms = P.a1;
        let pw = hd + 2u;
        let nheads = P.K / hd;
        let ns = (step[0] + step[1] + {{ATTN_CHUNK}}u - 1u) / {{ATTN_CHUNK}}u;
        for (var h = tid; h < nheads; h += 256u) {
            var mx = -3.0e38;
            for (var s = 0u; s < ns; s++) { mx = max(mx, x[(h * ms + s) * pw + hd]); }
            var l = 0.0;
            for (var s = 0u; s < ns; s++) { l += exp(x[(h * ms + s) * pw + hd] - mx) * x[(h * ms + s) * pw + hd + 1u]; }
            mh[h] = mx;
            lh[h] = l;
        }
        workgroupBarrier();
        // each split's weight once (not once per element)
        for (var e = tid; e < nheads * ns; e += 256u) {
            let h = e / ns;
            let sp = e % ns;
            wsp[h * ms + sp] = exp(x[(h * ms + sp) * pw + hd] - mh[h]) / lh[h];
        }
        workgroupBarrier();
        for (var e = tid; e < P.K; e += 256u) {
            let h = e / hd;
            let d = e % hd;
            var o = 0.0;
            for (var s = 0u; s < ns; s++) { o += wsp[h * ms + s] * x[(h * ms + s) * pw + d]; }
            xs[e] = o;
        }
        workgroupBarrier();
    }
{% endif %}
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
    var v = 0.0;
    if (lane == 0u && r < P.M) {
        v = red[tid] * inv;
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
{% if not ROPE %}
{% if RESIDUAL %}
        y[P.y_off + r] += v;
{% else %}
        y[P.y_off + r] = v;
{% endif %}
{% endif %}
    }
{% if ROPE %}
    if (lane == 0u) { res[row_in_wg] = v; }
    workgroupBarrier();
    let hd = P.a0;
    let half = hd / 2u;
    let pos = step[0] + step[1] - 1u;
    let first = (wid.x + wid.y * nwg.x) * ROWS;
    if (first < P.m0 + P.m1) {
        if (tid < 4u) {
            let pair = (first / 8u) * 4u + tid;
            let head = pair / half;
            let i = pair % half;
            let c = cs[(pos * half + i) * 2u];
            let sn = cs[(pos * half + i) * 2u + 1u];
            let a = res[tid];
            let b = res[tid + 4u];
{% if ROPE == "neox" %}
            let da = i; let db = i + half;
{% else %}
            let da = 2u * i; let db = 2u * i + 1u;
{% endif %}
            let nh = P.m0 / hd;
            if (head < nh) {
                y[head * hd + da] = a * c - b * sn;
                y[head * hd + db] = a * sn + b * c;
            } else {
                let kb = ((head - nh) * P.a1 + pos) * hd;
                kc[kb + da] = a * c - b * sn;
                kc[kb + db] = a * sn + b * c;
            }
        }
    } else if (lane == 0u && r < P.M) {
        let vr = r - P.m0 - P.m1;
        vc[((vr / hd) * P.a1 + pos) * hd + vr % hd] = v;
    }
{% endif %}
}
