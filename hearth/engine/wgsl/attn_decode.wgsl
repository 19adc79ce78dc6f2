// Decode attention, split over the KV range (flash-decoding). Pass 1 (`split`): workgroup (s, h)
// scores keys [s CHUNK, (s + 1) CHUNK) of query head h against its KV head h / (n_head / n_kv) and
// writes (max m, sum l, o[HD] = sum_j exp(score_j - m) v_j) to part[h, s, :].  Pass 2 (`combine`)
// merges the splits of each head with the usual rescaling: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
// With DIRECT (a context of at most CHUNK keys: one split) pass 1 writes out = o / l itself and no
// combine pass runs: one dispatch less a layer.
// GATE_OFF (optional; Qwen3.5's gated attention): the merged output is written times sigmoid(gate),
// gate [n_head * HD] at float offset GATE_OFF of a binding after step (the DIRECT split and combine).
// PREP (Gemma 4, split pass): q is the raw Q|K|V row of the token (qkv [stride]: q heads at 0, k heads
// at n_head HD, v at v_off): each workgroup RMSNorms its q head with qn and NeoX-rotates its first
// n_rot dims itself; where the layer writes K/V (kv_w = 1) the workgroup whose split holds the new
// position does the same for that key (kn) and its value (RMSNorm without a weight), uses them for
// that key in place of the cache's row (which no other workgroup reads in this pass) and, for the
// first q head of its KV head, stores them into the cache: gemma4.wgsl "qkv"'s work, one dispatch less.
// q: [n_head, HD] (rotated, not scaled); kc, vc: [n_kv, max_ctx, HD] float32, or float16 with KV_F16
// (f16_kv.wgsl: a vec2<u32> holds 4 values, so indices are the same); step: [pos, n] (kv_len = pos + 1).
const HD: u32 = {{HD}}u;
const CHUNK: u32 = {{CHUNK}}u;
const PW: u32 = HD + 2u;        // floats per partial: o[HD], m, l
struct Params {
    n_head: u32, n_kv: u32, max_ctx: u32, max_splits: u32,
    scale: f32, window: u32, n_rot: u32, v_off: u32,
    eps: f32, kv_w: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
{% set GATE = GATE_OFF is defined %}
{% if GATE %}
const GATE_OFF: u32 = {{GATE_OFF}}u;
fn gated(y: f32, g: f32) -> f32 { return y / (1.0 + exp(-g)); }   // as gated_out.wgsl's sigmoid pass
{% endif %}
{% if PASS == "split" %}
// K and V are read as vec4 rows (16-byte loads). Scores: thread t takes key t of the chunk.
// Values: thread t takes the vec4 column t % (HD/4) over the keys t / (HD/4), + G, ... (G = CHUNK / (HD/4)
// key groups), then the G groups are summed: short dependent chains instead of one of CHUNK loads.
const HD4: u32 = HD / 4u;
const G: u32 = CHUNK / HD4;
{% set VU = 8 %}
const VU: u32 = {{VU}}u;
{% set PREP = PREP | default(false) %}
{% set KV_ACCESS = "read_write" if PREP else "read" %}
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
{% if KV_F16 | default(false) %}
@group(0) @binding(2) var<storage, {{KV_ACCESS}}> kc: array<vec2<u32>>;
@group(0) @binding(3) var<storage, {{KV_ACCESS}}> vc: array<vec2<u32>>;
{% include "f16_kv.wgsl" %}
fn kload(i: u32) -> vec4<f32> { return unpack_f16x4(kc[i]); }
fn vload(i: u32) -> vec4<f32> { return unpack_f16x4(vc[i]); }
{% else %}
@group(0) @binding(2) var<storage, {{KV_ACCESS}}> kc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, {{KV_ACCESS}}> vc: array<vec4<f32>>;
fn kload(i: u32) -> vec4<f32> { return kc[i]; }
fn vload(i: u32) -> vec4<f32> { return vc[i]; }
{% endif %}
@group(0) @binding(4) var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read> step: array<u32>;
{% if GATE %}
@group(0) @binding(6) var<storage, read> gate: array<f32>;
{% endif %}
{% if PREP %}
@group(0) @binding(6) var<storage, read> cs: array<f32>;      // [max_ctx, n_rot / 2, 2] (cos, sin)
@group(0) @binding(7) var<storage, read> qn: array<f32>;      // [HD]
@group(0) @binding(8) var<storage, read> kn: array<f32>;      // [HD] (qn again where kv_w = 0)
var<workgroup> hv: array<f32, HD>;                            // the head being prepared
var<workgroup> kw: array<vec4<f32>, HD4>;                     // the new key, normed and rotated
var<workgroup> vw: array<vec4<f32>, HD4>;                     // its value, normed

// hv = the head at float column c0 of qkv, RMSNorm'd (weight: 0 qn, 1 kn, 2 none), its first n_rot
// dims NeoX-rotated at position pos unless weight is 2. Every thread of the workgroup calls it.
fn prep_head(t: u32, c0: u32, weight: u32, pos: u32) {
    var ss = 0.0;
    for (var d = t; d < HD; d += CHUNK) {
        let v = q[(c0 + d) >> 2u][(c0 + d) & 3u];
        hv[d] = v;
        ss += v * v;
    }
    red[t] = ss;
    workgroupBarrier();
    for (var r = CHUNK / 2u; r > 0u; r >>= 1u) {
        if (t < r) { red[t] += red[t + r]; }
        workgroupBarrier();
    }
    let inv = inverseSqrt(red[0] / f32(HD) + P.eps);
    let half = P.n_rot / 2u;
    for (var i = t; i < HD; i += CHUNK) {
        var wi = 1.0;
        if (weight == 0u) { wi = qn[i]; } else if (weight == 1u) { wi = kn[i]; }
        if (weight == 2u || i >= P.n_rot) {
            hv[i] = hv[i] * inv * wi;
        } else if (i < half) {
            let c = cs[(pos * half + i) * 2u];
            let sn = cs[(pos * half + i) * 2u + 1u];
            let a = hv[i] * inv * wi;
            let b = hv[i + half] * inv * kq_weight(weight, i + half);
            hv[i] = a * c - b * sn;
            hv[i + half] = a * sn + b * c;
        }
    }
    workgroupBarrier();
}

fn kq_weight(weight: u32, i: u32) -> f32 {
    if (weight == 0u) { return qn[i]; }
    return kn[i];
}

// hv as vec4 d (a float16 cache's values rounded as the cache keeps them)
fn hv4(d: u32) -> vec4<f32> {
    let v = vec4<f32>(hv[4u * d], hv[4u * d + 1u], hv[4u * d + 2u], hv[4u * d + 3u]);
{% if KV_F16 | default(false) %}
    return unpack_f16x4(vec2<u32>(pack_f16x2(v.x, v.y), pack_f16x2(v.z, v.w)));
{% else %}
    return v;
{% endif %}
}

fn store_kv(i: u32, k: vec4<f32>, v: vec4<f32>) {
{% if KV_F16 | default(false) %}
    kc[i] = vec2<u32>(pack_f16x2(k.x, k.y), pack_f16x2(k.z, k.w));
    vc[i] = vec2<u32>(pack_f16x2(v.x, v.y), pack_f16x2(v.z, v.w));
{% else %}
    kc[i] = k;
    vc[i] = v;
{% endif %}
}
{% endif %}

var<workgroup> qs: array<vec4<f32>, HD4>;
var<workgroup> p: array<f32, CHUNK>;
var<workgroup> red: array<f32, CHUNK>;
var<workgroup> acc4: array<vec4<f32>, CHUNK>;

@compute @workgroup_size(CHUNK)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let s = wid.x;
    let h = wid.y;
    let kvh = h / (P.n_head / P.n_kv);
    let pos = step[0] + step[1] - 1u;     // the query's position (the last token)
    let kv_len = pos + 1u;
    var lo = 0u;
    if (P.window > 0u && pos + 1u > P.window) { lo = pos + 1u - P.window; }
{% if PREP %}
    prep_head(t, h * HD, 0u, pos);
    if (t < HD4) { qs[t] = vec4<f32>(hv[4u * t], hv[4u * t + 1u], hv[4u * t + 2u], hv[4u * t + 3u]); }
    // the new key and value: in the split that holds pos (s is the same for the whole workgroup)
    let mine = P.kv_w != 0u && s == pos / CHUNK;
    if (mine) {
        workgroupBarrier();
        prep_head(t, P.n_head * HD + kvh * HD, 1u, pos);
        if (t < HD4) { kw[t] = hv4(t); }
        workgroupBarrier();
        prep_head(t, P.v_off + kvh * HD, 2u, pos);
        if (t < HD4) { vw[t] = hv4(t); }
        if (t < HD4 && h % (P.n_head / P.n_kv) == 0u) { store_kv((kvh * P.max_ctx + pos) * HD4 + t, kw[t], vw[t]); }
    }
{% else %}
    if (t < HD4) { qs[t] = q[h * HD4 + t]; }
{% endif %}
    workgroupBarrier();
    let j = s * CHUNK + t;
    var sc = -3.0e38;
    let valid = j < kv_len && j >= lo;
    if (valid) {
        let kb = (kvh * P.max_ctx + j) * HD4;
        // unrolled: the key's loads are independent and go out together (a loop would wait on each)
        var acc = 0.0;
{% if PREP %}
        if (mine && j == pos) {
            for (var d = 0u; d < HD4; d++) { acc += dot(qs[d], kw[d]); }
        } else {
{% endif %}
{% for d in range(HD // 4) %}
        acc += dot(qs[{{d}}u], kload(kb + {{d}}u));
{% endfor %}
{% if PREP %}
        }
{% endif %}
        sc = acc * P.scale;
    }
    red[t] = sc;
    workgroupBarrier();
    for (var r = CHUNK / 2u; r > 0u; r >>= 1u) {
        if (t < r) { red[t] = max(red[t], red[t + r]); }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    var e = 0.0;
    if (valid) { e = exp(sc - m); }
    p[t] = e;
    red[t] = e;
    workgroupBarrier();
    for (var r = CHUNK / 2u; r > 0u; r >>= 1u) {
        if (t < r) { red[t] += red[t + r]; }
        workgroupBarrier();
    }
    let j0 = s * CHUNK;
{% if PREP %}
    let nj = min(CHUNK, kv_len - min(j0, kv_len)) - select(0u, 1u, mine);   // keys read from the cache
{% else %}
    let nj = min(CHUNK, kv_len - min(j0, kv_len));
{% endif %}
    let col = t % HD4;
    let grp = t / HD4;
    var o = vec4<f32>(0.0);
    let vb = (kvh * P.max_ctx + j0) * HD4 + col;
    // VU keys a step with independent loads; indices clamped into the chunk's valid keys (p is 0 past them)
    for (var i0 = grp; i0 < nj; i0 += VU * G) {
{% for u in range(VU) %}
        { let i = min(i0 + {{u}}u * G, nj - 1u); o += select(0.0, p[i], i0 + {{u}}u * G < nj) * vload(vb + i * HD4); }
{% endfor %}
    }
{% if PREP %}
    // the new key (the chunk's last, left out of the loop above) with its value from the workgroup
    if (mine && grp == 0u) { o += p[nj] * vw[col]; }
{% endif %}
    acc4[t] = o;
    workgroupBarrier();
{% if DIRECT | default(false) %}
    // the whole range in this one split: the merged output o / l itself, [n_head, HD] (what the
    // combine pass computes from a single split, to the bit)
    if (grp == 0u) {
        for (var g = 1u; g < G; g++) { o += acc4[g * HD4 + col]; }
        let l = red[0];
        let b = h * HD + 4u * col;
{% if GATE %}
        let gb = GATE_OFF + b;
        part[b] = gated(o.x / l, gate[gb]); part[b + 1u] = gated(o.y / l, gate[gb + 1u]);
        part[b + 2u] = gated(o.z / l, gate[gb + 2u]); part[b + 3u] = gated(o.w / l, gate[gb + 3u]);
{% else %}
        part[b] = o.x / l; part[b + 1u] = o.y / l; part[b + 2u] = o.z / l; part[b + 3u] = o.w / l;
{% endif %}
    }
{% else %}
    let base = (h * P.max_splits + s) * PW;
    if (grp == 0u) {
        for (var g = 1u; g < G; g++) { o += acc4[g * HD4 + col]; }
        part[base + 4u * col] = o.x; part[base + 4u * col + 1u] = o.y;
        part[base + 4u * col + 2u] = o.z; part[base + 4u * col + 3u] = o.w;
    }
    if (t == 0u) {
        part[base + HD] = m;
        part[base + HD + 1u] = red[0];
    }
{% endif %}
}
{% else %}
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> step: array<u32>;
{% if GATE %}
@group(0) @binding(4) var<storage, read> gate: array<f32>;
{% endif %}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.x;
    let kv_len = step[0] + step[1];
    let ns = (kv_len + CHUNK - 1u) / CHUNK;
    var mx = -3.0e38;
    for (var s = 0u; s < ns; s++) { mx = max(mx, part[(h * P.max_splits + s) * PW + HD]); }
    var l = 0.0;
    for (var s = 0u; s < ns; s++) {
        let b = (h * P.max_splits + s) * PW;
        l += exp(part[b + HD] - mx) * part[b + HD + 1u];
    }
    for (var d = t; d < HD; d += 64u) {
        var o = 0.0;
        for (var s = 0u; s < ns; s++) {
            let b = (h * P.max_splits + s) * PW;
            o += exp(part[b + HD] - mx) * part[b + d];
        }
{% if GATE %}
        out[h * HD + d] = gated(o / l, gate[GATE_OFF + h * HD + d]);
{% else %}
        out[h * HD + d] = o / l;
{% endif %}
    }
}
{% endif %}
