"""Vector values and operations for numba kernels, written as LLVM vector IR.

Why: LLVM does not vectorize the 16- and 32-element reductions of quantized blocks when they are
written as Python loops (measured 5-9 GFLOP/s), but it lowers explicit vector IR (`<16 x i16>`,
`<8 x float>`, shuffles) to the host's SIMD instructions (AVX2 here, NEON on ARM, SSE elsewhere),
and inlines these intrinsics into the numba loops that call them. Value types:
    I16x16  16 int16 lanes: the integer values of 16 weights, or pair sums of 32 products
    I32x8   8 int32 lanes: sums of integer products
    F32x8   8 float32 lanes: a dot-product accumulator
    U8x32   32 weights as bytes; I8x16: 16 int8 scales
Two kinds of products: float32 activations (integer weights converted in registers, `fdot32`;
engine/cpu/blocks.py) and 8-bit activations stored as int8 (llama.cpp's AVX2 arrangement: bytes
times codes with pmaddubsw, then pmaddwd with the scales; generic vector IR on other CPUs; the
section "32 weights as bytes" below; engine/cpu/blocks_int8.py).
Every memory operation takes (array, element offset) and reads or writes without bounds checks: the
kernels compute offsets from the block layouts, and the tests run them against the numpy reference.
"""

from __future__ import annotations

import os

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, register_model

I8, I16, I32, F32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()
V16I8, V16I16, V8I32, V16I32 = ir.VectorType(I8, 16), ir.VectorType(I16, 16), ir.VectorType(I32, 8), ir.VectorType(I32, 16)
V8F32, V16F32 = ir.VectorType(F32, 8), ir.VectorType(F32, 16)


def _vector_type(name: str, llty):
    cls = type(name, (types.Type,), {"__init__": lambda self: types.Type.__init__(self, name=name)})

    @register_model(cls)
    class _Model(models.PrimitiveModel):
        def __init__(self, dmm, fe_type):
            super().__init__(dmm, fe_type, llty)
    return cls()


i16x16 = _vector_type("I16x16", V16I16)
i32x8 = _vector_type("I32x8", V8I32)
f32x8 = _vector_type("F32x8", V8F32)


def _ptr(context, builder, arrty, arr, off, elty):
    """Pointer to element `off` of a numba array, cast to `elty*`."""
    a = context.make_array(arrty)(context, builder, arr)
    p = builder.gep(a.data, [off])
    return builder.bitcast(p, elty.as_pointer())


def _splat(builder, value, vecty):
    v = builder.insert_element(ir.Constant(vecty, None), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(v, ir.Constant(vecty, None), ir.Constant(ir.VectorType(I32, vecty.count), None))


def _const(vecty, value):
    return ir.Constant(vecty, [ir.Constant(vecty.element, value)] * vecty.count)


def _bytes16(context, builder, sig, args):
    """16 bytes at (array, offset) as <16 x i8>."""
    return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], V16I8), align=1)


# --- loading 16 weights as I16x16 ---------------------------------------------------------------

@intrinsic
def lo_nibbles(typingctx, arr, off):
    """Low nibbles of 16 bytes, 0..15."""
    def codegen(context, builder, sig, args):
        b = builder.and_(_bytes16(context, builder, sig, args), _const(V16I8, 0x0F))
        return builder.zext(b, V16I16)
    return i16x16(arr, off), codegen


@intrinsic
def hi_nibbles(typingctx, arr, off):
    """High nibbles of 16 bytes, 0..15."""
    def codegen(context, builder, sig, args):
        b = builder.lshr(_bytes16(context, builder, sig, args), _const(V16I8, 4))
        return builder.zext(b, V16I16)
    return i16x16(arr, off), codegen


@intrinsic
def bit_fields(typingctx, arr, off, shift, width_mask):
    """(byte >> shift) & width_mask of 16 bytes (2-bit fields, single bits), zero-extended."""
    def codegen(context, builder, sig, args):
        b = builder.zext(_bytes16(context, builder, sig, args[:2]), V16I16)
        s = _splat(builder, builder.trunc(args[2], I16), V16I16)
        m = _splat(builder, builder.trunc(args[3], I16), V16I16)
        return builder.and_(builder.lshr(b, s), m)
    return i16x16(arr, off, shift, width_mask), codegen


@intrinsic
def signed_bytes(typingctx, arr, off):
    """16 bytes read as int8, sign-extended."""
    def codegen(context, builder, sig, args):
        return builder.sext(_bytes16(context, builder, sig, args), V16I16)
    return i16x16(arr, off), codegen


