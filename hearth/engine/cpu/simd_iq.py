"""Vector IR for the i-quants' and MXFP4's 8-bit-x products (engine/cpu/kernels_iq.py): a 16-entry
codebook looked up for 32 codes at once (IQ4_NL, IQ4_XS, MXFP4: pshufb where the CPU has AVX2, 16
compares and selects in generic IR, the same bytes).
"""

from __future__ import annotations

from llvmlite import ir
from numba.extending import intrinsic

from .simd import I32, V16I8, V32I8, _call, _ptr, _splat, u8x32, use_avx2

_I64 = ir.IntType(64)


def lut16_ir(builder, t16, v):
    """<32 x i8> v (bytes 0..15) looked up in the <16 x i8> table t16: pshufb with AVX2, else 16
    compares and selects (the same bytes)."""
    if use_avx2():
        t32 = builder.shuffle_vector(t16, t16, ir.Constant(ir.VectorType(I32, 32), list(range(16)) * 2))
        return _call(builder, "llvm.x86.avx2.pshuf.b", V32I8, [V32I8, V32I8], [t32, v])
    r = ir.Constant(V32I8, None)
    for k in range(16):
        hit = builder.icmp_unsigned("==", v, ir.Constant(V32I8, [k] * 32))
        r = builder.select(hit, _splat(builder, builder.extract_element(t16, ir.Constant(I32, k)), V32I8), r)
    return r


@intrinsic
def lut16(typingctx, tab, v):
    """Each byte of v (0..15) replaced by that byte of tab (a uint8/int8 array of 16)."""
    def codegen(context, builder, sig, args):
        t16 = builder.load(_ptr(context, builder, sig.args[0], args[0], ir.Constant(_I64, 0), V16I8), align=1)
        return lut16_ir(builder, t16, args[1])
    return u8x32(tab, v), codegen
