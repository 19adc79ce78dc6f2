"""The softmax of attention scores, in place, in two passes over each row, with an 8-lane exp.

numpy's softmax of a [rows, T] block of scores is four passes over it (max, subtract, exp, sum),
each a trip through L2/L3 for the ~0.9 MB score blocks of a 20-token input at 4,000 positions, and
its exp runs at ~2 ns an element on this machine: ~45 ms of a 20-token input's ~170 ms of attention.
Here each row is read once for its max, then once more for exp(x - max), written back, and summed in
registers. The exp is Cephes' expf (range reduction by ln 2 in two parts, a degree-6 polynomial,
2^n put into the exponent bits), within ~2 ulp of the exact value; below -87.3 (masked -inf
included) it is exactly 0.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from .simd import V8F32, V8I32, _call, _const, _fmuladd, _ptr, _splat, f32x8, fadd, fsum, fzero, lane_tree

_LOG2E = 1.44269504088896341
_C1, _C2 = 0.693359375, -2.12194440e-4          # ln 2 = C1 + C2, C1 exact in a few bits
_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_LO = -87.33654                                  # exp below it: 0 (2^-126 is the least normal)
_HI = 88.72283                                   # exp above it: inf (ln of the largest float32)


def _vcall(builder, name, args):
    """The LLVM intrinsic `name` on vectors of the first argument's type, returning that type."""
    return _call(builder, name, args[0].type, [a.type for a in args], args)


def _exp8(builder, x):
    """exp of 8 float32 lanes (x <= 88: scores minus their row's max are <= 0)."""
    low = builder.fcmp_ordered("<", x, _const(V8F32, _LO))
    xc = builder.select(low, _const(V8F32, _LO), x)
    fx = _vcall(builder, "llvm.floor.v8f32", [_fmuladd(builder, xc, _const(V8F32, _LOG2E), _const(V8F32, 0.5))])
    r = _fmuladd(builder, fx, _const(V8F32, -_C1), xc)
    r = _fmuladd(builder, fx, _const(V8F32, -_C2), r)
    y = _const(V8F32, _P[0])
    for c in _P[1:]:
        y = _fmuladd(builder, y, r, _const(V8F32, c))
    y = _fmuladd(builder, y, builder.fmul(r, r), builder.fadd(r, _const(V8F32, 1.0)))
    n = builder.fptosi(fx, V8I32)
    scale = builder.bitcast(builder.shl(builder.add(n, _const(V8I32, 127)), _const(V8I32, 23)), V8F32)
    return builder.select(low, _const(V8F32, 0.0), builder.fmul(y, scale))


def exp8_any(builder, x):
    """exp of 8 float32 lanes of any value: 0 below -87.3, inf above _HI (and from ~88.4, where
    2^n leaves the exponent range: exp there is within a factor 2 of the largest float)."""
    e = _exp8(builder, builder.select(builder.fcmp_ordered(">", x, _const(V8F32, _HI)), _const(V8F32, _HI), x))
    return builder.select(builder.fcmp_ordered(">", x, _const(V8F32, _HI)), _const(V8F32, math.inf), e)


@intrinsic
def exp_shift_store(typingctx, arr, off, m):
    """arr[off:off+8] = exp(arr[off:off+8] - m); returns the 8 new values."""
    def codegen(context, builder, sig, args):
        p = _ptr(context, builder, sig.args[0], args[0], args[1], V8F32)
        e = _exp8(builder, builder.fsub(builder.load(p, align=4), _splat(builder, args[2], V8F32)))
        builder.store(e, p, align=4)
        return e
    return f32x8(arr, types.intp, types.float32), codegen


@intrinsic
def vmax_load(typingctx, acc, arr, off):
    """max(acc, arr[off:off+8]) lane by lane."""
    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[1], args[1], args[2], V8F32), align=4)
        return builder.select(builder.fcmp_ordered(">", v, args[0]), v, args[0])
    return f32x8(acc, arr, types.intp), codegen


@intrinsic
def vfill(typingctx, value):
    def codegen(context, builder, sig, args):
        return _splat(builder, args[0], V8F32)
    return f32x8(types.float32), codegen


@intrinsic
def vhmax(typingctx, v):
    """The largest of 8 lanes."""
    def codegen(context, builder, sig, args):
        return lane_tree(builder, args[0], lambda b, lo, hi: b.select(b.fcmp_ordered(">", hi, lo), hi, lo))
    return types.float32(v), codegen


@njit(nogil=True, cache=True)
def expf(x):
    """The scalar of _exp8 (a row's last T % 8 elements; SiLU's exp in one-token passes): a float32
    value, 0 below -87.3, inf above ~88.7."""
    if x < _LO:
        return np.float32(0.0)
    if not x <= _HI:                             # overflow, or NaN
        return np.float32(np.inf) if x > _HI else np.float32(x)
    fx = math.floor(x * _LOG2E + 0.5)
    r = np.float32(x - fx * _C1 - fx * _C2)
    y = np.float32(_P[0])
    for c in _P[1:]:
        y = np.float32(y * r + c)
    y = np.float32(y * (r * r) + r + 1.0)
    return np.float32(y * np.float32(2.0 ** int(fx)))


@njit(nogil=True, cache=True)
def softmax_at(flat, o, T):
    """flat[o:o+T] (float32) -> exp(x - its max) in place; returns their sum (not divided)."""
    m = np.float32(-np.inf)
    j = 0
    if T >= 8:
        acc = vfill(np.float32(-np.inf))
        while j + 8 <= T:
            acc = vmax_load(acc, flat, o + j)
            j += 8
        m = vhmax(acc)
    for k in range(j, T):
        if flat[o + k] > m:
            m = flat[o + k]
    total = fzero()
    j = 0
    while j + 8 <= T:
        total = fadd(total, exp_shift_store(flat, o + j, m))
        j += 8
    t = fsum(total)
    for k in range(j, T):
        e = expf(flat[o + k] - m)
        flat[o + k] = e
        t += e
    return t


@njit(nogil=True, cache=True)
def softmax_rows(s, sums):
    """s float32 [R, T] (C-contiguous rows) -> exp(s - rowmax) in place; sums float32 [R] their row
    sums (not divided: the caller scales the product with V instead)."""
    R, T = s.shape
    flat = s.reshape(-1)
    for i in range(R):
        sums[i] = softmax_at(flat, i * T, T)