@intrinsic
def u32_bits(typingctx, bits, first):
    """Bits first..first+15 of a uint32, one per lane (0 or 1)."""
    def codegen(context, builder, sig, args):
        u = builder.trunc(args[0], I32) if args[0].type.width > 32 else builder.zext(args[0], I32) \
            if args[0].type.width < 32 else args[0]
        u = builder.lshr(u, builder.trunc(args[1], I32))
        v = builder.trunc(_splat(builder, u, V16I32), V16I16)
        lanes = ir.Constant(V16I16, [ir.Constant(I16, j) for j in range(16)])
        return builder.and_(builder.lshr(v, lanes), _const(V16I16, 1))
    return i16x16(bits, first), codegen


# --- integer lane arithmetic ---------------------------------------------------------------------

def _binop(name):
    @intrinsic
    def op(typingctx, a, b):
        def codegen(context, builder, sig, args):
            return getattr(builder, name)(args[0], args[1])
        return i16x16(a, b), codegen
    return op


vadd = _binop("add")
vsub = _binop("sub")
vor = _binop("or_")


@intrinsic
def vaddc(typingctx, a, c):
    """a + c (c a scalar int) in every lane."""
    def codegen(context, builder, sig, args):
        return builder.add(args[0], _splat(builder, builder.trunc(args[1], I16), V16I16))
    return i16x16(a, c), codegen


@intrinsic
def vmulc(typingctx, a, c):
    """a * c (c a scalar int) in every lane; the products of weights and sub-block scales fit in
    int16 for every K-quant (at most 31 x 127)."""
    def codegen(context, builder, sig, args):
        return builder.mul(args[0], _splat(builder, builder.trunc(args[1], I16), V16I16))
    return i16x16(a, c), codegen


@intrinsic
def vshl(typingctx, a, k):
    """a << k in every lane."""
    def codegen(context, builder, sig, args):
        return builder.shl(args[0], _splat(builder, builder.trunc(args[1], I16), V16I16))
    return i16x16(a, k), codegen


# --- products ----------------------------------------------------------------------------------

def _fmuladd(builder, a, b, c):
    """a * b + c: one fused instruction where the CPU has FMA, a multiply and an add elsewhere."""
    t = a.type
    return _call(builder, f"llvm.fmuladd.v{t.count}f32", t, [t, t, t], [a, b, c])


def _call(builder, name, ret, argtys, args):
    """A call of the LLVM intrinsic `name` (declared in the module on first use)."""
    fn = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(ret, argtys), name)
    return builder.call(fn, args)


def _fold16(builder, v):
    """<16 x float> -> <8 x float>: lanes j and j + 8 added."""
    lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, 8), list(range(8))))
    hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, 8), list(range(8, 16))))
    return builder.fadd(lo, hi)


def _x16(context, builder, arrty, arr, off):
    return builder.load(_ptr(context, builder, arrty, arr, off, V16F32), align=4)


@intrinsic
def fdot32(typingctx, q0, q1, x, off):
    """q0 . x[off:off+16] + q1 . x[off+16:off+32] as 8 partial sums (q: integer weights)."""
    def codegen(context, builder, sig, args):
        p = builder.fmul(builder.sitofp(args[0], V16F32), _x16(context, builder, sig.args[2], args[2], args[3]))
        off16 = builder.add(args[3], ir.Constant(args[3].type, 16))
        p = _fmuladd(builder, builder.sitofp(args[1], V16F32), _x16(context, builder, sig.args[2], args[2], off16), p)
        return _fold16(builder, p)
    return f32x8(q0, q1, x, off), codegen


@intrinsic
def fadd(typingctx, a, b):
    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])
    return f32x8(a, b), codegen


@intrinsic
def fma_s(typingctx, acc, p, s):
    """acc + p * s (s a float32 scalar: the block's scale)."""
    def codegen(context, builder, sig, args):
        return _fmuladd(builder, args[1], _splat(builder, args[2], V8F32), args[0])
    return f32x8(acc, p, types.float32), codegen


@intrinsic
def fzero(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(V8F32, None)
    return f32x8(), codegen


@intrinsic
def add_lane0(typingctx, acc, s):
    """acc with s added to its first lane (the scalar terms of a dot product ride along)."""
    def codegen(context, builder, sig, args):
        s = args[1] if args[1].type == F32 else builder.fptrunc(args[1], F32)
        lane = builder.extract_element(args[0], ir.Constant(I32, 0))
        return builder.insert_element(args[0], builder.fadd(lane, s), ir.Constant(I32, 0))
    return f32x8(acc, types.float32), codegen


def lane_tree(builder, v, join):
    """The 8 lanes of v folded to one by join(builder, lo, hi) in a fixed order (a tree: 4 with 4,
    2 with 2, 1 with 1), as a float32 scalar."""
    for half in (4, 2, 1):
        lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half), list(range(half))))
        hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half), list(range(half, 2 * half))))
        v = join(builder, lo, hi)
    return builder.extract_element(v, ir.Constant(I32, 0))


