// The int8 tile products' shared body (matmul8.wgsl: a dense matrix x TN tokens; moe_mm8.wgsl: an
// expert's matrix x TN (token, slot) pairs), as macros; each kernel keeps its bindings, how its columns
// and W's rows are addressed, and its epilogue. A kernel imports this file as `tile` and calls
// tile.decls after quant.wgsl's quant_fns("w0", QTYPE) and q16.wgsl (the decoder w0_q16).
// Tile: TM = 16 RM rows x TN = 16 RN columns per workgroup of 256 threads, one block of 32 weights of K
// per step. Thread (tx, ty) owns rows r0 + tx + 16 i (i < RM) and columns ty + 16 j (j < RN) of the tile.
// Each step W's block of each tile row is decoded to 32 int8 codes (Q4_0 / Q6_K with their offset
// folded in: q - 8, q - 32) and its scales, X's codes copied; both as [half][row or column] vec4<u32>
// (16 codes) in workgroup memory, double-buffered as matmul16.wgsl (one barrier a step).
// Arithmetic: an output's 32 products of a step are 8 dot4I8Packed summed in i32 (exact), then scaled
// once into an f32 accumulator c{i}_{j} (SCALE):
//   "one" (Q4_0, Q8_0, IQ4_NL, MXFP4): acc += f32(S) * (a dx)     a = the block's d
//   "min" (Q4_1, Q4_K, Q5_K): acc += f32(S) * (a dx) - b (dx sum_q)
//                       Q4_1: a = d, b = -m; Q4_K / Q5_K: a = d sc, b = dmin m of the sub-block
//   "two" (Q6_K, IQ): acc += (a f32(S0) + b f32(S1)) dx      a, b = d sc of the two 16-weight halves
// so the only rounding is X's to 8 bits (as llama.cpp's q8 activations) and f32's in the scaling.
// x: array<vec4<u32>> of quantize_rows.wgsl's blocks (codes from word 0, a row K / 16 vec4; each
// block's (dx, dx * sum of codes) from vec4 P.s_off4, two blocks a vec4).

// module scope: dot16, the tile sizes and the double-buffered workgroup tiles
{% macro decls(RM, RN) %}
fn dot16(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y) + dot4I8Packed(a.z, b.z) + dot4I8Packed(a.w, b.w);
}

const TM: u32 = {{16 * RM}}u;
const TN: u32 = {{16 * RN}}u;
var<workgroup> wq: array<vec4<u32>, {{2 * 2 * 16 * RM}}>;   // [2 buffers][2 halves][TM rows] codes
var<workgroup> wsc: array<f32, {{2 * 2 * 16 * RM}}>;        // [2 buffers][2 (a, b)][TM rows]
var<workgroup> xqs: array<vec4<u32>, {{2 * 2 * 16 * RN}}>;  // [2 buffers][2 halves][TN columns] codes
var<workgroup> xsc: array<vec2<f32>, {{2 * 16 * RN}}>;  // [2 buffers][TN columns] (dx, dx * sum of codes)
{% endmacro %}

// In main, with t (local_invocation_index) and r0 (the tile's first row) in scope: the accumulators
// c{i}_{j} over all of K. W's row r0 + lr + 128 p starts at byte w_off + row * P.rb0 (w_off: none, or
// a WGSL expression for the matrix's first byte). The call block, given p, defines the column loader
// p's xok{p} (column lr + 128 p of the tile is there to load) and xtok{p} (its row of x).
{% macro main_loop(RM, RN, QTYPE, w_off=none) %}
{% set TM = 16 * RM %}
{% set TN = 16 * RN %}
{% set WP = (TM + 127) // 128 %}{# W loader passes: 128 rows x 2 halves of 16 codes #}
{% set XP = (TN + 127) // 128 %}{# X loader passes: 128 columns x 2 halves #}
{% set SCALE = {"Q4_0": "one", "Q8_0": "one", "Q4_1": "min", "Q4_K": "min", "Q5_K": "min", "Q6_K": "two",
                "MXFP4": "one", "IQ4_NL": "one"}.get(QTYPE, "two") %}
    let tx = t % 16u;
    let ty = t / 16u;
{% for i in range(RM) %}
{% for j in range(RN) %}
    var c{{i}}_{{j}} = 0.0;
{% endfor %}
{% endfor %}
    // loaders: W row lr + 128 p and column lr + 128 p of the tile, half lh
    let lr = t / 2u;
    let lh = t % 2u;
    let nb = P.K / 32u;                               // blocks a row
{% for p in range(WP) %}
    let wok{{p}} = lr + {{128 * p}}u < TM;
    let wr{{p}} = {% if w_off %}{{w_off}} + {% endif %}min(r0 + lr + {{128 * p}}u, P.M - 1u) * P.rb0;
    var wv{{p}} = Q16(vec4<u32>(0u), 0.0);
{% endfor %}
{% for p in range(XP) %}
{{ caller(p).rstrip() }}
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
{% endmacro %}
