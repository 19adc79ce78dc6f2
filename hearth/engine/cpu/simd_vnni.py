"""The vector IR of the VNNI tiles (engine/cpu/tiles_vnni.py, engine/cpu/gemm_vnni.py): weights as
unsigned bytes interleaved 16 rows x 4, times 4 int8 codes of x broadcast to every lane.

One instruction, vpdpbusd, multiplies 64 weight bytes (4 consecutive weights of each of 16 rows) by
the same 4 codes of one row of x and adds the 4 products into each row's int32 lane: 64 products,
against 32 for the pmaddubsw + pmaddwd pair of engine/cpu/simd.py's K-quant tiles, and the 4 codes
come from memory as a broadcast operand. So a block of 16 weight rows meets several rows of x with
no shuffle at all: each row of x has its own 16-lane accumulator.

Values are `<16 x i32>` (16 rows) whatever the instructions:
- AVX-512 VNNI: vpdpbusd / vpdpwssd on 64 bytes;
- AVX-VNNI (256-bit, without AVX-512): each as two 32-byte halves (rows 0-7, rows 8-15);
- otherwise generic vector IR: the same integer products and sums, exact, so the same bits (what the
  tests compile on every machine; too slow to use: engine/cpu/linear.py uses the tiles only where
  `lanes()` is not 0).
HEARTH_CPU_SIMD=generic forces the generic IR; engine.cpu keys its compiled-code cache by it.

The block functions below are straight-line IR for one block of weights (256 for the K-quants, 32
for the 32-weight types) times `nx` rows of x and `v` groups of 16 weight rows, the accumulators
passed in and out as a tuple of float32 vectors (kept in registers by the loop that calls them).
Every row of x and every weight row goes through the same operations in the same order whichever
nx and v run it, so a product's bits do not depend on its batch or its tile.
"""

from __future__ import annotations

import os

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .simd import F32, I8, I32, V16F32, _call, _host_features, _ptr, _splat, f32x16

I16, I64 = ir.IntType(16), ir.IntType(64)
V16I32 = ir.VectorType(I32, 16)
V8I32 = ir.VectorType(I32, 8)
V64I8 = ir.VectorType(I8, 64)
V64I32 = ir.VectorType(I32, 64)
V32I32 = ir.VectorType(I32, 32)


def _host_lanes() -> int:
    """16 with AVX-512 VNNI, 8 with AVX-VNNI only, 0 without VNNI (or HEARTH_CPU_SIMD=generic)."""
    if os.environ.get("HEARTH_CPU_SIMD", "") == "generic":
        return 0
    f = _host_features()
    if {"+avx512bw", "+avx512vnni"} <= f:
        return 16
    if "+avxvnni" in f or {"+avx512vnni", "+avx512vl"} <= f:
        return 8
    return 0


LANES = _host_lanes()   # read at code generation: a test may set it before compiling fresh kernels


def lanes() -> int:
    """Which instructions the tiles' products compile to: 16 (AVX-512 VNNI), 8 (AVX-VNNI), 0
    (generic IR)."""
    return LANES


def _halves(builder, v):
    lo = builder.shuffle_vector(v, v, ir.Constant(V8I32, list(range(8))))
    hi = builder.shuffle_vector(v, v, ir.Constant(V8I32, list(range(8, 16))))
    return lo, hi


def _join(builder, lo, hi):
    return builder.shuffle_vector(lo, hi, ir.Constant(V16I32, list(range(16))))


def _vnni(builder, name, acc, a, b):
    if LANES == 16:
        return _call(builder, f"llvm.x86.avx512.{name}.512", V16I32, [V16I32] * 3, [acc, a, b])
    parts = [_call(builder, f"llvm.x86.avx512.{name}.256", V8I32, [V8I32] * 3, list(args))
             for args in zip(_halves(builder, acc), _halves(builder, a), _halves(builder, b))]
    return _join(builder, *parts)