@intrinsic
def fsum(typingctx, acc):
    """The sum of the 8 lanes, in a fixed order (a tree: 4 + 4, 2 + 2, 1 + 1)."""
    def codegen(context, builder, sig, args):
        return lane_tree(builder, args[0], lambda b, lo, hi: b.fadd(lo, hi))
    return types.float32(acc), codegen


# --- integer products (8-bit activations) -------------------------------------------------------

@intrinsic
def fma_mins(typingctx, acc, mn, xs, off, s):
    """acc + float(m_i * (xs[off + 2i] + xs[off + 2i + 1]))_i * s: the offset terms of a Q4_K/Q5_K
    block (its 8 mins m_i, one per byte of the uint64 mn, times the code sums of their 32 weights,
    from the int32 sums per 16 at xs[off:off + 16]) in vector lanes rather than 8 scalar products."""
    def codegen(context, builder, sig, args):
        m = builder.zext(builder.bitcast(args[1], ir.VectorType(I8, 8)), V8I32)
        v = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], V16I32), align=4)
        even = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, 8), [2 * j for j in range(8)]))
        odd = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, 8), [2 * j + 1 for j in range(8)]))
        p = builder.sitofp(builder.mul(m, builder.add(even, odd)), V8F32)
        s = args[4] if args[4].type == F32 else builder.fptrunc(args[4], F32)
        return _fmuladd(builder, p, _splat(builder, s, V8F32), args[0])
    return f32x8(acc, types.uint64, xs, off, types.float32), codegen


@intrinsic
def izero(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(V8I32, None)
    return i32x8(), codegen


@intrinsic
def fma_i(typingctx, acc, p, s):
    """acc + float(p) * s (p integer sums, s a float32 scalar: the product of the block scales)."""
    def codegen(context, builder, sig, args):
        s = args[2] if args[2].type == F32 else builder.fptrunc(args[2], F32)
        return _fmuladd(builder, builder.sitofp(args[1], V8F32), _splat(builder, s, V8F32), args[0])
    return f32x8(acc, p, types.float32), codegen


@intrinsic
def f16_round(typingctx, v):
    """v rounded to the nearest float16 (ties to even) and back to float32, as llama.cpp stores
    the scale of an 8-bit activation block."""
    def codegen(context, builder, sig, args):
        v = args[0] if args[0].type == F32 else builder.fptrunc(args[0], F32)
        return builder.fpext(builder.fptrunc(v, ir.HalfType()), F32)
    return types.float32(v), codegen


# --- scalars read from blocks ------------------------------------------------------------------

@intrinsic
def f16_at(typingctx, arr, off):
    """The little-endian float16 at byte offset `off` of a uint8 array, as float32."""
    def codegen(context, builder, sig, args):
        h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], ir.HalfType()), align=1)
        return builder.fpext(h, F32)
    return types.float32(arr, off), codegen


@intrinsic
def f32_at(typingctx, arr, off):
    """The little-endian float32 at byte offset `off` of a uint8 array."""
    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], F32), align=1)
    return types.float32(arr, off), codegen


@intrinsic
def u32_at(typingctx, arr, off):
    """The little-endian uint32 at byte offset `off` of a uint8 array."""
    def codegen(context, builder, sig, args):
        return builder.zext(builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], I32), align=1),
                            ir.IntType(64))
    return types.uint64(arr, off), codegen


# --- storing dequantized weights ----------------------------------------------------------------

@intrinsic
def store_deq(typingctx, out, off, q, s, m):
    """out[off:off+16] = q * s + m (float32; q * s is exact for every block type, so this rounds
    once, as the numpy reference does)."""
    def codegen(context, builder, sig, args):
        f = builder.sitofp(args[2], V16F32)
        s = args[3] if args[3].type == F32 else builder.fptrunc(args[3], F32)
        m = args[4] if args[4].type == F32 else builder.fptrunc(args[4], F32)
        v = builder.fadd(builder.fmul(f, _splat(builder, s, V16F32)), _splat(builder, m, V16F32))
        builder.store(v, _ptr(context, builder, sig.args[0], args[0], args[1], V16F32), align=4)
        return context.get_dummy_value()
    return types.void(out, off, q, types.float32, types.float32), codegen



