"""The numpy building blocks every architecture shares: RMSNorm, RoPE, attention, activations.

Shapes: n = tokens in this call, nh/nkv = query/KV heads, hd = head dim, T = attended positions.
All math in float32 (angles in float64), like llama.cpp's CPU path apart from its 8-bit activations.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..config import ModelConfig, RopeScaling
from ..cpu.rows import rms_norm_rows, rope_rows, silu_mul_rows
from ..cpu.softmax import softmax_rows


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x [..., d] float32 -> x / sqrt(mean(x^2) + eps) * w (w [d], or one row per row of x's
    last two axes: the q/k norms)."""
    if x.ndim >= 2 and x.shape[0] == 1:
        # Decode: one token; one compiled call instead of seven numpy ones (~60 a token).
        d = x.shape[-1]
        return rms_norm_rows(x.reshape(-1, d), w.reshape(-1, d), eps).reshape(x.shape)
    ms = np.einsum("...i,...i->...", x, x, dtype=np.float32)[..., None]
    ms *= 1.0 / x.shape[-1]
    ms += eps
    return x * (1.0 / np.sqrt(ms)) * w


def silu_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """SwiGLU: silu(g) * u = g / (1 + exp(-g)) * u."""
    if g.shape[0] == 1:   # decode: one compiled call, the compiled layers' arithmetic (engine/cpu/rows.py)
        return silu_mul_rows(g, u)
    t = np.negative(g)
    np.exp(t, out=t)
    t += 1.0
    np.divide(g, t, out=t)
    t *= u
    return t


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu_tanh_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """GeGLU with the tanh approximation (ggml_gelu): 0.5 g (1 + tanh(c (g + 0.044715 g^3))) * u."""
    t = g * g
    t *= 0.044715
    t += 1.0
    t *= g
    t *= _GELU_C
    np.tanh(t, out=t)
    t += 1.0
    t *= g
    t *= 0.5
    t *= u
    return t


