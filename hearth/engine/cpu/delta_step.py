"""A Gated DeltaNet layer's one-token work between its two products, in one compiled call.

Why: as numpy, a decoded token's delta rule is ~10 calls a layer, each a pass over the layer's
state M [H_v, S, S] (2 MiB at Qwen3.5-4B's 32 heads of 128): M *= decay, M k, M += d k^T, M q, plus
the temporaries: measured ~0.6 ms a layer, 14 ms of a ~62 ms token on the 24 linear layers of the
4B shape. Here each row of M is read and written once, while it sits in L1 (~0.19 ms a layer on one
thread, the state's memory traffic), and the value heads are spread over numba's threads; the causal
convolution, SiLU, L2 norms, gates, the per-head RMSNorm and the SiLU(z) gate run in the same call.
HEARTH_CPU_COMPILED_LAYERS=0 gives the numpy path (comparisons).

    gdn_decode(proj, conv_state, conv_wt, dt_bias, a, ssm_norm, M, n_k_heads, eps, out)
        proj float32 [ch + vd + 2 H_v]: the in-projection of one token (attn_qkv | attn_gate z |
        ssm_beta | ssm_alpha), ch = 2 H_k S + vd channels of the convolution, vd = H_v S;
        conv_state float32 [K - 1, ch] (updated to the last K - 1 inputs); conv_wt float32 [K, ch]
        (ssm_conv1d transposed);
        dt_bias, a float32 [H_v]; ssm_norm float32 [S]; M float32 [H_v, S, S] (row j of head h is
        column j of the key x value state, updated in place); out float32 [vd]:
        silu(z) * RMSNorm(o) per head, what ssm_out multiplies.

The arithmetic is the numpy path's (engine/models/delta_net.py `gated_delta_layer` and
`recurrent_step`), step for step; the dot products are summed in another order (8 lanes, fused
multiply-adds), so the two agree to float32 rounding, not bit for bit (tests/test_delta_step.py).
Each head's work is the same whichever thread runs it: one and several threads give the same bits.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .rows import rms_row, silu_mul_row

inline = njit(inline="always", nogil=True, cache=True)
# Reassociation lets the state's row loops run in vector lanes (numba's default is IEEE order).
_FAST = {"reassoc", "contract"}


@inline
def _l2_heads(x, n_heads, S, eps):
    """x [n_heads * S] / sqrt(|head|^2 + eps) per head, in place (delta_net.l2_norm)."""
    for h in range(n_heads):
        ss = 0.0
        for i in range(h * S, (h + 1) * S):
            ss += np.float64(x[i]) * np.float64(x[i])
        r = np.float32(math.sqrt(np.float32(ss) + np.float32(eps)))
        for i in range(h * S, (h + 1) * S):
            x[i] = x[i] / r


@njit(nogil=True, cache=True, fastmath=_FAST)
def _conv_qkv(proj, conv_state, conv_wt, n_k_heads, S, eps, ones, qkv):
    """qkv [ch] = SiLU(causal conv of the carried inputs and proj[:ch]), q and k L2-normed per head;
    conv_state moved on by one input. conv_wt: the kernel transposed, float32 [K, ch]."""
    K1, ch = conv_state.shape
    kd = n_k_heads * S
    for c in range(ch):
        qkv[c] = proj[c] * conv_wt[K1, c]
    for i in range(K1):                                   # the carried inputs, oldest first
        for c in range(ch):
            qkv[c] += conv_state[i, c] * conv_wt[i, c]
    silu_mul_row(qkv, ones[:ch], qkv)
    for i in range(K1 - 1):
        for c in range(ch):
            conv_state[i, c] = conv_state[i + 1, c]
    if K1 > 0:
        for c in range(ch):
            conv_state[K1 - 1, c] = proj[c]
    _l2_heads(qkv[:kd], n_k_heads, S, eps)
    _l2_heads(qkv[kd:2 * kd], n_k_heads, S, eps)


@njit(nogil=True, cache=True, parallel=True, fastmath=_FAST)
def _heads(proj, qkv, dt_bias, a, ssm_norm, M, n_k_heads, eps, out):
    """The delta rule of every value head (over numba's threads), its RMSNorm and SiLU(z) gate."""
    hv, S = M.shape[0], M.shape[1]
    kd, vd = n_k_heads * S, hv * S
    ch = 2 * kd + vd
    scale = np.float32(1.0 / math.sqrt(S))
    for h in prange(hv):
        beta = np.float32(1.0) / (np.float32(1.0) + np.float32(math.exp(-proj[ch + vd + h])))
        x = proj[ch + vd + hv + h] + dt_bias[h]
        sp = x if x > 20.0 else np.float32(math.log1p(math.exp(min(x, np.float32(20.0)))))
        decay = np.float32(math.exp(np.float32(sp) * a[h]))
        kh = h % n_k_heads
        q = qkv[kh * S:(kh + 1) * S]
        k = qkv[kd + kh * S:kd + (kh + 1) * S]
        v = qkv[2 * kd + h * S:2 * kd + (h + 1) * S]
        o = out[h * S:(h + 1) * S]
        for j in range(S):                   # row j: decay, M k, the correction, M q; in L1
            mk = np.float32(0.0)
            for i in range(S):
                w = M[h, j, i] * decay
                M[h, j, i] = w
                mk += w * k[i]
            dd = (v[j] - mk) * beta
            oj = np.float32(0.0)
            for i in range(S):
                w = M[h, j, i] + dd * k[i]
                M[h, j, i] = w
                oj += w * q[i]
            o[j] = oj * scale
        rms_row(o, ssm_norm, eps, o)
        silu_mul_row(proj[ch + h * S:ch + (h + 1) * S], o, o)


@njit(nogil=True, cache=True)
def gdn_decode(proj, conv_state, conv_wt, dt_bias, a, ssm_norm, M, n_k_heads, eps, out):
    S = M.shape[1]
    ch = conv_state.shape[1]
    qkv = np.empty(ch, np.float32)
    ones = np.ones(ch, np.float32)
    _conv_qkv(proj, conv_state, conv_wt, n_k_heads, S, eps, ones, qkv)
    _heads(proj, qkv, dt_bias, a, ssm_norm, M, n_k_heads, eps, out)
