// One decoded token of Gated DeltaNet with the state's rows spread over many workgroups (the
// recurrence as delta_net.wgsl's "decode"; models/delta_net.py recurrent_step is the reference).
// The state M [hv, S_v, S_k] at float offset m_off: row j of head h is value dim j, and the update
// of a row needs only that row: M_j <- M_j exp(g); d_j = beta (v_j - M_j . k); M_j += d_j k;
// o_j = M_j . q / sqrt(S).
// PASS:
//   "step"  workgroup (R rows, head): LANES threads a row, each owning E = S / LANES of its columns
//           (i = lane + LANES e: a row's threads read it in one coalesced sweep). The q/k L2 norms
//           are applied as scale factors (M_j . k = |k|^-1 M_j . k_raw), so the three sums a row
//           needs first (M_j . k_raw, |q_raw|^2, |k_raw|^2) share one pass through workgroup
//           memory, and M_j . q another. o [hv, S] is written before its norm and gate. CONV: the
//           causal conv of the channels it reads computed here (no conv pass), from the conv state
//           and proj; the gate pass with SHIFT then moves that state on.
//   "head"  step and gate in one pass, a workgroup a head (below); its first half and step's, up to
//           the row's d, are one macro, row_sums
//   "gate"  o [n, hv, S] <- RMSNorm(o per head) * ssm_norm * silu(z): a workgroup of 64 a (token, head)
//           (workgroup (token, head)), z at row token of proj; SHIFT: also the conv state's update
//           for one token.
// Params and softplus: delta_common.wgsl's, as every Gated DeltaNet kernel's.
const S: u32 = {{S}}u;
const LANES: u32 = {{LANES}}u;
const E: u32 = S / LANES;
const R: u32 = 256u / LANES;
{% if S % LANES or 256 % LANES %}{{ raise("delta_step.wgsl: LANES must divide S and 256") }}{% endif %}
{% from "delta_common.wgsl" import params, softplus %}
{{ params() }}
{% if PASS == "step" or PASS == "head" %}
{{ softplus() }}
{% endif %}
// Both passes' first half: thread (row j, lane) loads its columns of q, k and the decayed row of M
// (stride L, the threads a row), then the row's M_j . k_raw, |q_raw|^2, |k_raw|^2 summed over its
// L threads through workgroup memory, the norms kn, qn and the row's d. jr: j, clamped to a row of
// the state where the workgroup runs past S. q, k: where column i of q / k is (an expression open
// before i), v: the row's value (default: conv's rows, the conv pass's output).
{% macro row_sums(L, n, jr, q="conv[kh * S + ", k="conv[(P.hk + kh) * S + ", v="") %}
    let kh = h % P.hk;
    let g = softplus(proj[P.a_off + h] + da[h]) * da[P.hv + h];
    let beta = 1.0 / (1.0 + exp(-proj[P.b_off + h]));
    let e = exp(g);
    let row = P.m_off + (h * S + {{jr}}) * S;
{% for c in range(n) %}
    let q{{c}} = {{q}}lane + {{c}}u * {{L}}];
    let k{{c}} = {{k}}lane + {{c}}u * {{L}}];
    var m{{c}} = M[row + lane + {{c}}u * {{L}}] * e;
{% endfor %}
    var mk = 0.0;
    var qq = 0.0;
    var kk = 0.0;
{% for c in range(n) %}
    mk += m{{c}} * k{{c}};
    qq += q{{c}} * q{{c}};
    kk += k{{c}} * k{{c}};
{% endfor %}
    r_mk[t] = mk;
    r_qq[t] = qq;
    r_kk[t] = kk;
    workgroupBarrier();
    let r0 = t - lane;
    mk = 0.0;
    qq = 0.0;
    kk = 0.0;
    for (var l = 0u; l < {{L}}; l++) { mk += r_mk[r0 + l]; qq += r_qq[r0 + l]; kk += r_kk[r0 + l]; }
    let kn = 1.0 / sqrt(kk + P.eps);
    let qn = 1.0 / sqrt(qq + P.eps);
    let d = ({{ v or "conv[2u * P.hk * S + h * S + " ~ jr ~ "]" }} - mk * kn) * beta;
{% endmacro %}
{% if PASS == "step" %}
{% if CONV | default(false) %}
// CONV: the causal conv + SiLU of the channels this workgroup reads (its key head's q and k, its
// rows of v), from the carried state and proj's conv input, each as delta_conv.wgsl computes it
// (the same sum, in the same order); the state is only read here (the gate pass moves it on).
const KM1: u32 = {{KM1}}u;
@group(0) @binding(1) var<storage, read> proj: array<f32>;        // [ldp]: conv input at 0, beta, alpha
@group(0) @binding(2) var<storage, read> da: array<f32>;          // [dt_bias (hv); a (hv)]
@group(0) @binding(3) var<storage, read_write> M: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;   // [hv, S]
@group(0) @binding(5) var<storage, read> cstate: array<f32>;      // [KM1, ch] at st_off
@group(0) @binding(6) var<storage, read> cw: array<f32>;          // [ch, KM1 + 1]