class Rope:
    """Rotary position embedding for one base (and scaling): cos/sin per position and frequency.

    The rotation angle of frequency i (i < n_rot/2) at position p is p * inv_freq[i] with
    inv_freq[i] = base^(-2i/n_rot) / freq_factor[i] (Llama 3's rope_freqs tensor), then scaled
    as ggml's rope_yarn does: linear scaling multiplies by 1/factor; YaRN blends interpolated
    and extrapolated angles with a ramp over the frequencies and scales cos/sin by mscale.
    """

    def __init__(self, n_rot: int, base: float, neox: bool, scaling: RopeScaling | None = None,
                 freq_factors: np.ndarray | None = None):
        self.n_rot, self.neox = n_rot, neox
        half = n_rot // 2
        i = np.arange(half, dtype=np.float64)
        inv = base ** (-2.0 * i / n_rot)
        if freq_factors is not None:
            inv = inv / np.asarray(freq_factors, np.float64)[:half]
        scaling = scaling or RopeScaling()
        self.mscale = scaling.attn_factor   # llama.cpp's rope.scaling.attn_factor (phi3); 1 for most
        if scaling.kind == "linear":
            inv = inv * scaling.freq_scale
        elif scaling.kind == "yarn":
            fs = scaling.freq_scale
            lo, hi = _yarn_corr_dims(n_rot, scaling.orig_ctx, base, scaling.beta_fast, scaling.beta_slow)
            y = (i - lo) / max(0.001, hi - lo)           # ggml: (i0 / 2 - low) / max(0.001, high - low)
            ramp = (1.0 - np.clip(y, 0.0, 1.0)) * scaling.ext_factor
            inv = inv * (fs * (1.0 - ramp) + ramp)
            self.mscale = scaling.attn_factor * (1.0 + 0.1 * math.log(1.0 / fs)) if scaling.ext_factor else scaling.attn_factor
        self.inv_freq = inv

    def cos_sin(self, pos: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin float32 [n, 1, n_rot/2] for positions [pos, pos + n)."""
        ang = np.arange(pos, pos + n, dtype=np.float64)[:, None] * self.inv_freq[None, :]
        c = (np.cos(ang) * self.mscale).astype(np.float32)[:, None, :]
        s = (np.sin(ang) * self.mscale).astype(np.float32)[:, None, :]
        return c, s

    def apply(self, x: np.ndarray, cs: tuple[np.ndarray, np.ndarray]) -> None:
        """Rotate x [n, heads, hd] in place. NeoX pairs (i, i + n_rot/2); normal pairs (2i, 2i+1)."""
        c, s = cs
        r = self.n_rot
        if x.shape[0] == 1:  # decode: one compiled call
            rope_rows(x[0], c.reshape(-1), s.reshape(-1), r, self.neox)
            return
        if self.neox:
            a, b = x[..., :r // 2], x[..., r // 2:r]
        else:
            a, b = x[..., 0:r:2], x[..., 1:r:2]
        a0 = a.copy()
        # a' = a c - b s ; b' = a s + b c
        np.multiply(a, c, out=a)
        a -= b * s
        np.multiply(b, c, out=b)
        b += a0 * s


def _yarn_corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float, beta_slow: float):
    def corr_dim(n_rot):
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))
    start = math.floor(corr_dim(beta_fast))
    end = math.ceil(corr_dim(beta_slow))
    return max(0, start), min(n_dims - 1, end)


# Queries per attention block in prefill: each block attends to keys [start, its last position],
# so only the block-diagonal square is computed and masked in vain, and the scores buffer stays
# [nkv, rep * BLOCK, T] (L2/L3-sized) whatever the chunk length.
ATTN_BLOCK = 128


def attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, pos: int, window: int,
              work=None) -> np.ndarray:
    """Causal grouped-query attention of n new queries against the cache.

    q: [n, nh, hd] for positions [pos, pos + n), already rotated and scaled.
    k_cache, v_cache: float32 or float16 [nkv, max_ctx, hd] with positions [0, pos + n) valid.
    window: > 0 for sliding-window layers (a query at p sees keys p - window < j <= p).
    Returns [n, nh * hd]. Only positions that some query can see are read, so the work is
    O(n * T), never proportional to max_ctx.
    Several queries are computed one KV head at a time (the same products numpy's stacked matmul
    makes, so the same bits), each head on whichever thread of `work` takes it (`map(fn, items)`;
    None: this thread).
    """
    n, nh, hd = q.shape
    nkv = k_cache.shape[0]
    rep = nh // nkv
    if n == 1:
        return _attend_one(q, k_cache, v_cache, pos, window)
    # Query heads of one KV head next to each other: head h = kv * rep + r uses kv head h // rep.
    qg = q.reshape(n, nkv, rep, hd).transpose(1, 2, 0, 3)           # [nkv, rep, n, hd] view
    out = np.empty((nkv, rep, n, hd), np.float32)

    def head(h: int) -> None:
        for b0 in range(0, n, ATTN_BLOCK):
            b1 = min(n, b0 + ATTN_BLOCK)
            out[h:h + 1, :, b0:b1] = _attend_block(qg[h:h + 1, :, b0:b1], k_cache[h:h + 1], v_cache[h:h + 1],
                                                   pos + b0, window)
    if work is None:
        for h in range(nkv):
            head(h)
    else:
        work.map(head, range(nkv))
    return out.transpose(2, 0, 1, 3).reshape(n, nh * hd)


_widened = threading.local()


def _f32(cache: np.ndarray, start: int, end: int, slot: int) -> np.ndarray:
    """Positions [start, end) of a cache layer [nkv, max_ctx, hd]: a float32 cache's view as it is, a
    float16 cache's positions widened to float32 (exactly).
    A prefill block converts the keys it attends to once for all of its ATTN_BLOCK queries, into
    this thread's buffer `slot` (0 for K, 1 for V), kept and reused: a fresh array each time would be
    fresh pages each time, ~2.4 s per GB on a virtual machine's first touch (measured: 340 ms of a
    20-token prefill at 3,786 tokens of context in a fresh process)."""
    x = cache[:, start:end]
    if x.dtype == np.float32:
        return x
    bufs = getattr(_widened, "bufs", None)
    if bufs is None:
        bufs = _widened.bufs = [np.empty(0, np.float32), np.empty(0, np.float32)]
    if bufs[slot].size < x.size:
        bufs[slot] = np.empty(x.size, np.float32)
    out = bufs[slot][:x.size].reshape(x.shape)
    if x.shape[2] % 8 == 0:
        from ..cpu.attention import widen_f16  # noqa: PLC0415
        widen_f16(cache.view(np.uint8), start, end - start, out)
    else:
        np.copyto(out, x)
    return out


# From this many keys on, decode attention runs as matrix-vector products (no packing copy of
# K and V, which OpenBLAS's matrix-matrix path makes for a 3-row query): ~20% less time at
# 2,000 keys; below it, fewer calls win.
GEMV_FROM = 256


def _attend_one(q, k_cache, v_cache, pos: int, window: int) -> np.ndarray:
    """Decode: one query [1, nh, hd] at position pos; no mask needed (the window only moves
    the first key). O(T) work, nothing proportional to max_ctx. Head sizes of a multiple of 8 run
    the compiled layers' attention (engine/cpu/decode_layer.py: the cache read in place, float16
    widened in registers, heads over the kernels' threads), so that a one-token pass gives the same
    bits on either path; `attend_one_numpy` is its reference."""
    _, nh, hd = q.shape
    start = max(0, pos - window + 1) if window > 0 else 0
    T = pos + 1 - start
    if hd % 8 == 0 and k_cache.strides[-1] == k_cache.itemsize:
        from ..cpu.attention import attend_one  # noqa: PLC0415
        from ..cpu.linear import parallel_kernels  # noqa: PLC0415
        return attend_one(q, k_cache, v_cache, start, T, parallel_kernels()).reshape(1, nh * hd)
    return attend_one_numpy(q, k_cache, v_cache, pos, window)


def attend_one_numpy(q, k_cache, v_cache, pos: int, window: int) -> np.ndarray:
    """_attend_one in numpy (float32 matrix products; a float16 cache widened first)."""
    _, nh, hd = q.shape
    nkv = k_cache.shape[0]
    rep = nh // nkv
    start = max(0, pos - window + 1) if window > 0 else 0
    T = pos + 1 - start
    K = _f32(k_cache, start, pos + 1, 0)                              # [nkv, T, hd] views
    V = _f32(v_cache, start, pos + 1, 1)
    qg = q.reshape(nkv, rep, hd)
    if T < GEMV_FROM:
        s = np.matmul(qg, K.transpose(0, 2, 1))                       # [nkv, rep, T]
    else:
        s = np.empty((nkv, rep, T), np.float32)
        for h in range(nkv):
            for r in range(rep):
                np.dot(K[h], qg[h, r], out=s[h, r])
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    if T < GEMV_FROM:
        o = np.matmul(s, V)                                           # [nkv, rep, hd]
    else:
        o = np.empty((nkv, rep, hd), np.float32)
        for h in range(nkv):
            for r in range(rep):
                np.dot(s[h, r], V[h], out=o[h, r])
    o /= s.sum(axis=-1, keepdims=True)
    return o.reshape(1, nh * hd)


def _attend_block(qb, k_cache, v_cache, p0: int, window: int) -> np.ndarray:
    """qb [nkv, rep, m, hd] at positions [p0, p0 + m) -> [nkv, rep, m, hd]."""
    nkv, rep, m, hd = qb.shape
    end = p0 + m
    start = max(0, p0 - window + 1) if window > 0 else 0
    T = end - start
    K = _f32(k_cache, start, end, 0)                                  # [nkv, T, hd] views
    V = _f32(v_cache, start, end, 1)
    s = np.matmul(qb.reshape(nkv, rep * m, hd), K.transpose(0, 2, 1))  # [nkv, rep*m, T]
    if m > 1 or (window > 0 and T > window):
        # Mask only the columns some query cannot see: the causal square on the right and,
        # with a window, the strip on the left.
        c0 = 0 if window > 0 else T - m
        qpos = np.arange(p0, end)[:, None]
        kpos = np.arange(start + c0, end)[None, :]
        masked = kpos > qpos
        if window > 0:
            masked |= (qpos - kpos) >= window
        s.reshape(nkv, rep, m, T)[..., c0:] += np.where(masked, np.float32(-np.inf), np.float32(0.0))
    denom = np.empty((nkv, rep * m, 1), np.float32)
    softmax_rows(s.reshape(-1, T), denom.reshape(-1))                 # exp(s - max) in place, row sums
    o = np.matmul(s, V)                                               # [nkv, rep*m, hd]
    o /= denom
    return o.reshape(nkv, rep, m, hd)
