// Prefill product with 8-bit integer products: Y[t, y_off + r] (+)= sum_k X[t, k] W[r, k], X given as
// int8 blocks of 32 (quantize_rows.wgsl: codes, and per block its scale dx and dx * sum of codes), W a
// GGUF matrix [M, K] in its block format (QTYPE: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and
// the IQ2 / IQ3 types, their codes signed grid values or codebook values).
// Tile: TM = 16 RM rows x TN = 16 RN tokens per workgroup of 256 threads, one block of 32 weights of K
// per step. Thread (tx, ty) owns rows r0 + tx + 16 i (i < RM) and tokens t0 + ty + 16 j (j < RN).
// Each step W's block of each tile row is decoded to 32 int8 codes (Q4_0 / Q6_K with their offset
// folded in: q - 8, q - 32) and its scales, X's codes copied; both as [half][row or token] vec4<u32>
// (16 codes) in workgroup memory, double-buffered as matmul16.wgsl (one barrier a step).
// Arithmetic: an output's 32 products of a step are 8 dot4I8Packed summed in i32 (exact), then scaled
// once into an f32 accumulator (SCALE):
//   "one" (Q4_0, Q8_0): acc += f32(S) * (a dx)                 a = the block's d
//   "min" (Q4_1, Q4_K, Q5_K): acc += f32(S) * (a dx) - b (dx sum_q)
//                       Q4_1: a = d, b = -m; Q4_K / Q5_K: a = d sc, b = dmin m of the sub-block
//   "two" (Q6_K, IQ): acc += (a f32(S0) + b f32(S1)) dx      a, b = d sc of the two 16-weight halves
// so the only rounding is X's to 8 bits (as llama.cpp's q8 activations) and f32's in the scaling.
// xq: array<vec4<u32>> (ops.q8_rows_words; codes from word 0, scales from word s_off = 4 P.s_off4);
// Y: [n, ldy]. Epilogue (bias, GLU, residual): matmul_out.wgsl. Speed on the H200 and the whole model's
// numerics: bench/README.md ("Round 8"); tests against numpy: tests/test_gpu_matmul8.py.
{% include "quant.wgsl" %}
struct Params {
    K: u32, M: u32, n: u32, rb0: u32,
    s_off4: u32, ldy: u32, y_off: u32, pad: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w0: array<u32>;
{% if BIAS %}
@group(0) @binding(4) var<storage, read> b: array<f32>;
{% endif %}
{% from "quant.wgsl" import quant_fns %}
{{ quant_fns("w0", QTYPE) }}
{% include "matmul_out.wgsl" %}
{% set TM = 16 * RM %}
{% set TN = 16 * RN %}
{% set WP = (TM + 127) // 128 %}{# W loader passes: 128 rows x 2 halves of 16 codes #}
{% set XP = (TN + 127) // 128 %}{# X loader passes: 128 tokens x 2 halves #}
{% set SCALE = {"Q4_0": "one", "Q8_0": "one", "Q4_1": "min", "Q4_K": "min", "Q5_K": "min", "Q6_K": "two",
                "MXFP4": "one", "IQ4_NL": "one"}.get(QTYPE, "two") %}

{% include "q16.wgsl" %}

fn dot16(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y) + dot4I8Packed(a.z, b.z) + dot4I8Packed(a.w, b.w);
}

const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
var<workgroup> wq: array<vec4<u32>, {{2 * 2 * TM}}>;   // [2 buffers][2 halves][TM rows] codes
var<workgroup> wsc: array<f32, {{2 * 2 * TM}}>;        // [2 buffers][2 (a, b)][TM rows]
var<workgroup> xqs: array<vec4<u32>, {{2 * 2 * TN}}>;  // [2 buffers][2 halves][TN tokens] codes
var<workgroup> xsc: array<vec2<f32>, {{2 * TN}}>;      // [2 buffers][TN tokens] (dx, dx * sum of codes)

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r0 = wid.x * TM;
    let t0 = wid.y * TN;
    let tx = t % 16u;
    let ty = t / 16u;
{% for i in range(RM) %}
{% for j in range(RN) %}
    var c{{i}}_{{j}} = 0.0;
{% endfor %}
{% endfor %}
    // loaders: W row lr + 128 p and X token lr + 128 p, half lh
    let lr = t / 2u;
    let lh = t % 2u;
    let nb = P.K / 32u;                               // blocks a row
{% for p in range(WP) %}
    let wok{{p}} = lr + {{128 * p}}u < TM;
    let wr{{p}} = min(r0 + lr + {{128 * p}}u, P.M - 1u) * P.rb0;
    var wv{{p}} = Q16(vec4<u32>(0u), 0.0);
{% endfor %}
{% for p in range(XP) %}
    let xok{{p}} = lr + {{128 * p}}u < TN && t0 + lr + {{128 * p}}u < P.n;
    let xtok{{p}} = t0 + lr + {{128 * p}}u;
    var xv{{p}} = vec4<u32>(0u);
    var xs{{p}} = vec2<f32>(0.0);
{% endfor %}
    for (var s = 0u; s <= nb; s++) {
        let cur = (s & 1u) ^ 1u;                      // the buffer step s - 1 was stored into
        let more = s < nb;
        // step s's global loads first: in flight during step s - 1's products
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
            // into the buffer step s - 2 used (its products are done: the barrier before this one)
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
{% for i in range(RM) %}
{% for j in range(RN) %}
    store_y(t0 + ty + {{16 * j}}u, r0 + tx + {{16 * i}}u, c{{i}}_{{j}});
{% endfor %}
{% endfor %}
}
