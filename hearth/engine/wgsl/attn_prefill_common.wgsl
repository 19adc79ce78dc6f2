{#
What attn_prefill.wgsl (a thread a query row) and attn_prefill_wide.wgsl (T threads a row, each a
slice of D = HD / T dims at d0) share, as macros, each with one owner here:
  params      the parameter struct (ops.ATTN_PREFILL_FIELDS, in its order)
  kv_bindings bindings 1 .. 5 (q, kc, vc, part, step); with f16 a float16 cache (f16_kv.wgsl) and
              its kload / vload, else the caller's float32 kc, vc, kload and vload
  tile_setup  a thread's query i (wid.x * BQ + qi) and its position qp, its n4 vec4s of q (scaled;
              from dim off of the row) and of o in registers, the online softmax's m and l, and the
              keys its split walks: [k_begin, k_end), lo the first key its sliding window sees
  store_o     ob, the (query, head, split)'s row of the partials, and its n4 vec4s of o there from
              `at` (ob, or ob + d0 for a slice)
Macros emit WGSL only: the names they read (wid, step, q, part, P, BQ, KT, HD, PW) are the kernel's.
#}
{% macro params() %}
struct Params {
    n_head: u32, n_kv: u32, max_ctx: u32, scale: f32,
    window: u32, n_splits: u32, _b: u32, _c: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
{% endmacro %}

{% macro tile_setup(qi, n4, off) %}
    let h = wid.y;
    let kvh = h / (P.n_head / P.n_kv);
    let pos = step[0];
    let n = step[1];
    let i = wid.x * BQ + {{qi}};             // this thread's query
    let live = i < n;
    let qp = pos + i;                          // its position
    // q and o live in registers: one variable per vec4 (unrolled by the template), since a private
    // array indexed in a loop is placed in (slow) local memory by GPU compilers.
{% for d in range(n4) %}
    var q{{d}} = vec4<f32>(0.0);
    var o{{d}} = vec4<f32>(0.0);
{% endfor %}
    if (live) {
        let qb = (i * P.n_head + h) * HD{{off}};
{% for d in range(n4) %}
        q{{d}} = vec4<f32>(q[qb + {{4 * d}}u], q[qb + {{4 * d + 1}}u], q[qb + {{4 * d + 2}}u], q[qb + {{4 * d + 3}}u]) * P.scale;
{% endfor %}
    }
    var m = -3.0e38;
    var l = 0.0;
    // keys any query of this tile may see
    let last_q = min(pos + wid.x * BQ + BQ, pos + n) - 1u;
    var first = 0u;
    if (P.window > 0u && pos + wid.x * BQ + 1u > P.window) { first = pos + wid.x * BQ + 1u - P.window; }
    var lo = 0u;
    if (P.window > 0u && qp + 1u > P.window) { lo = qp + 1u - P.window; }
    // this split's share of the keys, in whole tiles
    let span = last_q + 1u - first;
    let per = ((span + P.n_splits - 1u) / P.n_splits + KT - 1u) / KT * KT;
    let k_begin = first + wid.z * per;
    let k_end = min(k_begin + per, last_q + 1u);
{% endmacro %}

{% macro store_o(n4, at) %}
        let ob = ((i * P.n_head + h) * P.n_splits + wid.z) * PW;
{% for d in range(n4) %}
        part[{{at}} + {{4 * d}}u] = o{{d}}.x; part[{{at}} + {{4 * d + 1}}u] = o{{d}}.y;
        part[{{at}} + {{4 * d + 2}}u] = o{{d}}.z; part[{{at}} + {{4 * d + 3}}u] = o{{d}}.w;
{% endfor %}
{% endmacro %}

{% macro kv_bindings(f16) %}
@group(0) @binding(1) var<storage, read> q: array<f32>;
{% if f16 %}
@group(0) @binding(2) var<storage, read> kc: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec2<u32>>;
{% include "f16_kv.wgsl" %}
// 4 values from element b (a multiple of 4)
fn kload(b: u32) -> vec4<f32> { return unpack_f16x4(kc[b / 4u]); }
fn vload(b: u32) -> vec4<f32> { return unpack_f16x4(vc[b / 4u]); }
{% else %}
{{ caller() }}
{% endif %}
@group(0) @binding(4) var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read> step: array<u32>;   // [pos, n]
{% endmacro %}
