"""Decode attention over a float16 KV cache, reading the cache's float16 values in place.

numpy cannot multiply float16 by float32 without first converting the operand to a float32 copy:
for one decoded token that is every attended position of every layer, converted again at every
token. Here each K row and V row is widened in registers (8 lanes at a time, `<8 x half>` ->
`<8 x float>`, F16C on x86) and all arithmetic is float32, as in the float32 path
(engine/models/layers.py `_attend_one`, the reference the tests compare against).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .simd import V8F32, _fmuladd, _ptr, _splat, fma_f16, fsum, fzero


@intrinsic
def axpy_f16(typingctx, out, ooff, w, woff, s):
    """out[ooff:ooff+8] += s * (the 8 float16 values at byte offset woff of the uint8 array w)."""
    def codegen(context, builder, sig, args):
        h = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], ir.VectorType(ir.HalfType(), 8)),
                         align=1)
        p = _ptr(context, builder, sig.args[0], args[0], args[1], V8F32)
        acc = builder.load(p, align=4)
        builder.store(_fmuladd(builder, builder.fpext(h, V8F32), _splat(builder, args[4], V8F32), acc), p, align=4)
        return context.get_dummy_value()
    return types.void(out, ooff, w, woff, types.float32), codegen


@njit(nogil=True, cache=True)
def attend_one_f16(q, kb, vb, start, n_keys, s, out):
    """One query per head against keys [start, start + n_keys) of a float16 cache.

    q float32 [nkv, rep, hd] (rotated and scaled; query head kv * rep + r uses KV head kv);
    kb, vb: the cache layer's bytes, uint8 [nkv, max_ctx, 2 hd]; s float32 [>= n_keys] scratch;
    out float32 [nkv, rep, hd]. hd is a multiple of 8."""
    nkv, rep, hd = q.shape
    for h in range(nkv):
        for r in range(rep):
            qv = q[h, r]
            m = np.float32(-np.inf)
            for j in range(n_keys):
                row = kb[h, start + j]
                a = fzero()
                for b in range(hd // 8):
                    a = fma_f16(a, row, b * 16, qv, b * 8)
                x = fsum(a)
                s[j] = x
                if x > m:
                    m = x
            total = np.float32(0.0)
            for j in range(n_keys):
                e = np.float32(np.exp(s[j] - m))
                s[j] = e
                total += e
            o = out[h, r]
            o[:] = 0.0
            for j in range(n_keys):
                row = vb[h, start + j]
                p = s[j]
                for b in range(hd // 8):
                    axpy_f16(o, b * 8, row, b * 16, p)
            inv = np.float32(1.0) / total
            for d in range(hd):
                o[d] *= inv