# --- float weights ---------------------------------------------------------------------------------

def _float_loader(name, load):
    @intrinsic
    def f(typingctx, acc, w, off, x, xoff):
        def codegen(context, builder, sig, args):
            a = load(context, builder, sig.args[1], args[1], args[2])
            b = builder.load(_ptr(context, builder, sig.args[3], args[3], args[4], V8F32), align=4)
            return _fmuladd(builder, a, b, args[0])
        return f32x8(acc, w, off, x, xoff), codegen
    f.__name__ = name
    return f


def _load_f32(context, builder, arrty, arr, off):
    return builder.load(_ptr(context, builder, arrty, arr, off, V8F32), align=1)


def _load_f16(context, builder, arrty, arr, off):
    h = builder.load(_ptr(context, builder, arrty, arr, off, ir.VectorType(ir.HalfType(), 8)), align=1)
    return builder.fpext(h, V8F32)


def _load_bf16(context, builder, arrty, arr, off):
    h = builder.load(_ptr(context, builder, arrty, arr, off, ir.VectorType(I16, 8)), align=1)
    return builder.bitcast(builder.shl(builder.zext(h, V8I32), _const(V8I32, 16)), V8F32)


# acc + w[8 weights at byte offset off] * x[xoff:xoff+8]
fma_f32 = _float_loader("fma_f32", _load_f32)
fma_f16 = _float_loader("fma_f16", _load_f16)
fma_bf16 = _float_loader("fma_bf16", _load_bf16)


def _float_storer(name, load):
    @intrinsic
    def f(typingctx, w, off, out, ooff):
        def codegen(context, builder, sig, args):
            v = load(context, builder, sig.args[0], args[0], args[1])
            builder.store(v, _ptr(context, builder, sig.args[2], args[2], args[3], V8F32), align=4)
            return context.get_dummy_value()
        return types.void(w, off, out, ooff), codegen
    f.__name__ = name
    return f


# out[ooff:ooff+8] = the 8 weights at byte offset off, as float32
copy_f32 = _float_storer("copy_f32", _load_f32)
copy_f16 = _float_storer("copy_f16", _load_f16)
copy_bf16 = _float_storer("copy_bf16", _load_bf16)


# --- 32 weights as bytes times 32 int8 codes (llama.cpp's AVX2 arrangement) --------------------
#
# U8x32 holds 32 weights as bytes. `mul_us` multiplies unsigned weights (0..255 as stored) by 32
# int8 codes and sums adjacent pairs into 16 int16 lanes (pmaddubsw: 32 products per instruction);
# `scale_sum`/`scale_sum2`/`pair_sum` multiply those int16 pair sums by sub-block scales (or 1) and
# sum pairs again into 8 int32 lanes (pmaddwd). pmaddubsw saturates its int16 sums; every caller
# states why its sums stay below 2^15 (weight < 128 unsigned, or |weight| <= 128 with codes of
# magnitude <= 127: 2 x 128 x 127 = 32,512). With AVX2 these are the x86 instructions themselves
# (`llvm.x86.avx2.*`); on other CPUs the same integer arithmetic in generic vector IR (exact under
# the same bounds, so both give the same sums). Which one is chosen when a kernel is compiled:
# `use_avx2()`; HEARTH_CPU_SIMD=generic forces the generic IR (engine.cpu keys its compiled-code
# cache by that variable).

V32I8, V32I16 = ir.VectorType(I8, 32), ir.VectorType(I16, 32)
u8x32 = _vector_type("U8x32", V32I8)


def _host_avx2() -> bool:
    """Whether numba compiles for a CPU with AVX2 (its target: NUMBA_CPU_NAME/FEATURES or the host)."""
    if os.environ.get("HEARTH_CPU_SIMD", "") == "generic":
        return False
    try:
        from numba.core.registry import cpu_target  # noqa: PLC0415
        features = cpu_target.target_context.codegen()._get_host_cpu_features()
        return "+avx2" in features.split(",")
    except Exception:  # noqa: BLE001  (another numba layout: ask LLVM about the host)
        import llvmlite.binding as llvm  # noqa: PLC0415
        return bool(llvm.get_host_cpu_features().get("avx2", False))


AVX2 = _host_avx2()   # read at code generation: a test may set it before compiling a fresh kernel


def use_avx2() -> bool:
    return AVX2


