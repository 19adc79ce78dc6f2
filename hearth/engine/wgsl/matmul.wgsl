// Tiled quantized matrix product for prefill: Y[t, y_off + r] (+)= sum_k X[t, k] W[r, k]
// for n tokens t and M rows r of a GGUF matrix W [M, K] read in its block format.
// Tile: 64 rows x 64 tokens per workgroup of 256 threads, 32 weights of K per step. Thread (tx, ty)
// owns rows r0 + tx + 16 i and tokens t0 + ty + 16 j (i, j < 4): interleaved so that the 16 threads
// reading a k-slice hit different banks. Both tiles are stored [row or token][k / 4] as vec4 with a
// padded stride of 9, written whole (no per-component stores) and read as vec4: 16 dot products per
// 8 vec4 loads. W's tile is dequantized into workgroup memory once per step (one 8-weight chunk a thread).
// X: [n, ldx]; Y: [n, ldy].  EPI_GLU: Y already holds gate = X Wg^T (the previous dispatch) and this
// product is up: Y = act(gate) * up, in place (the gated FFN of prefill without a third pass).
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
{% if BIAS %}
@group(0) @binding(4) var<storage, read> b: array<f32>;
{% endif %}
{{ quant_fns("w0", QTYPES[0]) }}
{% include "matmul_out.wgsl" %}

const ST: u32 = 9u;                            // vec4 stride of a tile row (8 + 1 of padding)
var<workgroup> ws: array<vec4<f32>, 576>;      // [64 rows][ST]
var<workgroup> xs: array<vec4<f32>, 576>;      // [64 tokens][ST]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r0 = wid.x * 64u;
    let t0 = wid.y * 64u;
    let tx = t % 16u;
    let ty = t / 16u;
{% for j in range(4) %}
    var acc{{j}} = vec4<f32>(0.0);             // rows tx + 16 i (components), token ty + 16 * {{j}}
{% endfor %}
    // loaders: thread t fills row (t / 4) of the W tile and token (t / 4) of the X tile, 8 k each
    let lr = t / 4u;
    let lc = t % 4u;
    let wr = min(r0 + lr, P.M - 1u);
    let xt = t0 + lr;
    let nsteps = P.K / 32u;
    for (var s = 0u; s < nsteps; s++) {
        let c = s * 4u + lc;
        let a = w0_deq8(wr * P.rb0, c);
        var xa = vec4<f32>(0.0); var xb = vec4<f32>(0.0);
        if (xt < P.n) {
            let o = xt * P.ldx + c * 8u;
            xa = vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]);
            xb = vec4<f32>(x[o + 4u], x[o + 5u], x[o + 6u], x[o + 7u]);
        }
        workgroupBarrier();
        ws[lr * ST + lc * 2u] = a.lo;
        ws[lr * ST + lc * 2u + 1u] = a.hi;
        xs[lr * ST + lc * 2u] = xa;
        xs[lr * ST + lc * 2u + 1u] = xb;
        workgroupBarrier();
        for (var kq = 0u; kq < 8u; kq++) {
{% for i in range(4) %}
            let w{{i}} = ws[(tx + {{16 * i}}u) * ST + kq];
{% endfor %}
{% for j in range(4) %}
            let x{{j}} = xs[(ty + {{16 * j}}u) * ST + kq];
            acc{{j}} += vec4<f32>(dot(w0, x{{j}}), dot(w1, x{{j}}), dot(w2, x{{j}}), dot(w3, x{{j}}));
{% endfor %}
        }
    }
{% for j in range(4) %}
{% for i in range(4) %}
    store_y(t0 + ty + {{16 * j}}u, r0 + tx + {{16 * i}}u, acc{{j}}[{{i}}]);
{% endfor %}
{% endfor %}
}