def _sum4(builder, p, n):
    """<4n x i32> -> <n x i32>: lanes 4j..4j+3 added, in the order (0 + 1) + (2 + 3)."""
    idx = lambda k: ir.Constant(ir.VectorType(I32, n), [4 * j + k for j in range(n)])  # noqa: E731
    q = [builder.shuffle_vector(p, p, idx(k)) for k in range(4)]
    return builder.add(builder.add(q[0], q[1]), builder.add(q[2], q[3]))


def dpbusd(builder, acc, w, x):
    """acc + the sums of 4 products of unsigned bytes w and signed bytes x, per int32 lane."""
    if LANES:
        return _vnni(builder, "vpdpbusd", acc, w, x)
    wb, xb = builder.bitcast(w, V64I8), builder.bitcast(x, V64I8)
    p = builder.mul(builder.zext(wb, V64I32), builder.sext(xb, V64I32))
    return builder.add(acc, _sum4(builder, p, 16))


def dpwssd(builder, acc, w, x):
    """acc + the sums of 2 products of the int16 pairs of w and x, per int32 lane."""
    if LANES:
        return _vnni(builder, "vpdpwssd", acc, w, x)
    v32 = ir.VectorType(I16, 32)
    p = builder.mul(builder.sext(builder.bitcast(w, v32), V32I32), builder.sext(builder.bitcast(x, v32), V32I32))
    idx = lambda k: ir.Constant(V16I32, [2 * j + k for j in range(16)])  # noqa: E731
    return builder.add(acc, builder.add(builder.shuffle_vector(p, p, idx(0)), builder.shuffle_vector(p, p, idx(1))))


def _fma(builder, a, b, c):
    return _call(builder, "llvm.fmuladd.v16f32", V16F32, [V16F32] * 3, [a, b, c])


class _Args:
    """Element addresses of the block functions' array arguments."""

    def __init__(self, context, builder, sig, args):
        self.c, self.b, self.sig, self.args = context, builder, sig, args

    def at(self, k, off, ty):
        """Pointer to element `off` of argument k, as ty*."""
        return _ptr(self.c, self.b, self.sig.args[k], self.args[k], off, ty)

    def load(self, k, off, ty):
        return self.b.load(self.at(k, off, ty), align=1)

    def add(self, *vals):
        out = vals[0]
        for v in vals[1:]:
            out = self.b.add(out, v if isinstance(v, ir.Value) else ir.Constant(out.type, v))
        return out

    def mul(self, a, k):
        return self.b.mul(a, ir.Constant(a.type, k) if isinstance(k, int) else k)


def _acc_type(nx, v):
    return types.UniTuple(f32x16, nx * v)


