"""Causal grouped-query attention with attention sinks (gpt-oss), in numpy.

A sink is one learned logit per query head that joins the softmax's denominator and adds no
value: o = sum_j exp(s_j - m) v_j / (sum_j exp(s_j - m) + exp(sink - m)), m = max(max_j s_j, sink),
as ggml_soft_max_ext with sinks computes it. Everything else is layers.attention's: q already
rotated and scaled, the cache read only where some query can see it, a sliding window when
window > 0 (a query at p sees keys p - window < j <= p), queries in blocks of ATTN_BLOCK so the
scores stay [nkv, rep * block, T].
"""

from __future__ import annotations

import numpy as np

from .layers import ATTN_BLOCK


def attention_sinks(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, pos: int, window: int,
                    sinks: np.ndarray, work=None) -> np.ndarray:
    """q float32 [n, nh, hd] at positions [pos, pos + n); caches float32/float16 [nkv, max_ctx, hd]
    with [0, pos + n) valid; sinks float32 [nh]. Returns float32 [n, nh * hd]. `work` (an object
    with map(fn, items)) spreads the KV heads over threads; None: this thread."""
    n, nh, hd = q.shape
    nkv = k_cache.shape[0]
    rep = nh // nkv
    if n == 1 and hd % 8 == 0 and k_cache.strides[-1] == k_cache.itemsize:
        # decode: the compiled one-token attention reads the cache in place (a float16 cache is not
        # widened into a copy at every token, which cost gpt-oss a third of its decode at 2,000)
        from ..cpu.attention import attend_one  # noqa: PLC0415
        from ..cpu.linear import parallel_kernels  # noqa: PLC0415
        start = max(0, pos - window + 1) if window > 0 else 0
        return attend_one(q, k_cache, v_cache, start, pos + 1 - start, parallel_kernels(), sinks).reshape(1, nh * hd)
    qg = q.reshape(n, nkv, rep, hd).transpose(1, 2, 0, 3)          # [nkv, rep, n, hd] view
    sk = np.asarray(sinks, np.float32).reshape(nkv, rep, 1)
    out = np.empty((nkv, rep, n, hd), np.float32)

    def head(h: int) -> None:
        for b0 in range(0, n, ATTN_BLOCK):
            b1 = min(n, b0 + ATTN_BLOCK)
            out[h, :, b0:b1] = _block(qg[h, :, b0:b1], k_cache[h], v_cache[h], pos + b0, window, sk[h])

    if work is None:
        for h in range(nkv):
            head(h)
    else:
        work.map(head, range(nkv))
    return out.transpose(2, 0, 1, 3).reshape(n, nh * hd)


def _block(qb: np.ndarray, k: np.ndarray, v: np.ndarray, p0: int, window: int, sink: np.ndarray) -> np.ndarray:
    """qb [rep, m, hd] of one KV head at positions [p0, p0 + m); k, v [max_ctx, hd]; sink [rep, 1]
    -> [rep, m, hd]."""
    m = qb.shape[1]
    end = p0 + m
    start = max(0, p0 - window + 1) if window > 0 else 0
    K = k[start:end].astype(np.float32, copy=False)                 # [T, hd]
    V = v[start:end].astype(np.float32, copy=False)
    s = np.matmul(qb, K.T)                                          # [rep, m, T]
    qpos = np.arange(p0, end)[:, None]
    kpos = np.arange(start, end)[None, :]
    masked = kpos > qpos
    if window > 0:
        masked |= (qpos - kpos) >= window
    s[:, masked] = -np.inf
    mx = np.maximum(s.max(axis=-1, keepdims=True), sink[:, None])   # [rep, m, 1]
    s -= mx
    np.exp(s, out=s)
    denom = s.sum(axis=-1, keepdims=True) + np.exp(sink[:, None] - mx)
    o = np.matmul(s, V)                                             # [rep, m, hd]
    o /= denom
    return o