def _pairs(builder, p, lanes):
    """Lanes 2j + 2j+1 of p added: <2n x T> -> <n x T>."""
    idx = ir.VectorType(I32, lanes)
    even = builder.shuffle_vector(p, p, ir.Constant(idx, [2 * j for j in range(lanes)]))
    odd = builder.shuffle_vector(p, p, ir.Constant(idx, [2 * j + 1 for j in range(lanes)]))
    return builder.add(even, odd)


def _maddubs(builder, w, x):
    """pmaddubsw: w unsigned, x signed bytes -> <16 x i16> pair sums."""
    if use_avx2():
        return _call(builder, "llvm.x86.avx2.pmadd.ub.sw", V16I16, [V32I8, V32I8], [w, x])
    p = builder.mul(builder.zext(w, V32I16), builder.sext(x, V32I16))
    return _pairs(builder, p, 16)


def _maddwd(builder, a, b):
    """pmaddwd: <16 x i16> x <16 x i16> -> <8 x i32> pair sums."""
    if use_avx2():
        return _call(builder, "llvm.x86.avx2.pmadd.wd", V8I32, [V16I16, V16I16], [a, b])
    return _pairs(builder, builder.mul(builder.sext(a, V16I32), builder.sext(b, V16I32)), 8)


def _codes32(context, builder, arrty, arr, off):
    return builder.load(_ptr(context, builder, arrty, arr, off, V32I8), align=1)


def _scalar_i16(builder, v):
    return builder.trunc(v, I16) if v.type.width > 16 else builder.sext(v, I16) if v.type.width < 16 else v


@intrinsic
def bytes32(typingctx, arr, off):
    """The 32 bytes at (array, offset)."""
    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], V32I8), align=1)
    return u8x32(arr, off), codegen


@intrinsic
def nibbles32(typingctx, arr, off):
    """The 16 bytes at (array, offset) as 32 weights 0..15: their low nibbles, then their high ones
    (the order of a Q4_0/Q4_1 block)."""
    def codegen(context, builder, sig, args):
        b = _bytes16(context, builder, sig, args)
        both = ir.Constant(ir.VectorType(I32, 32), list(range(32)))
        v = builder.shuffle_vector(b, builder.lshr(b, _const(V16I8, 4)), both)
        return builder.and_(v, _const(V32I8, 0x0F))
    return u8x32(arr, off), codegen


@intrinsic
def field8(typingctx, v, shift, mask):
    """(v >> shift) & mask in every byte lane (nibbles, 2-bit fields, single bits)."""
    def codegen(context, builder, sig, args):
        s = _splat(builder, builder.trunc(args[1], I8), V32I8)
        m = _splat(builder, builder.trunc(args[2], I8), V32I8)
        return builder.and_(builder.lshr(args[0], s), m)
    return u8x32(v, shift, mask), codegen


@intrinsic
def or_shl8(typingctx, a, b, k):
    """a | (b << k) in every byte lane (high bits joined to the low ones)."""
    def codegen(context, builder, sig, args):
        return builder.or_(args[0], builder.shl(args[1], _splat(builder, builder.trunc(args[2], I8), V32I8)))
    return u8x32(a, b, k), codegen


@intrinsic
def add8(typingctx, v, c):
    """v + c (c a scalar int, wrapping) in every byte lane: centred weights as int8."""
    def codegen(context, builder, sig, args):
        return builder.add(args[0], _splat(builder, builder.trunc(args[1], I8), V32I8))
    return u8x32(v, c), codegen