def make_block_k(nx: int, v: int, s: int, chunk_offset: int, mins: bool):
    """A K-quant block (256 weights) of `v` groups of 16 rows times `nx` rows of x:

        block_k(acc, tile, g0, gstride, code, sc, mo, d, e, xq, xqo, xqs, xd, xdo, xds, xc, xco, xcs)
          -> acc

    tile (uint8) holds per group of 16 rows, at g0 + g * gstride plus the byte offsets given
    (engine/cpu/tiles_vnni.py): code: the block's 64 steps of 16 rows x 4 code bytes; sc: int32
    [256 / s][16] the chunks' integer scales (s weights a chunk); mo: int32 [256 / s / 2][16] the
    integer mins of two chunks as int16 pairs (mins only); d, e: float32 [16] the block's scale and
    its mins' scale (e with mins only).
    x: xq int8 codes (row i's block at xqo + i * xqs), xd float32 scales (xdo + i * xds), xc int32 per
    chunk: the code sums of x's chunks (chunk_offset) or their int16 pairs (mins), at xco + i * xcs.
    Row r of a group, row i of x:
        t_c = sum_{j in chunk c} code_j x_j - chunk_offset * sum_{j in c} x_j      (exact, int32)
        acc += float(sum_c sc_c t_c) * (d * xd) [+ float(sum_c mo_c * sum_{j in c} x_j) * (e * xd)]
    """
    nchunk, steps = 256 // s, s // 4

    @intrinsic
    def block_k(typingctx, acc, tile, g0, gstride, code, sc, mo, d, e, xq, xqo, xqs, xd, xdo, xds, xc, xco, xcs):
        def codegen(context, builder, sig, args):
            A = _Args(context, builder, sig, args)
            (acc, _, g0, gstride, code, sc, mo, d, e, _, xqo, xqs, _, xdo, xds, _, xco, xcs) = args
            accs = [builder.extract_value(acc, j) for j in range(nx * v)]
            gb = [A.add(g0, A.mul(gstride, g)) for g in range(v)]
            xq_row = [A.add(xqo, A.mul(xqs, i)) for i in range(nx)]
            xc_row = [A.add(xco, A.mul(xcs, i)) for i in range(nx)]
            zero = ir.Constant(V16I32, None)
            main = [[zero] * v for _ in range(nx)]
            for c in range(nchunk):
                if chunk_offset:
                    init = []
                    for i in range(nx):
                        sx = A.load(15, A.add(xc_row[i], c), I32)
                        init.append(_splat(builder, builder.mul(sx, ir.Constant(I32, -chunk_offset)), V16I32))
                    t = [[init[i]] * v for i in range(nx)]
                else:
                    t = [[zero] * v for _ in range(nx)]
                for k in range(steps):
                    step = c * steps + k
                    ws = [A.load(1, A.add(gb[g], code, 64 * step), V16I32) for g in range(v)]
                    for i in range(nx):
                        xs = _splat(builder, A.load(9, A.add(xq_row[i], 4 * step), I32), V16I32)
                        for g in range(v):
                            t[i][g] = dpbusd(builder, t[i][g], ws[g], xs)
                for g in range(v):
                    scv = A.load(1, A.add(gb[g], sc, 64 * c), V16I32)
                    for i in range(nx):
                        main[i][g] = builder.add(main[i][g], builder.mul(t[i][g], scv))
            off = None
            if mins:
                off = [[zero] * v for _ in range(nx)]
                for p in range(nchunk // 2):
                    ms = [A.load(1, A.add(gb[g], mo, 64 * p), V16I32) for g in range(v)]
                    for i in range(nx):
                        bs = _splat(builder, A.load(15, A.add(xc_row[i], p), I32), V16I32)
                        for g in range(v):
                            off[i][g] = dpwssd(builder, off[i][g], ms[g], bs)
            out = []
            for i in range(nx):
                dx = _splat(builder, A.load(12, A.add(xdo, A.mul(xds, i)), F32), V16F32)
                for g in range(v):
                    a = accs[i * v + g]
                    dv = A.load(1, A.add(gb[g], d), V16F32)
                    a = _fma(builder, builder.sitofp(main[i][g], V16F32), builder.fmul(dv, dx), a)
                    if mins:
                        ev = A.load(1, A.add(gb[g], e), V16F32)
                        a = _fma(builder, builder.sitofp(off[i][g], V16F32), builder.fmul(ev, dx), a)
                    out.append(a)
            return context.make_tuple(builder, sig.return_type, out)
        ty = _acc_type(nx, v)
        return ty(acc, tile, g0, gstride, code, sc, mo, d, e, xq, xqo, xqs, xd, xdo, xds, xc, xco, xcs), codegen
    return block_k


def make_block_32(nx: int, v: int, offset: int, mins: bool):
    """A block of a 32-weight type (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0) of `v` groups of 16 rows times `nx`
    rows of x:

        block_32(acc, tile, g0, gstride, code, d, m, xq, xqo, xqs, xd, xdo, xds, xc, xco, xcs) -> acc

    tile per group at g0 + g * gstride plus: code: the block's 8 steps of 16 rows x 4 code bytes;
    d: float32 [16] the rows' scales; m: float32 [16] their offsets (mins only: Q4_1, Q5_1).
    x: xq int8 codes, xd float32 scales (llama.cpp's Q8_0/Q8_1), xc: int32 code sums (offset) or
    float32 block sums d * sum(q) rounded to float16 (mins: llama.cpp's Q8_1 s), each at
    base + i * stride. Row r of a group, row i of x:
        t = sum_j code_j x_j - offset * sum_j x_j                  (exact, int32)
        acc += float(t) * (d * xd) [+ m * s]
    """
    @intrinsic
    def block_32(typingctx, acc, tile, g0, gstride, code, d, m, xq, xqo, xqs, xd, xdo, xds, xc, xco, xcs):
        def codegen(context, builder, sig, args):
            A = _Args(context, builder, sig, args)
            (acc, _, g0, gstride, code, d, m, _, xqo, xqs, _, xdo, xds, _, xco, xcs) = args
            accs = [builder.extract_value(acc, j) for j in range(nx * v)]
            gb = [A.add(g0, A.mul(gstride, g)) for g in range(v)]
            xq_row = [A.add(xqo, A.mul(xqs, i)) for i in range(nx)]
            xc_at = [A.add(xco, A.mul(xcs, i)) for i in range(nx)]
            zero = ir.Constant(V16I32, None)
            if offset:
                t = []
                for i in range(nx):
                    sx = A.load(13, xc_at[i], I32)
                    t.append([_splat(builder, builder.mul(sx, ir.Constant(I32, -offset)), V16I32)] * v)
            else:
                t = [[zero] * v for _ in range(nx)]
            for k in range(8):
                ws = [A.load(1, A.add(gb[g], code, 64 * k), V16I32) for g in range(v)]
                for i in range(nx):
                    xs = _splat(builder, A.load(7, A.add(xq_row[i], 4 * k), I32), V16I32)
                    for g in range(v):
                        t[i][g] = dpbusd(builder, t[i][g], ws[g], xs)
            out = []
            for i in range(nx):
                dx = _splat(builder, A.load(10, A.add(xdo, A.mul(xds, i)), F32), V16F32)
                sx = _splat(builder, A.load(13, xc_at[i], F32), V16F32) if mins else None
                for g in range(v):
                    a = accs[i * v + g]
                    dv = A.load(1, A.add(gb[g], d), V16F32)
                    a = _fma(builder, builder.sitofp(t[i][g], V16F32), builder.fmul(dv, dx), a)
                    if mins:
                        a = _fma(builder, A.load(1, A.add(gb[g], m), V16F32), sx, a)
                    out.append(a)
            return context.make_tuple(builder, sig.return_type, out)
        ty = _acc_type(nx, v)
        return ty(acc, tile, g0, gstride, code, d, m, xq, xqo, xqs, xd, xdo, xds, xc, xco, xcs), codegen
    return block_32


def make_zeros(n: int):
    @intrinsic
    def zeros(typingctx):
        ty = types.UniTuple(f32x16, n)

        def codegen(context, builder, sig, args):
            return context.make_tuple(builder, ty, [ir.Constant(V16F32, None)] * n)
        return ty(), codegen
    return zeros


@intrinsic
def interleave16(typingctx, src, soff, sstride, dst, doff):
    """16 rows of 64 bytes (src[soff + r * sstride:][:64]) as 16 steps of 16 rows x 4 bytes
    (dst[doff + 64 * k:][:64] holds bytes 4k..4k+3 of every row): a 16 x 16 transpose of int32 words
    in four rounds of two-source shuffles."""
    def codegen(context, builder, sig, args):
        A = _Args(context, builder, sig, args)
        _, soff, sstride, _, doff = args
        rows = [A.load(0, A.add(soff, A.mul(sstride, r)), V16I32) for r in range(16)]
        for s in (8, 4, 2, 1):
            lo_idx = ir.Constant(V16I32, [j if j & s == 0 else 16 + j - s for j in range(16)])
            hi_idx = ir.Constant(V16I32, [j + s if j & s == 0 else 16 + j for j in range(16)])
            new = list(rows)
            for r in range(16):
                if r & s == 0:
                    new[r] = builder.shuffle_vector(rows[r], rows[r + s], lo_idx)
                    new[r + s] = builder.shuffle_vector(rows[r], rows[r + s], hi_idx)
            rows = new
        for k in range(16):
            builder.store(rows[k], A.at(3, A.add(doff, 64 * k), V16I32), align=1)
        return context.get_dummy_value()
    return types.void(src, soff, sstride, dst, doff), codegen
