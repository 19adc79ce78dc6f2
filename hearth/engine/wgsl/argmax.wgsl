// Index of the largest of x[0, n) (the lowest index among equals, like numpy.argmax), written to
// out[0] as u32: a greedy step reads back 4 bytes instead of n_vocab floats. One workgroup.
struct Params { n: u32, x_off: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

const WG: u32 = {{WG}}u;
var<workgroup> bv: array<f32, WG>;
var<workgroup> bi: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) t: u32) {
    var v = -3.4e38;
    var k = 0xffffffffu;
    for (var i = t; i < P.n; i += WG) {
        let a = x[P.x_off + i];
        if (a > v) { v = a; k = i; }      // strided: the first hit of a value is its lowest index
    }
    bv[t] = v; bi[t] = k;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            let ov = bv[t + s]; let oi = bi[t + s];
            if (ov > bv[t] || (ov == bv[t] && oi < bi[t])) { bv[t] = ov; bi[t] = oi; }
        }
        workgroupBarrier();
    }
    if (t == 0u) { out[0] = bi[0]; }
}