@intrinsic
def bits_to_bytes(typingctx, u, k):
    """Byte j = (bit j of the uint32 u) << k, j = 0..31 (Q5_0/Q5_1's fifth bits)."""
    def codegen(context, builder, sig, args):
        u = builder.trunc(args[0], I32) if args[0].type.width > 32 else args[0]
        b4 = builder.bitcast(u, ir.VectorType(I8, 4))
        v = builder.shuffle_vector(b4, b4, ir.Constant(ir.VectorType(I32, 32), [j // 8 for j in range(32)]))
        bit = ir.Constant(V32I8, [ir.Constant(I8, 1 << (j % 8)) for j in range(32)])
        one = builder.icmp_unsigned("!=", builder.and_(v, bit), _const(V32I8, 0))
        k = builder.trunc(args[1], I8)
        return builder.select(one, _splat(builder, builder.shl(ir.Constant(I8, 1), k), V32I8), _const(V32I8, 0))
    return u8x32(u, k), codegen


@intrinsic
def mul_us(typingctx, w, xq, off):
    """Unsigned weights w times the int8 codes xq[off:off+32], pairs summed (int16, saturating:
    callers keep w < 128 so that 2 x 127 x w fits)."""
    def codegen(context, builder, sig, args):
        return _maddubs(builder, args[0], _codes32(context, builder, sig.args[1], args[1], args[2]))
    return i16x16(w, xq, off), codegen


@intrinsic
def mul_ss(typingctx, w, xq, off):
    """Signed weights w (int8) times the int8 codes xq[off:off+32], pairs summed in int16: |w| times
    x with w's sign (llama.cpp's sign trick: psignb), so that pmaddubsw can take them; exact since
    |w| <= 128 and |x| <= 127."""
    def codegen(context, builder, sig, args):
        x = _codes32(context, builder, sig.args[1], args[1], args[2])
        w = args[0]
        if use_avx2():
            aw = _call(builder, "llvm.x86.avx2.psign.b", V32I8, [V32I8, V32I8], [w, w])
            sx = _call(builder, "llvm.x86.avx2.psign.b", V32I8, [V32I8, V32I8], [x, w])
            return _maddubs(builder, aw, sx)
        p = builder.mul(builder.sext(w, V32I16), builder.sext(x, V32I16))
        return _pairs(builder, p, 16)
    return i16x16(w, xq, off), codegen


@intrinsic
def pair_sum(typingctx, p):
    """The int16 pair sums p summed again in pairs, as 8 int32 (pmaddwd with ones)."""
    def codegen(context, builder, sig, args):
        return _maddwd(builder, args[0], _const(V16I16, 1))
    return i32x8(p), codegen


@intrinsic
def scale_sum(typingctx, acc, p, c):
    """acc + the int16 pair sums p times c (a scalar: the scale of their 32 weights), summed in
    pairs (pmaddwd: int32, exact for |c| < 2^15)."""
    def codegen(context, builder, sig, args):
        return builder.add(args[0], _maddwd(builder, args[1], _splat(builder, _scalar_i16(builder, args[2]), V16I16)))
    return i32x8(acc, p, c), codegen


def _scale_pair(name, signed, nibble):
    @intrinsic
    def f(typingctx, acc, p, arr, off):
        def codegen(context, builder, sig, args):
            b2 = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], ir.VectorType(I8, 2)), align=1)
            s = (builder.sext if signed else builder.zext)(b2, ir.VectorType(I16, 2))
            if nibble:
                s = builder.and_(s, ir.Constant(ir.VectorType(I16, 2), [15, 15]))
            s16 = builder.shuffle_vector(s, s, ir.Constant(ir.VectorType(I32, 16), [0] * 8 + [1] * 8))
            return builder.add(args[0], _maddwd(builder, args[1], s16))
        return i32x8(acc, p, arr, off), codegen
    f.__name__ = name
    return f


i8x16 = _vector_type("I8x16", V16I8)


@intrinsic
def q3_scales(typingctx, arr, off):
    """Q3_K's 16 signed 6-bit scales (minus 32) from the 12 bytes at (array, offset), one per lane
    (llama.cpp's branch-free unpacking: low nibbles from bytes 0-7, high bits from bytes 8-11)."""
    def codegen(context, builder, sig, args):
        at = [builder.add(args[1], ir.Constant(args[1].type, 4 * i)) for i in range(3)]
        a = [builder.load(_ptr(context, builder, sig.args[0], args[0], o, I32), align=1) for o in at]
        c = lambda v: ir.Constant(I32, v)  # noqa: E731
        m4, m2 = c(0x0F0F0F0F), c(0x03030303)
        hi = lambda k: builder.shl(builder.and_(builder.lshr(a[2], c(k)), m2), c(4))  # noqa: E731
        words = [builder.or_(builder.and_(a[0], m4), hi(0)),
                 builder.or_(builder.and_(a[1], m4), hi(2)),
                 builder.or_(builder.and_(builder.lshr(a[0], c(4)), m4), hi(4)),
                 builder.or_(builder.and_(builder.lshr(a[1], c(4)), m4), hi(6))]
        v = ir.Constant(ir.VectorType(I32, 4), None)
        for i, wd in enumerate(words):
            v = builder.insert_element(v, wd, ir.Constant(I32, i))
        return builder.sub(builder.bitcast(v, V16I8), _const(V16I8, 32))
    return i8x16(arr, off), codegen