var<workgroup> cqk: array<f32, 2 * S>;   // q | k of head kh after the conv, not normalized
var<workgroup> cv: array<f32, R>;        // v of this workgroup's rows

fn full(i: u32, c: u32) -> f32 {
    if (i < KM1) { return cstate[P.st_off + i * P.ch + c]; }
    return proj[c];
}

fn conv_silu(c: u32) -> f32 {
    var acc = full(0u, c) * cw[c * (KM1 + 1u)];
    for (var i = 1u; i <= KM1; i++) { acc += full(i, c) * cw[c * (KM1 + 1u) + i]; }
    return acc / (1.0 + exp(-acc));
}
{% else %}
@group(0) @binding(1) var<storage, read> conv: array<f32>;        // [ch] q | k | v heads, not normalized
@group(0) @binding(2) var<storage, read> proj: array<f32>;        // [ldp]: beta at b_off, alpha at a_off
@group(0) @binding(3) var<storage, read> da: array<f32>;          // [dt_bias (hv); a (hv)]
@group(0) @binding(4) var<storage, read_write> M: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;   // [hv, S]
{% endif %}

var<workgroup> r_mk: array<f32, 256>;    // [row, lane] partial sums
var<workgroup> r_qq: array<f32, 256>;
var<workgroup> r_kk: array<f32, 256>;
var<workgroup> r_o: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.y;
    let lane = t % LANES;
    let j = wid.x * R + t / LANES;            // this thread's row (value dim)
    let live = j < S;
{% if CONV | default(false) %}
    for (var i = t; i < 2u * S + R; i += 256u) {
        let kh0 = h % P.hk;
        if (i < S) {
            cqk[i] = conv_silu(kh0 * S + i);
        } else if (i < 2u * S) {
            cqk[i] = conv_silu((P.hk + kh0) * S + i - S);
        } else {
            cv[i - 2u * S] = conv_silu(2u * P.hk * S + h * S + min(wid.x * R + i - 2u * S, S - 1u));
        }
    }
    workgroupBarrier();
{{ row_sums("LANES", S // LANES, "min(j, S - 1u)", q="cqk[", k="cqk[S + ", v="cv[t / LANES]") }}
{% else %}
{{ row_sums("LANES", S // LANES, "min(j, S - 1u)") }}
{% endif %}
    var o = 0.0;
{% for c in range(S // LANES) %}
    m{{c}} += d * (k{{c}} * kn);
    o += m{{c}} * q{{c}};
{% endfor %}
    if (live) {
{% for c in range(S // LANES) %}
        M[row + lane + {{c}}u * LANES] = m{{c}};
{% endfor %}
    }
    r_o[t] = o;
    workgroupBarrier();
    if (live && lane == 0u) {
        o = 0.0;
        for (var l = 0u; l < LANES; l++) { o += r_o[r0 + l]; }
        out[h * S + j] = o * qn / sqrt(f32(S));
    }
}
{% elif PASS == "head" %}
// "head": the step and the gate in one pass, a workgroup of S x HL threads a head (1,024 at S 128:
// devices that allow it), HL threads a row, each owning S / HL of its columns.
const HL: u32 = {{HL}}u;
@group(0) @binding(1) var<storage, read> conv: array<f32>;
@group(0) @binding(2) var<storage, read> proj: array<f32>;
@group(0) @binding(3) var<storage, read> da: array<f32>;
@group(0) @binding(4) var<storage, read_write> M: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;   // [hv, S] gated
@group(0) @binding(6) var<storage, read> nw: array<f32>;          // [S] ssm_norm

var<workgroup> r_mk: array<f32, S * HL>;   // [row, lane] partial sums; later the rows' o partials
var<workgroup> r_qq: array<f32, S * HL>;
var<workgroup> r_kk: array<f32, S * HL>;
var<workgroup> so: array<f32, S>;

@compute @workgroup_size({{S * HL}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.y;
    let lane = t % HL;
    let j = t / HL;
{{ row_sums("HL", S // HL, "j") }}
    var o = 0.0;
{% for c in range(S // HL) %}
    m{{c}} += d * (k{{c}} * kn);
    M[row + lane + {{c}}u * HL] = m{{c}};
    o += m{{c}} * q{{c}};
{% endfor %}
    workgroupBarrier();
    r_mk[t] = o;
    workgroupBarrier();
    if (lane == 0u) {
        o = 0.0;
        for (var l = 0u; l < HL; l++) { o += r_mk[r0 + l]; }
        so[j] = o * qn / sqrt(f32(S));
    }
    workgroupBarrier();
    var ss = 0.0;
    for (var i = 0u; i < S; i++) { ss += so[i] * so[i]; }
    if (lane == 0u) {
        let z = proj[P.z_off + h * S + j];
        out[h * S + j] = z / (1.0 + exp(-z)) * (so[j] * inverseSqrt(ss / f32(S) + P.eps) * nw[j]);
    }
}
{% elif PASS == "gate" %}
@group(0) @binding(1) var<storage, read_write> o: array<f32>;     // [n, hv, S]
@group(0) @binding(2) var<storage, read> proj: array<f32>;        // [n, ldp]: z at z_off
@group(0) @binding(3) var<storage, read> w: array<f32>;           // [S] ssm_norm
{% if SHIFT | default(false) %}
// SHIFT (one token, after step with CONV): the conv state moves on by proj's conv input, a thread a
// channel over all the workgroups (hv x 64 threads), as delta_conv.wgsl's state pass for n = 1.
const KM1: u32 = {{KM1}}u;
@group(0) @binding(4) var<storage, read_write> cstate: array<f32>;   // [KM1, ch] at st_off
{% endif %}

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
{% if SHIFT | default(false) %}
    for (var c = wid.y * 64u + t; c < P.ch; c += P.hv * 64u) {
        for (var i = 0u; i + 1u < KM1; i++) {
            cstate[P.st_off + i * P.ch + c] = cstate[P.st_off + (i + 1u) * P.ch + c];
        }
        cstate[P.st_off + (KM1 - 1u) * P.ch + c] = proj[c];
    }
{% endif %}
    let b = (wid.x * P.hv + wid.y) * S;
    let zb = wid.x * P.ldp + P.z_off + wid.y * S;
    var ss = 0.0;
    for (var i = t; i < S; i += 64u) { ss += o[b + i] * o[b + i]; }
    red[t] = ss;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) { red[t] += red[t + s]; }
        workgroupBarrier();
    }
    let inv = inverseSqrt(red[0] / f32(S) + P.eps);
    for (var i = t; i < S; i += 64u) {
        let z = proj[zb + i];
        o[b + i] = z / (1.0 + exp(-z)) * (o[b + i] * inv * w[i]);
    }
}
{% else %}{{ raise("delta_step.wgsl: no pass " ~ PASS) }}{% endif %}
