"""MXFP4's decode product (8-bit x, Q8_0 blocks) with one vpdpbusd a block: the same int32 lanes,
so the same bits, as engine/cpu/kernels_iq.py's matvec8_mxfp4 (pshufb lookup, sign trick, pmaddubsw,
pmaddwd), in fewer instructions. That product is compute-bound on gpt-oss's experts (one float
scale per 32 weights: ~19 GB/s of weights a thread against ~30 for the BF16 and Q8_0 rows beside it).

vpdpbusd multiplies unsigned bytes by signed ones, so the codes are looked up as u = code + 12
(MXFP4's doubled E2M1 values are -12..12: u is 0..24) and each int32 lane, the sum of 4 products
u * x, starts from -12 times the sum of those 4 codes of x, made once a call:
    sum (code + 12) x - 12 sum x = sum code x      (|lane| <= 4 * 24 * 127: exact in int32)
which is the lane pmaddwd(pmaddubsw(|code|, x signed by code), 1) gives. Without VNNI the same sums
are generic vector IR (simd_vnni.dpbusd); linear.py uses this kernel only where lanes() is not 0.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.extending import intrinsic

from ..quants import tables as QT
from .kernels import _part, _total
from .kernels_iq import _E8M0
from .simd import V8I32, V32I8, _codes32, _ptr, fadd, fma_i, fsum, fzero, i32x8, nibbles32
from .simd_iq import lut16
from . import simd_vnni as SV
from .simd_vnni import _call

_KV12 = (QT.KVALUES_MXFP4.astype(np.int16) + 12).astype(np.uint8)   # u = code + 12, 0..24


@intrinsic
def dpbusd8(typingctx, base, boff, u, xq, off):
    """base[boff:boff+8] (int32) + per lane the sum of 4 products of u (unsigned bytes) and the
    int8 codes xq[off:off+32]."""
    def codegen(context, builder, sig, args):
        acc = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], V8I32), align=4)
        x = _codes32(context, builder, sig.args[3], args[3], args[4])
        return dpbusd256(builder, acc, args[2], x)
    return i32x8(base, boff, u, xq, off), codegen


def dpbusd256(builder, acc, u, x):
    """<8 x i32> acc + per lane the sum of 4 products of the <32 x i8> u (unsigned) and x (signed):
    vpdpbusd where SV.LANES is not 0, else generic vector IR (the same integers)."""
    if SV.LANES:   # read at code generation (a test compiles both paths)
        return _call(builder, "llvm.x86.avx512.vpdpbusd.256", V8I32, [V8I32] * 3,
                     [acc, builder.bitcast(u, V8I32), builder.bitcast(x, V8I32)])
    v32 = ir.VectorType(ir.IntType(32), 32)
    p = builder.mul(builder.zext(u, v32), builder.sext(x, v32))
    idx = lambda k: ir.Constant(V8I32, [4 * j + k for j in range(8)])  # noqa: E731
    q = [builder.shuffle_vector(p, p, idx(k)) for k in range(4)]
    return builder.add(acc, builder.add(builder.add(q[0], q[1]), builder.add(q[2], q[3])))


@njit(nogil=True, cache=True)
def _neg12(xq, out):
    """out[j] = -12 * (xq[4j] + ... + xq[4j + 3]), int32 [n / 4]."""
    for j in range(out.shape[0]):
        out[j] = -12 * (np.int32(xq[4 * j]) + np.int32(xq[4 * j + 1]) + np.int32(xq[4 * j + 2]) + np.int32(xq[4 * j + 3]))


@njit(inline="always", nogil=True, cache=True)
def _row(row, xq, xd, neg):
    a0, a1 = fzero(), fzero()
    for b in range(row.shape[0] // 17):
        acc = dpbusd8(neg, b * 8, lut16(_KV12, nibbles32(row, b * 17 + 1)), xq, b * 32)
        a0 = fma_i(a0, acc, _E8M0[row[b * 17]] * xd[b])
        a0, a1 = a1, a0
    return fsum(fadd(a0, a1))


@njit(nogil=True, cache=True, parallel=True)
def matvec8_mxfp4(ws, xq, xd, xs, out, scales):
    """kernels_int8's signature: out[g] = row g of the stacked matrices ws . x, times its scale."""
    neg = np.empty(xq.shape[0] // 4, np.int32)
    _neg12(xq, neg)
    for g in prange(_total(ws)):
        p, r = _part(ws, g)
        out[g] = _row(ws[p][r], xq, xd, neg) * scales[p]
