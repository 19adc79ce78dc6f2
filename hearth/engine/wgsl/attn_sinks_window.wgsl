// attn_sinks.wgsl's PASS "window" (included there): decode attention over a window of at most WS keys
// with the sink in the softmax, one workgroup a head (see attn_sinks.wgsl).
const HD: u32 = {{HD}}u;
const HD4: u32 = HD / 4u;
const WS: u32 = {{WS}}u;
const G: u32 = WS / HD4;        // key groups of the value sums
{% if WS % (HD // 4) or WS > 256 %}{{ raise("a window workgroup of " ~ WS ~ " threads for head dim " ~ HD) }}{% endif %}
struct Params {
    n_head: u32, n_kv: u32, max_ctx: u32, a: u32,   // a: the window
    scale: f32, b: u32, c: u32, d: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
{% if KV_F16 %}
@group(0) @binding(2) var<storage, read> kc: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec2<u32>>;
{% include "f16_kv.wgsl" %}
fn kload(i: u32) -> vec4<f32> { return unpack_f16x4(kc[i]); }
fn vload(i: u32) -> vec4<f32> { return unpack_f16x4(vc[i]); }
{% else %}
@group(0) @binding(2) var<storage, read> kc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec4<f32>>;
fn kload(i: u32) -> vec4<f32> { return kc[i]; }
fn vload(i: u32) -> vec4<f32> { return vc[i]; }
{% endif %}
@group(0) @binding(4) var<storage, read_write> out: array<f32>;   // [n_head, HD]
@group(0) @binding(5) var<storage, read> sinks: array<f32>;       // [n_head]
@group(0) @binding(6) var<storage, read> step: array<u32>;

var<workgroup> qs: array<vec4<f32>, HD4>;
var<workgroup> p: array<f32, WS>;
var<workgroup> red: array<f32, WS>;
var<workgroup> acc4: array<vec4<f32>, WS>;

@compute @workgroup_size(WS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.x;
    let kvh = h / (P.n_head / P.n_kv);
    let kv_len = step[0] + step[1];
    let lo = select(0u, kv_len - P.a, kv_len > P.a);
    let nj = kv_len - lo;
    if (t < HD4) { qs[t] = q[h * HD4 + t]; }
    workgroupBarrier();
    var sc = -3.0e38;
    let valid = t < nj;
    if (valid) {
        let kb = (kvh * P.max_ctx + lo + t) * HD4;
        var acc = 0.0;
{% for d in range(HD // 4) %}
        acc += dot(qs[{{d}}u], kload(kb + {{d}}u));
{% endfor %}
        sc = acc * P.scale;
    }
    red[t] = sc;
    workgroupBarrier();
    for (var r = WS / 2u; r > 0u; r >>= 1u) {
        if (t < r) { red[t] = max(red[t], red[t + r]); }
        workgroupBarrier();
    }
    let sk = sinks[h];
    let mx = max(red[0], sk);
    workgroupBarrier();
    var e = 0.0;
    if (valid) { e = exp(sc - mx); }
    p[t] = e;
    red[t] = e;
    workgroupBarrier();
    for (var r = WS / 2u; r > 0u; r >>= 1u) {
        if (t < r) { red[t] += red[t + r]; }
        workgroupBarrier();
    }
    let l = red[0] + exp(sk - mx);
    let col = t % HD4;
    let grp = t / HD4;
    var o = vec4<f32>(0.0);
    let vb = (kvh * P.max_ctx + lo) * HD4 + col;
    // 4 keys a step with independent loads; indices clamped into the window (p is 0 past it)
    for (var i0 = grp; i0 < nj; i0 += 4u * G) {
{% for u in range(4) %}
        { let i = min(i0 + {{u}}u * G, nj - 1u); o += select(0.0, p[i], i0 + {{u}}u * G < nj) * vload(vb + i * HD4); }
{% endfor %}
    }
    acc4[t] = o;
    workgroupBarrier();
    if (grp == 0u) {
        for (var g = 1u; g < G; g++) { o += acc4[g * HD4 + col]; }
        let b = h * HD + 4u * col;
        out[b] = o.x / l; out[b + 1u] = o.y / l; out[b + 2u] = o.z / l; out[b + 3u] = o.w / l;
    }
}
