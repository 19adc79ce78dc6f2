// Prefill product in half precision (adapters with shader-f16): Y[t, y_off + r] (+)= sum_k X[t, k] W[r, k]
// for n tokens t and M rows r of a GGUF matrix W [M, K] read in its block format (any type but F32).
// Tile: TM = 16 RM rows x TN = 16 RN tokens per workgroup of 256 threads, 32 weights of K per step.
// Thread (tx, ty) owns rows r0 + tx + 16 i (i < RM) and tokens t0 + ty + 16 j (j < RN): the 16
// threads of a half-warp read 16 different rows of a k-slice, which lie in consecutive words.
// Each step W's tile is dequantized (in f32, by quant.wgsl) and stored as f16, X's tile converted to
// f16, both k-major ([k / 4][row or token] of vec4<f16>, so a thread's reads are conflict-free),
// double-buffered: the next step's global loads are issued before this step's products and stored
// after them, one barrier a step.
// Arithmetic: each output's products are summed in a vec2<f16> (two k lanes: f16 FMA on vec2 runs
// at twice the f32 rate) over FLUSH steps (32 FLUSH weights, 16 FLUSH products a lane), then added
// into an f32 accumulator: f16 rounding never builds up over more than that span, whatever K is.
// Why it is safe: bench/README.md ("Round 3"); the error is measured in tests/test_gpu_matmul16.py.
// XSHIFT: X is stored times 2^-XSHIFT and W times 2^XSHIFT (powers of two: the products do not
// change), which lifts f16's 65,504 ceiling for X by that factor (the down product's input).
// X: [n, ldx] f32 (ldx a multiple of 4); Y: [n, ldy]. Epilogue (bias, GLU, residual): matmul_out.wgsl.
enable f16;
{% from "quant.wgsl" import quant_fns %}
{% include "quant.wgsl" %}
struct Params {
    K: u32, M: u32, n: u32, rb0: u32,
    rb1: u32, ldy: u32, y_off: u32, ldx: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w0: array<u32>;
{% if BIAS %}
@group(0) @binding(4) var<storage, read> b: array<f32>;
{% endif %}
{{ quant_fns("w0", QTYPES[0]) }}
{% include "matmul_out.wgsl" %}
{% set TM = 16 * RM %}
{% set TN = 16 * RN %}
{% set WP = TM // 64 %}{# W loader passes: 64 rows x 4 chunks of 8 weights each #}
{% set XP = TN // 32 %}{# X loader passes: 32 tokens x 8 vec4 each #}
{# XSHIFT: X stored times 2^-XSHIFT and W times 2^XSHIFT (exact), for inputs not bounded by a norm #}
{% set ws_mul = (" * " ~ (2 ** XSHIFT) ~ ".0") if XSHIFT else "" %}
{% set xs_mul = (" * " ~ (1.0 / 2 ** XSHIFT)) if XSHIFT else "" %}

{% macro load_step() %}
{% for p in range(WP) %}
        var wa{{p}} = Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (more) {
            wa{{p}} = w0_deq8(wr{{p}}, s * 4u + lc);
        }
{% endfor %}
{% for p in range(XP) %}
        if (more && xok{{p}}) {
            xv{{p}} = x[xo{{p}} + s * 8u];
        }
{% endfor %}
{% endmacro %}


const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
var<workgroup> ws: array<vec4<f16>, {{2 * 8 * TM}}>;    // [2 buffers][8 k-quads][TM rows]
var<workgroup> xs: array<vec4<f16>, {{2 * 8 * TN}}>;    // [2 buffers][8 k-quads][TN tokens]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r0 = wid.x * TM;
    let t0 = wid.y * TN;
    let tx = t % 16u;
    let ty = t / 16u;
{% for i in range(RM) %}
{% for j in range(RN) %}
    var c{{i}}_{{j}} = 0.0;
    var h{{i}}_{{j}} = vec2<f16>(0.0);
{% endfor %}
{% endfor %}
    // loaders: W row lr + 64 p, chunk lc (8 weights); X token xt + 32 p, vec4 xc (4 k)
    let lr = t / 4u;
    let lc = t % 4u;
    let xt = t / 8u;
    let xc = t % 8u;
{% for p in range(WP) %}
    let wr{{p}} = min(r0 + lr + {{64 * p}}u, P.M - 1u) * P.rb0;
{% endfor %}
{% for p in range(XP) %}
    let xok{{p}} = t0 + xt + {{32 * p}}u < P.n;
    let xo{{p}} = (t0 + xt + {{32 * p}}u) * (P.ldx / 4u) + xc;
    var xv{{p}} = vec4<f32>(0.0);
{% endfor %}
    let nsteps = P.K / 32u;
    for (var s = 0u; s <= nsteps; s++) {
        let cur = (s & 1u) ^ 1u;                 // the buffer step s - 1 was stored into
        let more = s < nsteps;
        // step s's global loads first: in flight during step s - 1's products
{{ load_step() }}
        if (s > 0u) {
            for (var kq = 0u; kq < 8u; kq++) {
{% for i in range(RM) %}
                let w{{i}} = ws[(cur * 8u + kq) * TM + tx + {{16 * i}}u];
{% endfor %}
{% for j in range(RN) %}
                let x{{j}} = xs[(cur * 8u + kq) * TN + ty + {{16 * j}}u];
{% for i in range(RM) %}
                h{{i}}_{{j}} = fma(w{{i}}.zw, x{{j}}.zw, fma(w{{i}}.xy, x{{j}}.xy, h{{i}}_{{j}}));
{% endfor %}
{% endfor %}
            }
            if (s % {{FLUSH}}u == 0u || s == nsteps) {
{% for i in range(RM) %}
{% for j in range(RN) %}
                c{{i}}_{{j}} += f32(h{{i}}_{{j}}.x) + f32(h{{i}}_{{j}}.y);
                h{{i}}_{{j}} = vec2<f16>(0.0);
{% endfor %}
{% endfor %}
            }
        }
        if (more) {
            // into the buffer step s - 2 used (its products are done: the barrier before this one)
            let nb = cur ^ 1u;
{% for p in range(WP) %}
            ws[(nb * 8u + lc * 2u) * TM + lr + {{64 * p}}u] = vec4<f16>(wa{{p}}.lo{{ws_mul}});
            ws[(nb * 8u + lc * 2u + 1u) * TM + lr + {{64 * p}}u] = vec4<f16>(wa{{p}}.hi{{ws_mul}});
{% endfor %}
{% for p in range(XP) %}
            xs[(nb * 8u + xc) * TN + xt + {{32 * p}}u] = vec4<f16>(xv{{p}}{{xs_mul}});
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