@intrinsic
def scale_sum_v(typingctx, acc, p, sc, i):
    """acc + p's first 8 lanes (weights 0..15) times lane i of the scales sc and its last 8 times
    lane i + 1, summed in pairs (pmaddwd)."""
    def codegen(context, builder, sig, args):
        i = builder.trunc(args[3], I32) if args[3].type.width > 32 else args[3]
        v = ir.Constant(ir.VectorType(I16, 2), None)
        for k in range(2):
            e = builder.sext(builder.extract_element(args[2], builder.add(i, ir.Constant(I32, k))), I16)
            v = builder.insert_element(v, e, ir.Constant(I32, k))
        s16 = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, 16), [0] * 8 + [1] * 8))
        return builder.add(args[0], _maddwd(builder, args[1], s16))
    return i32x8(acc, p, sc, i), codegen


@intrinsic
def sums_dot_v(typingctx, acc, bs, boff, sc, c):
    """acc + c * (bs[boff + i] * sc_i)_i, the 16 products folded into 8 int32 lanes (sc: 16 scales)."""
    def codegen(context, builder, sig, args):
        b = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], V16I32), align=4)
        p = builder.mul(b, builder.sext(args[3], V16I32))
        lo = builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(I32, 8), list(range(8))))
        hi = builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(I32, 8), list(range(8, 16))))
        c = builder.trunc(args[4], I32) if args[4].type.width > 32 else args[4]
        return builder.add(args[0], builder.mul(builder.add(lo, hi), _splat(builder, c, V8I32)))
    return i32x8(acc, bs, boff, sc, c), codegen


# acc + p's first 8 lanes (weights 0..15) times scale a and its last 8 (weights 16..31) times
# scale b, summed in pairs (pmaddwd), a and b from the bytes arr[off], arr[off + 1]: Q6_K's int8
# 16-weight scales, Q2_K's low nibbles
scale_sum2_i8 = _scale_pair("scale_sum2_i8", True, False)
scale_sum2_lo4 = _scale_pair("scale_sum2_lo4", False, True)


def _sums_dot(name, nibble_hi):
    @intrinsic
    def f(typingctx, acc, bs, boff, arr, off, c):
        def codegen(context, builder, sig, args):
            b = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], V16I32), align=4)
            s = builder.load(_ptr(context, builder, sig.args[3], args[3], args[4], V16I8), align=1)
            s = builder.lshr(s, _const(V16I8, 4)) if nibble_hi else s
            p = builder.mul(b, (builder.zext if nibble_hi else builder.sext)(s, V16I32))
            lo = builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(I32, 8), list(range(8))))
            hi = builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(I32, 8), list(range(8, 16))))
            c = builder.trunc(args[5], I32) if args[5].type.width > 32 else args[5]
            return builder.add(args[0], builder.mul(builder.add(lo, hi), _splat(builder, c, V8I32)))
        return i32x8(acc, bs, boff, arr, off, c), codegen
    f.__name__ = name
    return f


# acc + c * (bs[boff + i] * s_i)_i, the 16 products folded into 8 int32 lanes, s_i the byte
# arr[off + i] as int8 (Q6_K's scales: its -32 offset) or its high nibble (Q2_K's mins): a
# K-quant block's offset term from the code sums per 16; exact in int32 (|bs| <= 16 x 127).
sums_dot_i8 = _sums_dot("sums_dot_i8", False)
sums_dot_hi4 = _sums_dot("sums_dot_hi4", True)


# --- int8 weight tiles (engine/cpu/tiles_int8.py) and their products (engine/cpu/gemm_int8.py) ---

@intrinsic
def store_scaled(typingctx, out, off, v, scale):
    """out[off:off + n] = v * scale (float32): v a vector of n float32 lanes (8 or 16), the lanes of
    a product's accumulators."""
    def codegen(context, builder, sig, args):
        vt = args[2].type
        s = args[3] if args[3].type == F32 else builder.fptrunc(args[3], F32)
        r = builder.fmul(args[2], _splat(builder, s, vt))
        builder.store(r, _ptr(context, builder, sig.args[0], args[0], args[1], vt), align=4)
        return context.get_dummy_value()
    return types.void(out, off, v, types.float32), codegen


@intrinsic
def store32(typingctx, out, off, v):
    """out[off:off + 32] = the 32 bytes v (out: a uint8 or int8 array)."""
    def codegen(context, builder, sig, args):
        builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], V32I8), align=1)
        return context.get_dummy_value()
    return types.void(out, off, v), codegen


def _host_features() -> set:
    try:
        from numba.core.registry import cpu_target  # noqa: PLC0415
        return set(cpu_target.target_context.codegen()._get_host_cpu_features().split(","))
    except Exception:  # noqa: BLE001
        import llvmlite.binding as llvm  # noqa: PLC0415
        return {("+" if on else "-") + k for k, on in llvm.get_host_cpu_features().items()}


