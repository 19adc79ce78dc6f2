// Tiled quantized matrix product for prefill: Y[t, y_off + r] (+)= sum_k X[t, k] W[r, k]
// for n tokens t and M rows r of a GGUF matrix W [M, K] read in its block format.
// Tile: 64 rows x 64 tokens per workgroup of 256 threads, 32 weights of K per step; each thread
// owns a 4 x 4 block of outputs. W's tile is dequantized into workgroup memory once per step
// (one 8-weight chunk per thread). MODE "glu": W0 = gate, W1 = up, Y = act(gate) * up.
// X: [n, ldx]; Y: [n, ldy].  EPI_GLU: Y already holds gate = X Wg^T (the previous dispatch) and this
// product is up: Y = act(gate) * up, in place (the gated FFN of prefill without a third pass; a single
// two-accumulator product, MODE "glu", ran 3x slower on the H200).
{% from "quant.wgsl" import quant_fns %}
{% include "quant.wgsl" %}
struct Params {
    K: u32, M: u32, n: u32, rb0: u32,
    rb1: u32, ldy: u32, y_off: u32, ldx: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w0: array<u32>;
{% if MODE == "glu" %}
@group(0) @binding(4) var<storage, read> w1: array<u32>;
{% endif %}
{% if BIAS %}
@group(0) @binding({{5 if MODE == "glu" else 4}}) var<storage, read> b: array<f32>;
{% endif %}
{{ quant_fns("w0", QTYPES[0]) }}
{% if MODE == "glu" %}
{{ quant_fns("w1", QTYPES[1]) }}
{% endif %}

var<workgroup> ws: array<vec4<f32>, 512>;     // [32 k][64 rows / 4]
{% if MODE == "glu" %}
var<workgroup> us: array<vec4<f32>, 512>;
{% endif %}
var<workgroup> xs: array<vec4<f32>, 512>;     // [32 k][64 tokens / 4]


@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r0 = wid.x * 64u;
    let t0 = wid.y * 64u;
    let tx = t % 16u;          // rows tx*4 .. +4
    let ty = t / 16u;          // tokens ty*4 .. +4
    var acc: array<vec4<f32>, 4>;       // acc[j] = rows tx*4..+4 of token ty*4 + j
{% if MODE == "glu" %}
    var acc2: array<vec4<f32>, 4>;
{% endif %}
    for (var j = 0u; j < 4u; j++) {
        acc[j] = vec4<f32>(0.0);
{% if MODE == "glu" %}
        acc2[j] = vec4<f32>(0.0);
{% endif %}
    }
    // loaders: thread t fills row (t / 4) of the W tile and token (t / 4) of the X tile, 8 k each
    let lr = t / 4u;
    let lc = t % 4u;
    let wr = min(r0 + lr, P.M - 1u);
    let xt = t0 + lr;
    let nsteps = P.K / 32u;
    for (var s = 0u; s < nsteps; s++) {
        let c = s * 4u + lc;
        let a = w0_deq8(wr * P.rb0, c);
{% if MODE == "glu" %}
        let u = w1_deq8(wr * P.rb1, c);
{% endif %}
        var xa = vec4<f32>(0.0); var xb = vec4<f32>(0.0);
        if (xt < P.n) {
            let o = xt * P.ldx + c * 8u;
            xa = vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]);
            xb = vec4<f32>(x[o + 4u], x[o + 5u], x[o + 6u], x[o + 7u]);
        }
        workgroupBarrier();
        // scatter: element (k, r) of a [32][64] tile lives in vec4 k * 16 + r / 4, lane r % 4
        let kk = lc * 8u;
        let col = lr / 4u;
        let lane = lr % 4u;
        for (var e = 0u; e < 8u; e++) {
            var wv: f32; var xv: f32;
{% if MODE == "glu" %}
            var uv: f32;
{% endif %}
            if (e < 4u) { wv = a.lo[e]; xv = xa[e]; } else { wv = a.hi[e - 4u]; xv = xb[e - 4u]; }
            ws[(kk + e) * 16u + col][lane] = wv;
            xs[(kk + e) * 16u + col][lane] = xv;
{% if MODE == "glu" %}
            if (e < 4u) { uv = u.lo[e]; } else { uv = u.hi[e - 4u]; }
            us[(kk + e) * 16u + col][lane] = uv;
{% endif %}
        }
        workgroupBarrier();
        for (var k = 0u; k < 32u; k++) {
            let wv = ws[k * 16u + tx];
            let xv = xs[k * 16u + ty];
            acc[0] += wv * xv.x; acc[1] += wv * xv.y; acc[2] += wv * xv.z; acc[3] += wv * xv.w;
{% if MODE == "glu" %}
            let uv = us[k * 16u + tx];
            acc2[0] += uv * xv.x; acc2[1] += uv * xv.y; acc2[2] += uv * xv.z; acc2[3] += uv * xv.w;
{% endif %}
        }
    }
    for (var j = 0u; j < 4u; j++) {
        let tok = t0 + ty * 4u + j;
        if (tok >= P.n) { continue; }
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + tx * 4u + i;
            if (r >= P.M) { continue; }
            var v = acc[j][i];
{% if BIAS %}
            v += b[r];
{% endif %}
{% if MODE == "glu" %}
            let g = v;
            let u = acc2[j][i];
{% if ACT == "silu" %}
            v = g / (1.0 + exp(-g)) * u;
{% else %}
            v = 0.5 * g * (1.0 + tanh(clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0))) * u;
{% endif %}
{% endif %}
            let o = tok * P.ldy + P.y_off + r;
{% if EPI_GLU %}
            let gt = y[o];
{% if ACT == "silu" %}
            v = gt / (1.0 + exp(-gt)) * v;
{% else %}
            v = 0.5 * gt * (1.0 + tanh(clamp(0.7978845608028654 * (gt + 0.044715 * gt * gt * gt), -15.0, 15.0))) * v;
{% endif %}
{% endif %}
{% if RESIDUAL %}
            y[o] += v;
{% else %}
            y[o] = v;
{% endif %}
        }
    }
}
