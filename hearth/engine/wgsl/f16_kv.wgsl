// A float16 KV cache in u32 words: two float16 values a word, the lower-addressed value in the low
// half (the bytes numpy's float16 arrays hold, so the host reads and writes the buffer as they are).
// Stores round float32 to float16 to nearest, ties to even, as numpy's astype(float16) does, in
// integer arithmetic: pack2x16float leaves its rounding to the implementation, and a CPU and a GPU
// cache must hold the same bits for the same float32 values. Loads are exact (unpack2x16float).

fn f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return sign | 0x7e00u | ((a >> 13u) & 0x3ffu); }   // NaN, quiet
    if (a >= 0x477ff000u) { return sign | 0x7c00u; }   // 65520 and up (and inf): rounds to inf
    let e = a >> 23u;
    if (e < 113u) {                                     // below 2^-14: a float16 subnormal or 0
        if (e < 102u) { return sign; }
        let m = (a & 0x7fffffu) | 0x800000u;
        let shift = 126u - e;                           // 14 .. 24
        var h = m >> shift;
        let rest = m & ((1u << shift) - 1u);
        let halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (h & 1u) == 1u)) { h += 1u; }
        return sign | h;
    }
    var h = (a - 0x38000000u) >> 13u;                   // exponent rebiased 127 -> 15
    let rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u)) { h += 1u; }
    return sign | h;
}

fn pack_f16x2(lo: f32, hi: f32) -> u32 {
    return f16_bits(lo) | (f16_bits(hi) << 16u);
}

// four float16 values (two words) as a vec4
fn unpack_f16x4(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
