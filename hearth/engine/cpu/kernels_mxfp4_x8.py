"""Products of MXFP4 matrices repacked in groups of 8 rows (engine/cpu/mxfp4_x8.py's layout) with
8-bit x (Q8_0 blocks): 8 rows at once in the int32 and float32 lanes of 256-bit vectors.

One group's block (8 rows x 32 weights):
    t_r = -12 * sum_j x_j + sum_c (u_lo(c) . x[8c:8c+4] + u_hi(c) . x[8c+4:8c+8])      (int32, exact)
          u = code + 12 (0..24, kernels_mxfp4's offset: vpdpbusd multiplies unsigned by signed bytes)
    acc_r += float(t_r) * (s_r * xd)        s_r: the row's e8m0 scale, halved (kernels_iq._E8M0)
the blocks alternating between two float accumulators, added at the end: no horizontal sum at all,
lane r is row r's output. The scale is made in the register, the table's value for every e:
2^(e - 128) is the float32 of bits (e - 1) << 23 for e >= 2 and the subnormal 0x00200000 << e for
e = 0, 1; times xd, rounded once, as the row kernel's E8M0[e] * xd.
Against the row kernel only the float sums' order differs (the same int32 t_r: its 8 lanes per block
summed here before the float conversion, there after); tests/test_cpu_mxfp4_x8.py bounds that.

Prefill (several rows of x) uses the VNNI tiles of every other MXFP4 matrix (engine/cpu/gemm_vnni.py,
family o128: codes + 128 interleaved 16 rows x 4 bytes): a group's chunk & 0xF is already the
interleaved step of its 8 rows, so a tile is 2 groups' lookups stored side by side, no transpose; the
products are then the row layout's to the bit.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from ..quants import tables as QT
from . import gemm_vnni as GV
from .kernels import _part, _total
from .kernels_iq import _E8M0
from .kernels_mxfp4 import _KV12, dpbusd256
from .simd import F32, I8, I32, V8F32, V8I32, V32I8, _fmuladd, _ptr, _splat, f32x8, fadd, fzero, store_scaled
from .simd_iq import lut16_ir

jit = njit(nogil=True, cache=True)
inline = njit(inline="always", nogil=True, cache=True)

_V16I8 = ir.VectorType(I8, 16)
_V8I8 = ir.VectorType(I8, 8)
_TAB12 = ir.Constant(_V16I8, [int(v) for v in _KV12])                                          # u = code + 12
_TAB128 = ir.Constant(_V16I8, [int(v) for v in (QT.KVALUES_MXFP4.astype(np.int16) + 128).astype(np.uint8)])


def _ci(v):
    return ir.Constant(V8I32, [v] * 8)


def _nibbles(builder, v):
    """A chunk's <32 x i8> -> (low nibbles, high nibbles), each 0..15."""
    lo = builder.and_(v, ir.Constant(V32I8, [0x0F] * 32))
    hi = builder.lshr(v, ir.Constant(V32I8, [4] * 32))
    return lo, hi


def _i32_at(context, builder, arrty, arr, off):
    return builder.load(_ptr(context, builder, arrty, arr, off, I32), align=1)


@intrinsic
def block8(typingctx, acc, w, off, xq, xoff, start, xd):
    """acc + float(t_r) * (s_r * xd) for the group block at w[off:off+136] and the codes
    xq[xoff:xoff+32] (start: -12 times their sum; xd: x's block scale)."""
    def codegen(context, builder, sig, args):
        acc, _, off, _, xoff, start, xd = args
        lo_acc = _splat(builder, start, V8I32)
        hi_acc = ir.Constant(V8I32, None)
        for c in range(4):
            cp = builder.add(off, ir.Constant(off.type, 8 + 32 * c))
            v = builder.load(_ptr(context, builder, sig.args[1], args[1], cp, V32I8), align=1)
            lo, hi = _nibbles(builder, v)
            xs = [_splat(builder, _i32_at(context, builder, sig.args[3], args[3],
                                          builder.add(xoff, ir.Constant(xoff.type, 8 * c + 4 * h))), V8I32)
                  for h in range(2)]
            lo_acc = dpbusd256(builder, lo_acc, lut16_ir(builder, _TAB12, lo), builder.bitcast(xs[0], V32I8))
            hi_acc = dpbusd256(builder, hi_acc, lut16_ir(builder, _TAB12, hi), builder.bitcast(xs[1], V32I8))
        t = builder.add(lo_acc, hi_acc)
        e = builder.zext(builder.load(_ptr(context, builder, sig.args[1], args[1], off, _V8I8), align=1), V8I32)
        normal = builder.shl(builder.sub(e, _ci(1)), _ci(23))            # 2^(e - 128), e >= 2
        tiny = builder.shl(_ci(0x00200000), e)                           # 2^(e - 128), e < 2: subnormal
        bits = builder.select(builder.icmp_unsigned("<", e, _ci(2)), tiny, normal)
        xd = xd if xd.type == F32 else builder.fptrunc(xd, F32)
        s = builder.fmul(builder.bitcast(bits, V8F32), _splat(builder, xd, V8F32))
        return _fmuladd(builder, builder.sitofp(t, V8F32), s, acc)
    return f32x8(acc, w, types.intp, xq, types.intp, types.int32, types.float32), codegen