# AVX-512 with VNNI: a K-quant tile block's 256 products as 4 x (64-byte pmaddubsw, vpdpwssd with
# the scales), a third of the AVX2 arrangement's instructions. Read at code generation.
AVX512_VNNI = AVX2 and {"+avx512bw", "+avx512vnni"} <= _host_features()


def use_avx512_vnni() -> bool:
    return AVX2 and AVX512_VNNI


V64I8, V32I16X, V16I32X = ir.VectorType(I8, 64), ir.VectorType(I16, 32), ir.VectorType(I32, 16)
i32x16 = _vector_type("I32x16", V16I32X)
f32x16 = _vector_type("F32x16", V16F32)


@intrinsic
def k_block_sum(typingctx, codes, coff, xq, xoff, scv, soff):
    """The int32 sums of a K-quant tile block, 16 lanes: over its 8 chunks c of 32 weights, the int16
    pair sums of codes[coff + 32 c:][:32] times xq[xoff + 32 c:][:32] (pmaddubsw) times the scales
    scv[soff + 16 c:][:16] (pmaddwd); lanes 0-7 the even chunks', 8-15 the odd chunks'. The same
    integers in the same lanes on every path (exact)."""
    def codegen(context, builder, sig, args):
        ca, co, xa, xo, sa, so = args
        cty, xty, sty = sig.args[0], sig.args[2], sig.args[4]
        at = lambda v, k: builder.add(v, ir.Constant(v.type, k))  # noqa: E731
        if use_avx512_vnni():
            acc = ir.Constant(V16I32X, None)
            for c in range(4):
                w = builder.load(_ptr(context, builder, cty, ca, at(co, 64 * c), V64I8), align=1)
                x = builder.load(_ptr(context, builder, xty, xa, at(xo, 64 * c), V64I8), align=1)
                s = builder.load(_ptr(context, builder, sty, sa, at(so, 32 * c), V16I32X), align=2)
                p = _call(builder, "llvm.x86.avx512.pmaddubs.w.512", V32I16X, [V64I8, V64I8], [w, x])
                acc = _call(builder, "llvm.x86.avx512.vpdpwssd.512", V16I32X, [V16I32X] * 3,
                            [acc, builder.bitcast(p, V16I32X), s])
            return acc
        halves = [ir.Constant(V8I32, None), ir.Constant(V8I32, None)]
        for c in range(8):
            w = builder.load(_ptr(context, builder, cty, ca, at(co, 32 * c), V32I8), align=1)
            x = builder.load(_ptr(context, builder, xty, xa, at(xo, 32 * c), V32I8), align=1)
            s = builder.load(_ptr(context, builder, sty, sa, at(so, 16 * c), V16I16), align=2)
            halves[c % 2] = builder.add(halves[c % 2], _maddwd(builder, _maddubs(builder, w, x), s))
        return builder.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(I32, 16), list(range(16))))
    return i32x16(codes, coff, xq, xoff, scv, soff), codegen


@intrinsic
def fzero16(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(V16F32, None)
    return f32x16(), codegen


@intrinsic
def fma_i16(typingctx, acc, p, s):
    """acc + float(p) * s, 16 lanes (p integer sums, s a float32 scalar)."""
    def codegen(context, builder, sig, args):
        s = args[2] if args[2].type == F32 else builder.fptrunc(args[2], F32)
        return _fmuladd(builder, builder.sitofp(args[1], V16F32), _splat(builder, s, V16F32), args[0])
    return f32x16(acc, p, types.float32), codegen


@intrinsic
def fma_f16x(typingctx, acc, a, aoff, b, boff):
    """acc + a[aoff:aoff + 16] * b[boff:boff + 16], 16 lanes (float32 arrays)."""
    def codegen(context, builder, sig, args):
        va = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], V16F32), align=4)
        vb = builder.load(_ptr(context, builder, sig.args[3], args[3], args[4], V16F32), align=4)
        return _fmuladd(builder, va, vb, args[0])
    return f32x16(acc, a, aoff, b, boff), codegen


@intrinsic
def fsum16(typingctx, acc):
    """The sum of the 16 lanes, in a fixed order (j with j + 8, then a tree as fsum)."""
    def codegen(context, builder, sig, args):
        return lane_tree(builder, _fold16(builder, args[0]), lambda b, lo, hi: b.fadd(lo, hi))
    return types.float32(acc), codegen
