// Prefill product with 8-bit integer products: Y[t, y_off + r] (+)= sum_k X[t, k] W[r, k], X given as
// int8 blocks of 32 (quantize_rows.wgsl: codes, and per block its scale dx and dx * sum of codes), W a
// GGUF matrix [M, K] in its block format (QTYPE: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and
// the IQ2 / IQ3 types, their codes signed grid values or codebook values).
// Tile: TM = 16 RM rows x TN = 16 RN tokens per workgroup of 256 threads; workgroup (x, y) takes rows
// from r0 = x TM and tokens from t0 = y TN. The tile's main loop (int8 decoding into workgroup memory,
// double buffering, the SCALE arithmetic) is mm8_tile.wgsl's, shared with moe_mm8.wgsl; here the
// tile's columns are tokens t0 + ty + 16 j, read from x's rows in order.
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
{% import "mm8_tile.wgsl" as tile %}
{% include "q16.wgsl" %}
{{ tile.decls(RM, RN) }}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r0 = wid.x * TM;
    let t0 = wid.y * TN;
{% call(p) tile.main_loop(RM, RN, QTYPE) %}
    let xok{{p}} = lr + {{128 * p}}u < TN && t0 + lr + {{128 * p}}u < P.n;
    let xtok{{p}} = t0 + lr + {{128 * p}}u;
{% endcall %}
{% for i in range(RM) %}
{% for j in range(RN) %}
    store_y(t0 + ty + {{16 * j}}u, r0 + tx + {{16 * i}}u, c{{i}}_{{j}});
{% endfor %}
{% endfor %}
}