@jit
def neg12_blocks(xq, out):
    """out int32 [n / 32]: -12 times the sum of each block of 32 codes of xq."""
    for b in range(out.shape[0]):
        s = np.int32(0)
        for j in range(32):
            s += np.int32(xq[32 * b + j])
        out[b] = -12 * s


@inline
def group8(w, xq, xd, neg):
    """The 8 rows' products (f32x8) of one group w uint8 [nb * 136] and x (xq, xd, neg12_blocks)."""
    a0, a1 = fzero(), fzero()
    for b in range(w.shape[0] // 136):
        a0 = block8(a0, w, b * 136, xq, b * 32, neg[b], xd[b])
        a0, a1 = a1, a0
    return fadd(a0, a1)


@njit(nogil=True, cache=True, parallel=True)
def matvec8_mxfp4_x8(ws, xq, xd, xs, out, scales):
    """kernels_int8's signature for repacked matrices ws (each uint8 [rows / 8, nb * 136]): out[8g:8g+8]
    = group g of the stacked matrices . x, times its matrix's scale."""
    neg = np.empty(xq.shape[0] // 32, np.int32)
    neg12_blocks(xq, neg)
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        store_scaled(out, 8 * g, group8(ws[p][r], xq, xd, neg), scales[p])


# --- prefill: VNNI tiles (engine/cpu/tiles_vnni.py's layout, family o128) -------------------------

@intrinsic
def tile_chunk(typingctx, w, woff, tile, t_lo, t_hi):
    """A group chunk's 32 bytes at w[woff]: code + 128 of its low nibbles to tile[t_lo:t_lo+32], of
    its high nibbles to tile[t_hi:t_hi+32]."""
    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], V32I8), align=1)
        lo, hi = _nibbles(builder, v)
        for half, at in ((lo, args[3]), (hi, args[4])):
            builder.store(lut16_ir(builder, _TAB128, half), _ptr(context, builder, sig.args[2], args[2], at, V32I8), align=1)
        return context.get_dummy_value()
    return types.void(w, types.intp, tile, types.intp, types.intp), codegen


@jit
def tile_mxfp4_x8(w, r0, r1, tile, scratch, n_in, sc0, mo0, d0, e0, gbytes):
    """Rows [r0, r1) (r0 % 16 == 0) of a repacked matrix w into tiles_vnni's groups of 16 rows: step k
    (64 bytes) of a group holds bytes 4k..4k+3 of its 16 rows, which for 32-weight block b and chunk c
    are the low (k = 8b + 2c) or high (k = 8b + 2c + 1) nibbles of two 8-row groups, side by side."""
    nb = n_in // 32
    tf = tile.view(np.float32)
    for g in range((r1 - r0 + 15) // 16):
        gb = g * gbytes
        for h in range(2):
            row0 = r0 + 16 * g + 8 * h
            if row0 >= r1:   # rows past the end: zero codes and scales (their outputs are dropped)
                for b in range(nb):
                    for k in range(8):
                        tile[gb + 64 * (8 * b + k) + 32 * h:gb + 64 * (8 * b + k) + 32 * h + 32] = 0
                    for lr in range(8):
                        tf[(gb + d0) // 4 + 16 * b + 8 * h + lr] = 0.0
                continue
            src = w[row0 // 8]
            for b in range(nb):
                for c in range(4):
                    t = gb + 64 * (8 * b + 2 * c) + 32 * h
                    tile_chunk(src, 136 * b + 8 + 32 * c, tile, t, t + 64)
                for lr in range(8):
                    tf[(gb + d0) // 4 + 16 * b + 8 * h + lr] = _E8M0[src[136 * b + lr]]


_mxfp4_x8 = GV._job(tile_mxfp4_x8, GV.gemm_o128)


@jit
def vnni_mxfp4_x8(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale):
    """gemm_vnni's job signature (engine/cpu/linear.py's _tiles_vnni) for a repacked matrix."""
    _mxfp4_x8(w, r0, r1, tile, rows16, n_in, code, sc, mo, d, e, gbytes, xq, xd, xc, out, col, scale)


@jit
def dequant_mxfp4_x8(w, r0, r1, out):
    """float32 rows [r0, r1) of a repacked matrix into out [r1 - r0, n_in]: code * scale, exact."""
    nb = w.shape[1] // 136
    kv = QT.KVALUES_MXFP4
    for r in range(r0, r1):
        src, lane = w[r // 8], r % 8
        dst = out[r - r0]
        for b in range(nb):
            s = _E8M0[src[136 * b + lane]]
            for c in range(4):
                for i in range(4):
                    byte = src[136 * b + 8 + 32 * c + 4 * lane + i]
                    dst[32 * b + 8 * c + i] = np.float32(kv[byte & 15]) * s
                    dst[32 * b + 8 * c + 4 + i] = np.float32(kv[byte >> 4]) * s
