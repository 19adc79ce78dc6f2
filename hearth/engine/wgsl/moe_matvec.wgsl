// The chosen experts' products for n tokens, every expert resident in one 3-D tensor per matrix
// (GGUF bytes, expert e's rows at byte e * EB: numpy [n_expert, M, K]); the expert ids and weights
// come from moe_route.wgsl's route buffer [n, 2 SLOTS] on the GPU, so one dispatch covers all the
// experts a batch needs. MODE:
//   "glu":  workgroup (row group, pair j = t SLOTS + s) computes, for token t's slot s (expert e),
//           y[j, r] = act(Wg_e[r] . x[t] + bg[e, r]) * (Wu_e[r] . x[t] + bu[e, r])  (M = n_ff_exp)
//           ACT "silu": silu(g) u; "swiglu_oai" (gpt-oss): g = min(g, 7), u = clamp(u, -7, 7),
//           g sigmoid(1.702 g) (u + 1); "gelu" (Gemma 4): gelu_tanh(g) u, as matvec.wgsl's
//   "down": workgroup (row group, token t) adds the weighted sum over t's slots to the residual:
//           y[t, r] += sum_s w_s (Wd_{e_s}[r] . x[t SLOTS + s] + bd[e_s, r])             (M = d)
// ORDER (prefill): the pairs come in moe_sort.wgsl's order, grouped by expert, workgroup (pair k,
// row group): pair j = order[k], so the workgroups in flight read few experts' rows (from cache);
// "down" then writes each pair's weighted output yd[j, r] = w_s (Wd_e[r] . x[j] + bd[e, r]) and
// moe_sum.wgsl adds a token's slots to the residual.
// BIAS: the per-expert biases [n_expert, M] (gpt-oss). Layout: ROWS rows a workgroup of 256
// threads, 256 / ROWS lanes a row taking its 8-weight chunks in turn (quant.wgsl `_deq8`), x in f32.
// Q8 (quantized weight types): x arrives as quantize_rows.wgsl's int8 blocks of 32 (binding 1 is
// that buffer, its scales from word s_off) and the products are 4-way integer dot products on the
// weights' codes (quant.wgsl `_dq8`), as llama.cpp's experts read x rounded to Q8_0. C64 (with Q8):
// a lane's chunks are 64 weights (quant.wgsl `_dq64`: a K-quant's scales decoded once per sub-block).
// QIN (= the words of SLOTS rows of int8 blocks, of one row with ORDER; "down" with Q8): x arrives in
// f32 and each workgroup first writes its token's SLOTS rows (ORDER: its pair's row) as int8 blocks
// into workgroup memory (quantize_rows' layout and code, scales from word s_off there): no quantize
// pass (decode: one dispatch less a layer).
// SPAR ("down" per token, = R rows a workgroup): the token's slots in parallel, thread group
// grp = row rr * SLOTS + slot s (LANES lanes each, 256 / LANES >= R SLOTS groups); each group's
// weighted product w_s (Wd_e[r] . x[s] + bd[e, r]) to workgroup memory, then a thread a row adds
// them in slot order to the residual: the per-pair product's parallelism without its yd buffer
// and moe_sum.wgsl's pass (decode: one dispatch less a layer).
// TOPK ("glu", decode, one token): binding 2 holds the router's logits [E] (moe_router.wgsl) and
// every workgroup takes the top k itself (moe_topk.wgsl; GATING, NORM_W as the route kernel's) for
// its slot's expert; workgroup 0 also writes the route [2 SLOTS] (ids, weights) to a binding after
// the others for the down product: no route dispatch (one dispatch less a layer). TK_GROUPS: the
// top k's ranks in two rounds (moe_topk.wgsl GROUPS). SHARED (with TOPK): the last of the SLOTS is
// qwen35moe's shared expert, stored as expert E after the routed ones, its weight sigmoid(logits[E])
// (moe_topk.wgsl SHARED): its gate/up rows run beside the routed experts' in this dispatch.
// SHARED with "down" and ORDER or SPAR (decode by pair, by rows): the last slot reads the shared
// expert's own matrix w1 (QTYPES[1], row bytes rb1; the last binding), its type free of the routed ones'.
{% from "q8_block.wgsl" import q8_block %}
{% from "row_sum.wgsl" import row_sum %}
{% from "quant.wgsl" import quant_fns, kv_wg_init with context %}
{% from "moe_topk.wgsl" import topk, topk_decls %}
{% include "quant.wgsl" %}
{% set GLU = MODE == "glu" %}
{% set Q8 = Q8X | default(0) %}
{% set C64 = C64 | default(False) %}
{% set QIN = QIN | default(0) %}
{% if QIN and (not Q8 or GLU) %}{{ raise("x quantized in the workgroup is built for the down product") }}{% endif %}
{% set QROWS = 1 if ORDER else SLOTS %}
{% set TOPK = TOPK | default(0) %}
{% set SHARED = SHARED | default(False) %}
{% set TK_GROUPS = TK_GROUPS | default(False) %}
{% set SH_DOWN = SHARED and not GLU %}
{% if SHARED and GLU and not TOPK %}{{ raise("the shared expert's gate/up slot is built into the top k") }}{% endif %}
{% if SH_DOWN and (not (ORDER or SPAR) or BIAS) %}{{ raise("the shared expert's down slot is built for the products by pair and by rows") }}{% endif %}
{% set SPAR = SPAR | default(0) %}
{% if SPAR and (GLU or ORDER or SPAR * SLOTS > ROWS) %}{{ raise("the slots in parallel are built for the per-token down product") }}{% endif %}
{% if TOPK and (not GLU or ORDER) %}{{ raise("the top k is built into decode's gate/up product") }}{% endif %}
{% if C64 and not Q8 %}{{ raise("64-weight chunks are built for int8 x only") }}{% endif %}
{% if MODE not in ("glu", "down") %}{{ raise("moe_matvec mode " ~ MODE) }}{% endif %}
const ROWS: u32 = {{ROWS}}u;
const LANES: u32 = {{256 // ROWS}}u;
const SLOTS: u32 = {{SLOTS}}u;
struct Params {
    K: u32,          // row length (weights)
    M: u32,          // rows of one expert's matrix
    rb0: u32, rb1: u32,   // bytes per row of w0 (w1)
    eb0: u32, eb1: u32,   // bytes per expert of w0 (w1)
    n: u32,          // tokens
    s_off: u32,      // Q8: the first word of x's block scales
}
@group(0) @binding(0) var<uniform> P: Params;
{% if QIN %}
@group(0) @binding(1) var<storage, read> xf: array<vec4<f32>>;      // [n SLOTS, K] f32
var<workgroup> x: array<u32, {{QIN}}>;                               // token t's rows as int8 blocks
struct X8 { lo: vec4<f32>, hi: vec4<f32> }
{% elif Q8 %}
@group(0) @binding(1) var<storage, read> x: array<u32>;             // rows as int8 blocks (ops.q8_rows_words)
{% else %}
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;       // glu [n, K]; down [n SLOTS, K]
{% endif %}
{% if TOPK %}
@group(0) @binding(2) var<storage, read> logits: array<f32>;        // [E (+ 1 SHARED)] the router's (bias included)
{% else %}
@group(0) @binding(2) var<storage, read> route: array<u32>;         // [n, 2 SLOTS]
{% endif %}
@group(0) @binding(3) var<storage, read_write> y: array<f32>;       // glu [n SLOTS, M]; down [n, M] (+=)
@group(0) @binding(4) var<storage, read> w0: array<u32>;
{% if GLU %}
@group(0) @binding(5) var<storage, read> w1: array<u32>;
{% if BIAS %}
@group(0) @binding(6) var<storage, read> b0: array<f32>;            // [n_expert, M]
@group(0) @binding(7) var<storage, read> b1: array<f32>;
{% endif %}
{% set nb = 8 if BIAS else 6 %}
{% elif BIAS %}
@group(0) @binding(5) var<storage, read> b0: array<f32>;            // [n_expert, M]
{% set nb = 6 %}
{% else %}
{% set nb = 5 %}
{% endif %}
{% if ORDER %}
@group(0) @binding({{nb}}) var<storage, read> order: array<u32>;    // [n SLOTS] pairs grouped by expert
{% endif %}
{% if SH_DOWN %}
@group(0) @binding({{nb + 1 if ORDER else nb}}) var<storage, read> w1: array<u32>;   // [d, K] the shared expert's down
{% endif %}
{% if TOPK %}
@group(0) @binding({{nb}}) var<storage, read_write> route: array<u32>; // [2 SLOTS] written by workgroup 0
{{ topk_decls(TOPK, SLOTS - (1 if SHARED else 0), TK_GROUPS, SHARED) }}
{% endif %}

{{ quant_fns("w0", QTYPES[0]) }}
{% if GLU or SH_DOWN %}
{{ quant_fns("w1", QTYPES[1]) }}
{% endif %}

var<workgroup> red: array<f32, {{512 if GLU else 256}}>;
{% if SPAR %}
var<workgroup> sp: array<f32, {{SPAR * SLOTS}}>;                  // each (row, slot)'s weighted product
{% endif %}

{% if Q8 %}
// weights [8c, 8c + 8) of the row at byte rowbase (buffer wi) times row xr of x (xb = xr K / 4)
{% macro dot8(wi, rowbase, xb, c) %}{{wi}}_dq8({{rowbase}}, {{c}}, vec2<u32>(x[{{xb}} + 2u * {{c}}], x[{{xb}} + 2u * {{c}} + 1u]), qsum(vec2<u32>(x[{{xb}} + 2u * {{c}}], x[{{xb}} + 2u * {{c}} + 1u]))) * bitcast<f32>(x[P.s_off + ({{xb}} >> 2u) + 2u * ({{c}} >> 2u)]){% endmacro %}
fn qsum(q: vec2<u32>) -> i32 {
    return dot4I8Packed(q.x, 0x01010101u) + dot4I8Packed(q.y, 0x01010101u);
}
{% if C64 %}
// x's values [64c, 64c + 64) of the row at word xb: 8 chunks of codes, their sums, the two blocks' scales
fn x64(xb: u32, c: u32) -> X64 {
    let b = xb + 16u * c;
    let q = array<vec2<u32>, 8>({% for i in range(8) %}vec2<u32>(x[b + {{2 * i}}u], x[b + {{2 * i + 1}}u]){% if not loop.last %}, {% endif %}{% endfor %});
    let so = P.s_off + (xb >> 2u) + 4u * c;
    return X64(q, array<i32, 8>({% for i in range(8) %}qsum(q[{{i}}]){% if not loop.last %}, {% endif %}{% endfor %}),
               vec2<f32>(bitcast<f32>(x[so]), bitcast<f32>(x[so + 2u])));
}
{% endif %}
{% else %}
{% macro dot8(wi, rowbase, xb, c) %}fdot8({{wi}}_deq8({{rowbase}}, {{c}}), {{xb}}, {{c}}){% endmacro %}
fn fdot8(a: Deq8, xb: u32, c: u32) -> f32 {
    return dot(a.lo, x[xb + 2u * c]) + dot(a.hi, x[xb + 2u * c + 1u]);
}
{% endif %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32{% if SUBGROUPS %}, @builtin(subgroup_size) sg: u32{% endif %}) {
{{ kv_wg_init("tid") }}
{% if QIN %}
    {
{% if ORDER %}
        let base = order[wid.x] * (P.K / 4u);        // pair j's row, in vec4s
{% else %}
        let base = wid.y * SLOTS * (P.K / 4u);       // token t's SLOTS rows, in vec4s
{% endif %}
        for (var bk = tid; bk < {{QROWS}}u * P.K / 32u; bk += 256u) {
{% for i in range(4) %}
            let v{{i}} = X8(xf[base + bk * 8u + {{2 * i}}u], xf[base + bk * 8u + {{2 * i + 1}}u]);
{% endfor %}
{{ q8_block() }}
{% for i in range(4) %}
            x[bk * 8u + {{2 * i}}u] = pack4xI8(qa{{i}});
            x[bk * 8u + {{2 * i + 1}}u] = pack4xI8(qb{{i}});
{% endfor %}
            x[P.s_off + 2u * bk] = bitcast<u32>(d);
            x[P.s_off + 2u * bk + 1u] = bitcast<u32>(d * f32(qn0 + qn1 + qn2 + qn3));
        }
        workgroupBarrier();
    }
{% endif %}
    let grp = tid / LANES;
    let lane = tid % LANES;
{% if ORDER %}
    let row = wid.y * ROWS + grp;
{% elif SPAR %}
    let row = wid.x * {{SPAR}}u + grp / SLOTS;
{% else %}
    let row = wid.x * ROWS + grp;
{% endif %}
    let r = min(row, P.M - 1u);
    let nc = P.K / {{64 if C64 else 8}}u;
{% if GLU %}
{% if ORDER %}
    let j = order[wid.x];                        // token t's slot s
{% else %}
    let j = wid.y;                               // token t's slot s
{% endif %}
    let t = j / SLOTS;
{% if TOPK %}
    let first = wid.x == 0u && wid.y == 0u;
{% if SHARED %}
    // the shared slot's workgroups need no top k (wid: uniform, so the barriers inside stay uniform)
    if (j != SLOTS - 1u) {
{% endif %}
    for (var f = tid; f < {{TOPK + (1 if SHARED else 0)}}u; f += 256u) { lg[f] = logits[f]; }
    workgroupBarrier();
{{ topk(TOPK, SLOTS - (1 if SHARED else 0), GATING, NORM_W, "first", TK_GROUPS, SHARED) }}
    if (first && tid < SLOTS) {
        route[tid] = sid[tid];
        route[SLOTS + tid] = bitcast<u32>(sel[tid]);
    }
{% if SHARED %}
    }
    let e = select(sid[j], {{TOPK}}u, j == SLOTS - 1u);
{% else %}
    let e = sid[j];
{% endif %}
{% else %}
    let e = route[t * 2u * SLOTS + j % SLOTS];
{% endif %}
    let ra = e * P.eb0 + r * P.rb0;
    let rb = e * P.eb1 + r * P.rb1;
    let xb = t * (P.K / 4u);
    var acc = 0.0;
    var acu = 0.0;
    for (var c = lane; c < nc; c += LANES) {
{% if C64 %}
        let xv = x64(xb, c);
        acc += w0_dq64(ra, c, xv);
        acu += w1_dq64(rb, c, xv);
{% else %}
        acc += {{ dot8("w0", "ra", "xb", "c") }};
        acu += {{ dot8("w1", "rb", "xb", "c") }};
{% endif %}
    }
{% elif ORDER %}
    let j = order[wid.x];                        // token t's slot s
    let t = j / SLOTS;
    let e = route[t * 2u * SLOTS + j % SLOTS];
    let ws = bitcast<f32>(route[t * 2u * SLOTS + SLOTS + j % SLOTS]);
    let ro = e * P.eb0 + r * P.rb0;
    let xb = {% if QIN %}0u{% else %}j * (P.K / 4u){% endif %};
    var acc = 0.0;
{% if SH_DOWN %}
    if (j % SLOTS == SLOTS - 1u) {
        let rs = r * P.rb1;
        for (var c = lane; c < nc; c += LANES) { acc += {% if C64 %}w1_dq64(rs, c, x64(xb, c)){% else %}{{ dot8("w1", "rs", "xb", "c") }}{% endif %}; }
    } else {
        for (var c = lane; c < nc; c += LANES) { acc += {% if C64 %}w0_dq64(ro, c, x64(xb, c)){% else %}{{ dot8("w0", "ro", "xb", "c") }}{% endif %}; }
    }
{% else %}
    for (var c = lane; c < nc; c += LANES) { acc += {% if C64 %}w0_dq64(ro, c, x64(xb, c)){% else %}{{ dot8("w0", "ro", "xb", "c") }}{% endif %}; }
{% endif %}
{% elif SPAR %}
    let t = wid.y;
    let s = grp % SLOTS;
    let e = route[t * 2u * SLOTS + s];
    let ws = bitcast<f32>(route[t * 2u * SLOTS + SLOTS + s]);
    let ro = e * P.eb0 + r * P.rb0;
    let xb = ({% if QIN %}s{% else %}t * SLOTS + s{% endif %}) * (P.K / 4u);
    var acc = 0.0;
{% if SH_DOWN %}
    if (grp < {{SPAR * SLOTS}}u && s == SLOTS - 1u) {
        let rs = r * P.rb1;
        for (var c = lane; c < nc; c += LANES) { acc += {% if C64 %}w1_dq64(rs, c, x64(xb, c)){% else %}{{ dot8("w1", "rs", "xb", "c") }}{% endif %}; }
    } else if (grp < {{SPAR * SLOTS}}u) {
{% else %}
    if (grp < {{SPAR * SLOTS}}u) {
{% endif %}
        for (var c = lane; c < nc; c += LANES) { acc += {% if C64 %}w0_dq64(ro, c, x64(xb, c)){% else %}{{ dot8("w0", "ro", "xb", "c") }}{% endif %}; }
    }
{% else %}
    let t = wid.y;
    var acc = 0.0;
    for (var s = 0u; s < SLOTS; s++) {
        let e = route[t * 2u * SLOTS + s];
        let ws = bitcast<f32>(route[t * 2u * SLOTS + SLOTS + s]);
        let ro = e * P.eb0 + r * P.rb0;
        let xb = ({% if QIN %}s{% else %}t * SLOTS + s{% endif %}) * (P.K / 4u);
        var part = 0.0;
        for (var c = lane; c < nc; c += LANES) { part += {% if C64 %}w0_dq64(ro, c, x64(xb, c)){% else %}{{ dot8("w0", "ro", "xb", "c") }}{% endif %}; }
        acc += ws * part;
    }
{% endif %}
    // the row group's sums into lane 0's acc, acu (row_sum.wgsl, as matvec.wgsl's)
{% set names = ["acc", "acu"] if GLU else ["acc"] %}
{{ row_sum(names, SUBGROUPS) }}
{% if SPAR %}
    if (lane == 0u && grp < {{SPAR * SLOTS}}u) {
{% if BIAS %}
        sp[grp] = ws * (acc + b0[e * P.M + r]);
{% else %}
        sp[grp] = ws * acc;
{% endif %}
    }
    workgroupBarrier();
    let rw = wid.x * {{SPAR}}u + tid;
    if (tid >= {{SPAR}}u || rw >= P.M) { return; }
    var v = 0.0;
    for (var q = 0u; q < SLOTS; q++) { v += sp[tid * SLOTS + q]; }
    y[t * P.M + rw] += v;
{% else %}
    if (lane != 0u || row >= P.M) { return; }
{% if GLU %}
    var g = acc;
    var u = acu;
{% if BIAS %}
    g += b0[e * P.M + r];
    u += b1[e * P.M + r];
{% endif %}
{% if ACT == "silu" %}
    y[j * P.M + r] = g / (1.0 + exp(-g)) * u;
{% elif ACT == "swiglu_oai" %}
    let gc = min(g, 7.0);
    let uc = clamp(u, -7.0, 7.0);
    y[j * P.M + r] = gc / (1.0 + exp(-1.702 * gc)) * (uc + 1.0);
{% elif ACT == "gelu" %}
    y[j * P.M + r] = 0.5 * g * (1.0 + tanh(clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0))) * u;
{% else %}
    {{ raise("moe_matvec activation " ~ ACT) }}
{% endif %}
{% elif ORDER %}
{% if BIAS %}
    y[j * P.M + r] = ws * (acc + b0[e * P.M + r]);
{% else %}
    y[j * P.M + r] = ws * acc;
{% endif %}
{% else %}
    var v = acc;
{% if BIAS %}
    for (var s = 0u; s < SLOTS; s++) {
        let e = route[t * 2u * SLOTS + s];
        v += bitcast<f32>(route[t * 2u * SLOTS + SLOTS + s]) * b0[e * P.M + r];
    }
{% endif %}
    y[t * P.M + r] += v;
{% endif %}
{% endif %}
}
