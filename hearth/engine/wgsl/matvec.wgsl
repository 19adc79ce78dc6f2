// Quantized matrix-vector product for decode: y[r] = W[r, :] . x  (one token).
// Template: QTYPES (one GGUF type per weight buffer w0..), MODE:
//   "concat": rows [0, M0) from w0, [M0, M0+M1) from w1, ... written to y (e.g. Q|K|V); M0 and M1
//             are multiples of the rows per workgroup, so a workgroup reads one matrix (no branch
//             per row in the inner loop)
//   "glu":    y[r] = act(w0[r].x) * (w1[r].x), act = ACT ("silu" or "gelu")
// NORM: x is RMS-normalized with weight g; the sum of squares comes from the same x loads as the
// products (each row group's lanes cover the whole of x), so it costs no extra pass.
// RESIDUAL: y[r] += result.  BIAS: + b[r].
// ATTN_X: x is not a vector but decode attention's split partials (attn_decode.wgsl, pass 1); every
// workgroup merges them into the attention output in workgroup memory first (the combine pass fused
// into the output projection: one dispatch less per layer, for short contexts). a0 = head dim, a1 = max splits.
// ROPE ("normal" or "neox"; Q|K|V concat): RoPE and the KV-cache store fused in. The q and k rows are
// dispatched as rotation pairs (dispatch rows i and i + RPW/2 of a workgroup are partners), so after
// the sums a workgroup rotates its RPW/2 pairs at the current position and writes q to y
// [n_head * hd] and k, v straight into the cache [n_kv, max_ctx, hd]. a0 = head dim, a1 = max_ctx.
//
// Layout: ROWS rows a workgroup (RPW), RPT (default 1) consecutive rows a thread: 256 threads =
// 256/LANES row groups of LANES = 256 RPT / ROWS threads. Lane l takes the 8-weight chunks l, l + LANES, ... of its rows: x is
// loaded once per chunk (two vec4) and used for all RPT rows, and the RPT rows' block loads are
// independent, so several are in flight per thread. Memory: a warp's lanes read consecutive chunks
// of one row (contiguous bytes).
// Q8X (= K, or 0): x is quantized to int8 in blocks of 32 (one f32 scale each: max |x| / 127, as
// llama.cpp's q8 activations) into workgroup memory by every workgroup before the products, and the
// products are 4-way integer dot products on the weights' codes (quant.wgsl `_dq8`), scaled once per
// 8 weights: no dequantization to f32 per weight. With NORM, x * g is quantized (RMSNorm is one
// factor per row, applied at the end) and the sum of squares of each block kept beside its scale.
// Q8G (with Q8X = K): x arrives already quantized, in global memory (quantize_x.wgsl, once for all
// workgroups): binding 1 is those blocks, and the kernel reads 1.6 bytes per x (codes, chunk sums,
// scales) where f32 x costs 4; no NORM, no ATTN_X.
// C64 (with Q8X): a lane's chunks are 64 weights, not 8 (quant.wgsl `_dq64`): a Q4_K / Q5_K chunk is
// one run of 32 code bytes holding two whole sub-blocks, so their scales and mins are decoded once
// per 32 weights, not per 8, and the codes are read 8 words at a time. V4 (with C64): Q4_K / Q5_K
// weights are declared array<vec4<u32>> and a chunk's header and codes are read in 16-byte loads.
// Q8OUT (glu, 32 rows a workgroup): the workgroup also writes its 32 outputs as one int8 block of
// 32 to xo, in quantize_x.wgsl's layout and with its code (q8_block.wgsl), so the down product that
// reads x pre-quantized (Q8G) needs no quantize_x pass: one dispatch less a layer.
// GATE_S (= S, or 0; Qwen3.5's ssm_out): x is the delta rule's output o [K / S heads, S], gated as it
// is read: RMSNorm(o per head) * gw * silu(z), z at a1 of gz (gated_out.wgsl's order of operations),
// each head's norm computed by every workgroup first. SHIFT_KM1 (with it): the workgroups also move
// the conv state [SHIFT_KM1, SHIFT_CH] on by gz's first SHIFT_CH values (delta_step.wgsl's SHIFT,
// here for the plan's last reader of that state). Not with NORM, GLU, ATTN_X, ROPE or Q8G.
// PRE: x is the residual stream before a pending post-norm (Gemma's): the product reads
// (x + RMSNorm(pt) pw) a2, pt the branch output [K], pw its norm weight, and workgroup 0 also writes
// that sum to po (the residual stream's other buffer: the other workgroups still read x). The
// post-norm pass before the product folded into it: one dispatch less. eps as NORM's.
// GELU_MUL (concat): y[r] = gelu_tanh(W x)[r] em[a0 + r] (Gemma 4's per-layer branch gate).
// A row group's sums: row_sum.wgsl (shared with moe_matvec.wgsl): with SUBGROUPS by shuffles and one
// barrier, without it a shared-memory tree.
{% from "quant.wgsl" import quant_fns, kv_wg_init with context %}
{% from "q8_block.wgsl" import q8_scale, q8_codes, q8_block %}
{% from "row_sum.wgsl" import row_sum %}
{% include "quant.wgsl" %}
{% set GLU = MODE == "glu" %}
{% set Q8X = Q8X | default(0) %}
{% set Q8G = Q8G | default(False) %}
{% set C64 = C64 | default(False) %}
{% if C64 and not Q8X %}{{ raise("64-weight chunks are built for int8 x only") }}{% endif %}
{% set CW = 64 if C64 else 8 %}
{% set V4 = C64 and (V4 | default(False)) %}
{% set V4_TYPES = ("Q4_K", "Q5_K") %}
{% if Q8G and (not Q8X or NORM or ATTN_X) %}{{ raise("pre-quantized x needs Q8X and is built without NORM and ATTN_X") }}{% endif %}
{% set RPT = RPT | default(1) %}
{% set GATE_S = GATE_S | default(0) %}
{% set SHIFT_KM1 = SHIFT_KM1 | default(0) %}
{% if GATE_S and (NORM or GLU or ATTN_X or ROPE or Q8G) %}{{ raise("a gated x is built for plain products only") }}{% endif %}
{% set PRE = PRE | default(False) %}
{% set GELU_MUL = GELU_MUL | default(False) %}
{% if PRE and (Q8G or ATTN_X or ROPE) %}{{ raise("a pending post-norm is built for f32 or int8 x from a vector only") }}{% endif %}
{% set Q8OUT = Q8OUT | default(False) %}
{% if Q8OUT and (not GLU or ROWS != 32) %}{{ raise("int8 output blocks are built for glu with 32 rows a workgroup") }}{% endif %}
{% set LANES = 256 * RPT // ROWS %}
{% set NV = RPT * (2 if GLU else 1) + (1 if NORM else 0) %}
const LANES: u32 = {{LANES}}u;
const RPT: u32 = {{RPT}}u;
const RPW: u32 = {{ROWS}}u;      // rows per workgroup
const NV: u32 = {{NV}}u;        // values each thread reduces: its rows' sums (x2 for glu), + the norm's

struct Params {
    K: u32,          // row length (weights)
    M: u32,          // total output rows
    m0: u32, m1: u32, // rows from w0, w1 (concat); the rest from w2
    rb0: u32, rb1: u32, rb2: u32, // bytes per row of w0, w1, w2
    x_off: u32,      // first element of x (a multiple of 4)
    y_off: u32,      // first element of y
    eps: f32,
    a0: u32, a1: u32,
    a2: f32,         // PRE: the scale of the sum
}
@group(0) @binding(0) var<uniform> P: Params;
{% if ATTN_X %}
@group(0) @binding(1) var<storage, read> x: array<f32>;
{% elif Q8G %}
@group(0) @binding(1) var<storage, read> xg: array<u32>;   // quantize_x.wgsl's blocks of x
const XG_SUMS: u32 = {{Q8X // 4}}u;
const XG_SCALES: u32 = {{Q8X // 4 + Q8X // 8}}u;
{% else %}
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
{% endif %}
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
{% for t in QTYPES %}
@group(0) @binding({{3 + loop.index0}}) var<storage, read> w{{loop.index0}}: array<{{"vec4<u32>" if V4 and t in V4_TYPES else "u32"}}>;
{% endfor %}
{% set nb = 3 + QTYPES|length %}
{% if NORM %}
@group(0) @binding({{nb}}) var<storage, read> g: array<vec4<f32>>;
{% set nb = nb + 1 %}
{% endif %}
{% if BIAS %}
@group(0) @binding({{nb}}) var<storage, read> b: array<f32>;
{% set nb = nb + 1 %}
{% endif %}
{% if GATE_S %}
@group(0) @binding({{nb}}) var<storage, read> gz: array<f32>;        // proj: conv input at 0, z at a1
@group(0) @binding({{nb + 1}}) var<storage, read> gw: array<f32>;    // [S] ssm_norm
{% set nb = nb + 2 %}
const GS: u32 = {{GATE_S}}u;
const GHV: u32 = {{GATE_HV}}u;
const GTPH: u32 = {{GATE_TPH}}u;          // threads a head in the norms' pass (GHV * GTPH <= 256)
var<workgroup> ginv: array<f32, GHV>;
{% if SHIFT_KM1 %}
@group(0) @binding({{nb}}) var<storage, read_write> cst: array<f32>;  // conv state [SHIFT_KM1, SHIFT_CH]
{% set nb = nb + 1 %}
{% endif %}
{% endif %}
{% if Q8OUT %}
@group(0) @binding({{nb}}) var<storage, read_write> xo: array<u32>;   // y [M] as int8 blocks (ops.q8_words(M))
var<workgroup> qo: array<f32, 32>;
{% set nb = nb + 1 %}
{% endif %}
{% if PRE %}
@group(0) @binding({{nb}}) var<storage, read> pt: array<vec4<f32>>;        // [K] the branch output
@group(0) @binding({{nb + 1}}) var<storage, read> pw: array<vec4<f32>>;    // [K] its post-norm weight
@group(0) @binding({{nb + 2}}) var<storage, read_write> po: array<vec4<f32>>;  // [K] the new residual
var<private> pinv: f32;
{% set nb = nb + 3 %}
{% endif %}
{% if GELU_MUL %}
@group(0) @binding({{nb}}) var<storage, read> em: array<f32>;
{% set nb = nb + 1 %}
{% endif %}
{% if ROPE %}
@group(0) @binding({{nb}}) var<storage, read_write> kc: array<f32>;
@group(0) @binding({{nb + 1}}) var<storage, read_write> vc: array<f32>;
@group(0) @binding({{nb + 2}}) var<storage, read> cs: array<f32>;
@group(0) @binding({{nb + 3}}) var<storage, read> step: array<u32>;
var<workgroup> res: array<f32, RPW>;

// the physical row computed by dispatch row `r` (identity outside the q and k rows)
fn phys_row(r: u32) -> u32 {
    if (r >= P.m0 + P.m1) { return r; }
    let pair = (r / RPW) * (RPW / 2u) + (r % (RPW / 2u));
    let partner = (r % RPW) / (RPW / 2u);
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
{{ quant_fns("w" ~ loop.index0, t, V4 and t in V4_TYPES) }}
{% endfor %}
{% if Q8X and ATTN_X %}{{ raise("int8 x is not built for the attention-merging O projection") }}{% endif %}
{% if Q8X and not Q8G %}
var<workgroup> xq: array<vec2<u32>, {{Q8X // 8}}>;   // [chunk] 8 int8 values of x
var<workgroup> xd: array<f32, {{Q8X // 32}}>;        // [block of 32] scale
var<workgroup> xn: array<i32, {{Q8X // 8}}>;         // [chunk] sum of its 8 values
{% if NORM %}
var<workgroup> xss: array<f32, {{Q8X // 32}}>;       // [block] sum of squares of the raw x
{% endif %}
{% endif %}

var<workgroup> red: array<f32, {{NV * 256}}>;   // [value][thread or subgroup]

struct X8 { lo: vec4<f32>, hi: vec4<f32> }
{% if not Q8G %}

// chunk c of x (weights 8c .. 8c + 7), unnormalized
fn xin(c: u32) -> X8 {
{% if ATTN_X %}
    let i = c * 8u;
    return X8(vec4<f32>(xs[i], xs[i + 1u], xs[i + 2u], xs[i + 3u]),
              vec4<f32>(xs[i + 4u], xs[i + 5u], xs[i + 6u], xs[i + 7u]));
{% elif GATE_S %}
    return X8(gated4(c * 8u), gated4(c * 8u + 4u));
{% elif PRE %}
    let i = (P.x_off >> 2u) + c * 2u;
    return X8((x[i] + pt[i] * pinv * pw[c * 2u]) * P.a2, (x[i + 1u] + pt[i + 1u] * pinv * pw[c * 2u + 1u]) * P.a2);
{% else %}
    let i = (P.x_off >> 2u) + c * 2u;
    return X8(x[i], x[i + 1u]);
{% endif %}
}
{% endif %}
{% if GATE_S %}

// x[e .. e + 4) gated (e a multiple of 4; S a multiple of 8, so one head)
fn gated4(e: u32) -> vec4<f32> {
    let z = vec4<f32>(gz[P.a1 + e], gz[P.a1 + e + 1u], gz[P.a1 + e + 2u], gz[P.a1 + e + 3u]);
    let i = e % GS;
    let w = vec4<f32>(gw[i], gw[i + 1u], gw[i + 2u], gw[i + 3u]);
    return z / (1.0 + exp(-z)) * (x[e / 4u] * ginv[e / GS] * w);
}
{% endif %}

{% set UNROLL = UNROLL | default(1) %}
{% macro dots(src, rowvar, accvar, u) %}
{% for j in range(RPT) %}
{% if C64 %}
            {{accvar}}{{j}} += {{src}}_dq64({{rowvar}}{{j}}, c{{u}}, xv{{u}});
{% elif Q8X %}
            {{accvar}}{{j}} += {{src}}_dq8({{rowvar}}{{j}}, c{{u}}, xv{{u}}, xn{{u}}) * xs{{u}};
{% else %}
            { let a = {{src}}_deq8({{rowvar}}{{j}}, c{{u}}); {{accvar}}{{j}} += dot(a.lo, xv{{u}}.lo) + dot(a.hi, xv{{u}}.hi); }
{% endif %}
{% endfor %}
{% endmacro %}

{% macro load_x(u) %}
            let c{{u}} = c + {{u}}u * LANES;
{% if C64 %}
            let b{{u}} = c{{u}} * 8u;   // its first 8-weight chunk
{% if Q8G %}
            let xv{{u}} = X64(array<vec2<u32>, 8>({% for i in range(8) %}vec2<u32>(xg[(b{{u}} + {{i}}u) * 2u], xg[(b{{u}} + {{i}}u) * 2u + 1u]){% if not loop.last %}, {% endif %}{% endfor %}),
                              array<i32, 8>({% for i in range(8) %}bitcast<i32>(xg[XG_SUMS + b{{u}} + {{i}}u]){% if not loop.last %}, {% endif %}{% endfor %}),
                              vec2<f32>(bitcast<f32>(xg[XG_SCALES + 2u * c{{u}}]), bitcast<f32>(xg[XG_SCALES + 2u * c{{u}} + 1u])));
{% else %}
            let xv{{u}} = X64(array<vec2<u32>, 8>({% for i in range(8) %}xq[b{{u}} + {{i}}u]{% if not loop.last %}, {% endif %}{% endfor %}),
                              array<i32, 8>({% for i in range(8) %}xn[b{{u}} + {{i}}u]{% if not loop.last %}, {% endif %}{% endfor %}),
                              vec2<f32>(xd[2u * c{{u}}], xd[2u * c{{u}} + 1u]));
{% if NORM %}
            ss += xss[2u * c{{u}}] + xss[2u * c{{u}} + 1u];
{% endif %}
{% endif %}
{% elif Q8G %}
            let xv{{u}} = vec2<u32>(xg[c{{u}} * 2u], xg[c{{u}} * 2u + 1u]);
            let xn{{u}} = bitcast<i32>(xg[XG_SUMS + c{{u}}]);
            let xs{{u}} = bitcast<f32>(xg[XG_SCALES + (c{{u}} >> 2u)]);
{% elif Q8X %}
            let xv{{u}} = xq[c{{u}}];
            let xn{{u}} = xn[c{{u}}];
            let xs{{u}} = xd[c{{u}} >> 2u];
{% if NORM %}
            ss += xss[c{{u}} >> 2u] * ssf;
{% endif %}
{% else %}
            var xv{{u}} = xin(c{{u}});
{% if NORM %}
            ss += dot(xv{{u}}.lo, xv{{u}}.lo) + dot(xv{{u}}.hi, xv{{u}}.hi);
            xv{{u}} = X8(xv{{u}}.lo * g[c{{u}} * 2u], xv{{u}}.hi * g[c{{u}} * 2u + 1u]);
{% endif %}
{% endif %}
{% endmacro %}

// UNROLL chunks a lane per step, every load of the step issued before its products (more bytes in
// flight per thread), then the remaining chunks one at a time. `body(u)` does the products of chunk u.
{% macro chunk_loop() %}
        var c = lane;
{% if UNROLL > 1 %}
        for (; c + {{UNROLL - 1}}u * LANES < nc; c += {{UNROLL}}u * LANES) {
{% for u in range(UNROLL) %}
{{ load_x(u) }}
{% endfor %}
{% for u in range(UNROLL) %}
{{ caller(u) }}
{% endfor %}
        }
{% endif %}
        for (; c < nc; c += LANES) {
{{ load_x(0) }}
{{ caller(0) }}
        }
{% endmacro %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32{% if SUBGROUPS %}, @builtin(subgroup_size) sg: u32{% endif %}) {
    let grp = tid / LANES;
    let lane = tid % LANES;
    let wg = wid.x + wid.y * nwg.x;
    let first = wg * RPW;                  // the workgroup's first dispatch row
    let d0 = first + grp * RPT;            // this thread's first dispatch row
{{ kv_wg_init("tid") }}
{% if PRE %}
    {
        var s = 0.0;
        for (var e = tid; e < P.K / 4u; e += 256u) { let v = pt[(P.x_off >> 2u) + e]; s += dot(v, v); }
        red[tid] = s;
        workgroupBarrier();
        for (var h = 128u; h > 0u; h >>= 1u) {
            if (tid < h) { red[tid] += red[tid + h]; }
            workgroupBarrier();
        }
        pinv = inverseSqrt(red[0] / f32(P.K) + P.eps);
        workgroupBarrier();            // the row sums below reuse red
        if (wg == 0u) {
            for (var c = tid; c < P.K / 8u; c += 256u) {
                let v = xin(c);
                po[(P.x_off >> 2u) + c * 2u] = v.lo;
                po[(P.x_off >> 2u) + c * 2u + 1u] = v.hi;
            }
        }
    }
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
{% if GATE_S %}
    // each head's 1 / RMS (GTPH threads a head, S / GTPH values each), before any x is read
    {
        let gh = tid / GTPH;
        let n = GS / GTPH;
        var s2 = 0.0;
        if (gh < GHV) {
            let e0 = gh * GS + (tid % GTPH) * n;
            for (var e = e0; e < e0 + n; e++) { let v = x[e / 4u][e % 4u]; s2 += v * v; }
        }
        red[tid] = s2;
        workgroupBarrier();
        if (tid % GTPH == 0u && gh < GHV) {
            var t2 = 0.0;
            for (var l = 0u; l < GTPH; l++) { t2 += red[tid + l]; }
            ginv[gh] = inverseSqrt(t2 / f32(GS) + P.eps);
        }
        workgroupBarrier();
    }
{% if SHIFT_KM1 %}
    for (var ch = wg * 256u + tid; ch < {{SHIFT_CH}}u; ch += nwg.x * nwg.y * 256u) {
        for (var i = 0u; i + 1u < {{SHIFT_KM1}}u; i++) { cst[i * {{SHIFT_CH}}u + ch] = cst[(i + 1u) * {{SHIFT_CH}}u + ch]; }
        cst[({{SHIFT_KM1}}u - 1u) * {{SHIFT_CH}}u + ch] = gz[ch];
    }
{% endif %}
{% endif %}
{% if Q8X and not Q8G %}
    // x (times g) to int8 blocks of 32 in workgroup memory, a block a thread
    for (var bk = tid; bk < P.K / 32u; bk += 256u) {
{% for i in range(4) %}
        var v{{i}} = xin(bk * 4u + {{i}}u);
{% endfor %}
{% if NORM %}
        xss[bk] = {% for i in range(4) %}dot(v{{i}}.lo, v{{i}}.lo) + dot(v{{i}}.hi, v{{i}}.hi){% if not loop.last %} + {% endif %}{% endfor %};
{% for i in range(4) %}
        v{{i}} = X8(v{{i}}.lo * g[(bk * 4u + {{i}}u) * 2u], v{{i}}.hi * g[(bk * 4u + {{i}}u) * 2u + 1u]);
{% endfor %}
{% endif %}
{{ q8_block() }}
        xd[bk] = d;
{% for i in range(4) %}
        xq[bk * 4u + {{i}}u] = vec2<u32>(pack4xI8(qa{{i}}), pack4xI8(qb{{i}}));
        xn[bk * 4u + {{i}}u] = qn{{i}};
{% endfor %}
    }
    workgroupBarrier();
{% if NORM and not C64 %}
    let ssf = select(0.0, 1.0, (lane & 3u) == 0u);   // one lane in four adds each block's squares
{% endif %}
{% endif %}
    // physical rows, clamped into the matrix (rows past M compute a duplicate and are not written)
{% for j in range(RPT) %}
{% if ROPE %}
    let r{{j}} = min(phys_row(d0 + {{j}}u), P.M - 1u);
{% else %}
    let r{{j}} = min(d0 + {{j}}u, P.M - 1u);
{% endif %}
{% endfor %}
    let nc = P.K / {{CW}}u;             // chunks of CW weights a row
    var ss = 0.0;
{% for j in range(RPT) %}
    var acc{{j}} = 0.0;
{% if GLU %}
    var acu{{j}} = 0.0;
{% endif %}
{% endfor %}
{% if GLU %}
    {
{% for j in range(RPT) %}
        let ra{{j}} = r{{j}} * P.rb0;
        let rb{{j}} = r{{j}} * P.rb1;
{% endfor %}
{% call(u) chunk_loop() %}{{ dots("w0", "ra", "acc", u) }}{{ dots("w1", "rb", "acu", u) }}{% endcall %}
    }
{% else %}
{% for t in QTYPES %}
{% set i = loop.index0 %}
    {% if not loop.first %}else {% endif %}{% if not loop.last %}if (first < {% if i == 0 %}P.m0{% else %}P.m0 + P.m1{% endif %}) {% endif %}{
{% for j in range(RPT) %}
        let ro{{j}} = (r{{j}}{% if i >= 1 %} - P.m0{% endif %}{% if i >= 2 %} - P.m1{% endif %}) * P.rb{{i}};
{% endfor %}
{% call(u) chunk_loop() %}{{ dots("w" ~ i, "ro", "acc", u) }}{% endcall %}
    }
{% endfor %}
{% endif %}
    // the values to reduce over the row group (row_sum.wgsl)
{% set names = [] %}
{% for j in range(RPT) %}
{% set _ = names.append("acc" ~ j) %}
{% if GLU %}{% set _ = names.append("acu" ~ j) %}{% endif %}
{% endfor %}
{% if NORM %}{% set _ = names.append("ss") %}{% endif %}
{{ row_sum(names, SUBGROUPS) }}
{% if NORM %}
    let inv = inverseSqrt(ss / f32(P.K) + P.eps);
{% else %}
    let inv = 1.0;
{% endif %}
{% for j in range(RPT) %}
    {
        let r = r{{j}};
        var v = 0.0;
        if (lane == 0u && d0 + {{j}}u < P.M) {
{% if GLU %}
            v = acc{{j}} * inv;
            let u = acu{{j}} * inv;
{% else %}
            v = acc{{j}} * inv;
{% endif %}
{% if BIAS %}
            v += b[r];
{% endif %}
{% if GLU %}
{% if ACT == "silu" %}
            v = v / (1.0 + exp(-v)) * u;
{% else %}
            v = 0.5 * v * (1.0 + tanh(clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -15.0, 15.0))) * u;
{% endif %}
{% endif %}
{% if GELU_MUL %}
            v = 0.5 * v * (1.0 + tanh(clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -15.0, 15.0))) * em[P.a0 + r];
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
        if (lane == 0u) { res[grp * RPT + {{j}}u] = v; }
{% endif %}
{% if Q8OUT %}
        if (lane == 0u) { qo[grp * RPT + {{j}}u] = v; }
{% endif %}
    }
{% endfor %}
{% if Q8OUT %}
    // the block of the workgroup's 32 rows (M is a multiple of 32): a thread a chunk of 8
    workgroupBarrier();
    if (tid < 4u) {
        var amax = 0.0;
        for (var i = 0u; i < 32u; i++) { amax = max(amax, abs(qo[i])); }
        let o = tid * 8u;
        let v0 = X8(vec4<f32>(qo[o], qo[o + 1u], qo[o + 2u], qo[o + 3u]),
                    vec4<f32>(qo[o + 4u], qo[o + 5u], qo[o + 6u], qo[o + 7u]));
{{ q8_scale("amax") }}
{{ q8_codes(0) }}
        let ch = first / 8u + tid;
        let mc = P.M / 8u;
        xo[ch * 2u] = pack4xI8(qa0);
        xo[ch * 2u + 1u] = pack4xI8(qb0);
        xo[mc * 2u + ch] = bitcast<u32>(qn0);
        if (tid == 0u) { xo[mc * 3u + first / 32u] = bitcast<u32>(d); }
    }
{% endif %}
{% if ROPE %}
    workgroupBarrier();
    let hd = P.a0;
    let half = hd / 2u;
    let pos = step[0] + step[1] - 1u;
    if (first < P.m0 + P.m1) {
        if (tid < RPW / 2u) {
            let pair = (first / RPW) * (RPW / 2u) + tid;
            let head = pair / half;
            let i = pair % half;
            let c = cs[(pos * half + i) * 2u];
            let sn = cs[(pos * half + i) * 2u + 1u];
            let a = res[tid];
            let b = res[tid + RPW / 2u];
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
    } else if (lane == 0u) {
{% for j in range(RPT) %}
        if (d0 + {{j}}u < P.M) {
            let vr = r{{j}} - P.m0 - P.m1;
            vc[((vr / hd) * P.a1 + pos) * hd + vr % hd] = res[grp * RPT + {{j}}u];
        }
{% endfor %}
    }
{% endif %}
}
