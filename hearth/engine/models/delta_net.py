"""Gated DeltaNet (Qwen3.5's linear attention), in numpy: the short causal convolution, the
one-token recurrent update (decode) and the chunked form of the same recurrence (prefill).

The recurrence, per value head h (what llama.cpp's ggml_gated_delta_net computes), with the
state kept as M [S_v, S_k] (row j of M is column j of the key x value matrix S, so every product
below reads contiguous rows):
    M   <- M * exp(g_t)                       g_t <= 0: the head's log-decay at token t
    d_j  = beta_t * (v_t[j] - M[j] . k_t)     the delta rule's correction
    M   <- M + d k_t^T
    o_t  = M q_t / sqrt(S_k)
q and k are L2-normalised (x / sqrt(|x|^2 + eps), llama.cpp's build_gdn_l2_norm) and value head h
reads q/k head h mod H_k (tiled, as ggml's broadcast does).

The chunked form computes the same numbers for C tokens at once (llama.cpp's
build_delta_net_chunking, derived here in S = M^T terms). With G_t the cumulative log-decay inside
the chunk and S0 the state before it, the per-token corrections u_t = beta_t (v_t - exp(g_t)
S_{t-1}^T k_t) satisfy the lower-triangular system
    (I + L) U = beta V - (beta exp(G) K) S0,    L[t, s] = beta_t (k_t . k_s) exp(G_t - G_s), s < t
and then
    O   = (exp(G) Q) S0 + (Q K^T * exp(G_t - G_s), s <= t) U
    S_C = exp(G_last) S0 + (K * exp(G_last - G))^T U.
Every exponent is <= 0, so nothing overflows however strong the decay. Shapes: n tokens,
H heads (value heads), S = S_k = S_v.
"""

from __future__ import annotations

import numpy as np

from .layers import rms_norm, silu_mul

# Tokens per chunk (llama.cpp uses 64 for this gate shape).
CHUNK = 64


def causal_conv(x: np.ndarray, conv_state: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Depthwise causal conv1d of x [n, ch] with kernel w [ch, K]; conv_state [K - 1, ch] holds the
    K - 1 inputs before x (zeros at the start) and is updated in place to the last K - 1 inputs.
    Returns [n, ch] (before the SiLU)."""
    n = x.shape[0]
    K = w.shape[1]
    full = np.concatenate([conv_state, x], axis=0)               # [K - 1 + n, ch]
    out = full[0:n] * w[:, 0]
    for i in range(1, K):
        out += full[i:i + n] * w[:, i]
    conv_state[:] = full[n:]
    return out


def l2_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """x [..., S] / sqrt(sum(x^2) + eps), as llama.cpp's build_gdn_l2_norm."""
    ss = np.einsum("...i,...i->...", x, x, dtype=np.float32)[..., None]
    return x / np.sqrt(ss + np.float32(eps))


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)), x itself above 20 (ggml's op_softplus)."""
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0)))).astype(np.float32)


def heads_for_values(x: np.ndarray, n_v_heads: int) -> np.ndarray:
    """q or k [n, H_k, S] as [n, H_v, S]: value head h reads key head h mod H_k (tiled)."""
    h_k = x.shape[1]
    if h_k == n_v_heads:
        return x
    return x[:, np.arange(n_v_heads) % h_k]


def recurrent_step(M: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   g: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """One token: M [H, S, S] updated in place; q, k, v [H, S]; g, beta [H]. Returns o [H, S]."""
    S = q.shape[-1]
    M *= np.exp(g)[:, None, None]
    mk = np.einsum("hji,hi->hj", M, k)                           # [H, S_v]
    d = (v - mk) * beta[:, None]
    M += d[:, :, None] * k[:, None, :]
    o = np.einsum("hji,hi->hj", M, q)
    o *= np.float32(1.0 / np.sqrt(S))
    return o


def gated_delta_layer(proj: np.ndarray, conv_state: np.ndarray, M: np.ndarray, conv_w: np.ndarray,
                      dt_bias: np.ndarray, a: np.ndarray, ssm_norm: np.ndarray, n_k_heads: int, eps: float,
                      work=None) -> np.ndarray:
    """A Qwen3.5 linear layer's work between its products (qwen35.py's docstring), n tokens:
    proj float32 [n, ch + vd + 2 H_v] (qkv | z | beta | alpha) -> float32 [n, vd], what ssm_out
    multiplies; conv_state [K - 1, ch] and M [H_v, S, S] updated. Decode runs it compiled
    (engine/cpu/delta_step.py); this is that kernel's reference."""
    n = proj.shape[0]
    hv, S = M.shape[0], M.shape[1]
    kd, vd = n_k_heads * S, hv * S
    ch = 2 * kd + vd
    conv = causal_conv(proj[:, :ch], conv_state, conv_w)         # [n, ch]
    conv = conv / (1.0 + np.exp(-conv))                          # SiLU
    q = heads_for_values(l2_norm(conv[:, :kd].reshape(n, n_k_heads, S), eps), hv)   # [n, hv, S]
    k = heads_for_values(l2_norm(conv[:, kd:2 * kd].reshape(n, n_k_heads, S), eps), hv)
    v = np.ascontiguousarray(conv[:, 2 * kd:].reshape(n, hv, S))
    z = proj[:, ch:ch + vd]                                      # [n, vd]
    beta = 1.0 / (1.0 + np.exp(-proj[:, ch + vd:ch + vd + hv]))  # [n, hv]
    g = softplus(proj[:, ch + vd + hv:] + dt_bias) * a           # [n, hv] log-decay
    if n == 1:
        o = recurrent_step(M, q[0], k[0], v[0], g[0], beta[0])[None]
    else:
        o = chunked(M, q, k, v, g, beta, work=work)              # [n, hv, S]
    o = rms_norm(np.ascontiguousarray(o, np.float32), ssm_norm, eps).reshape(n, vd)
    return silu_mul(np.ascontiguousarray(z), o)


# Value heads per piece of a prefill's delta rule: the pieces are fixed by the head count (not by the
# thread count), each head's products are the same BLAS calls either way, so the bits do not depend
# on how many threads ran them.
HEADS_PER_PIECE = 8


def chunked(M: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
            beta: np.ndarray, chunk: int = CHUNK, work=None) -> np.ndarray:
    """n tokens at once: M [H, S, S] updated in place to the state after them; q, k, v [n, H, S];
    g, beta [n, H]. Returns o [n, H, S], the recurrence's outputs (see the module docstring).
    `work` (an object with `map(fn, items)`): spreads pieces of HEADS_PER_PIECE heads over threads."""
    n, H, S = q.shape
    out = np.empty((n, H, S), np.float32)
    pieces = [(h0, min(H, h0 + HEADS_PER_PIECE)) for h0 in range(0, H, HEADS_PER_PIECE)]

    def piece(hs):
        h0, h1 = hs
        out[:, h0:h1] = _chunked_heads(M[h0:h1], q[:, h0:h1], k[:, h0:h1], v[:, h0:h1], g[:, h0:h1],
                                       beta[:, h0:h1], chunk)
    if work is None or len(pieces) == 1:
        for hs in pieces:
            piece(hs)
    else:
        work.map(piece, pieces)
    return out


def _chunked_heads(M, q, k, v, g, beta, chunk: int) -> np.ndarray:
    n, H, S = q.shape
    out = np.empty((n, H, S), np.float32)
    scale = np.float32(1.0 / np.sqrt(S))
    # numpy's stacked matmul runs BLAS only on contiguous operands (a transposed view takes a loop
    # ~10x slower): every operand below is made contiguous first.
    C_ = np.ascontiguousarray
    S0 = C_(M.transpose(0, 2, 1))                                # [H, S_k, S_v] the state before a chunk
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        Q = C_(q[c0:c1].transpose(1, 0, 2)) * scale              # [H, C, S]
        K = C_(k[c0:c1].transpose(1, 0, 2))                      # [H, C, S]
        Kt = C_(K.transpose(0, 2, 1))                            # [H, S, C]
        V = C_(v[c0:c1].transpose(1, 0, 2))                      # [H, C, S]
        b = beta[c0:c1].T[:, :, None]                            # [H, C, 1]
        G = np.cumsum(g[c0:c1].T.astype(np.float64), axis=1)     # [H, C] cumulative log-decay
        diff = G[:, :, None] - G[:, None, :]                     # [H, C, C]: G_t - G_s
        C = c1 - c0
        lower = np.tril(np.ones((C, C), bool), -1)
        decay = np.exp(np.where(np.tril(np.ones((C, C), bool)), diff, -np.inf)).astype(np.float32)
        eG = np.exp(G).astype(np.float32)[:, :, None]            # [H, C, 1]
        L = np.where(lower, (K @ Kt) * decay * b, np.float32(0.0))
        rhs = b * V - (b * eG * K) @ S0                          # [H, C, S_v]
        U = _unit_lower_solve(L, rhs)
        QK = np.where(lower | np.eye(C, dtype=bool), (Q @ Kt) * decay, np.float32(0.0))
        O = (eG * Q) @ S0 + QK @ U                               # [H, C, S_v]
        out[c0:c1] = O.transpose(1, 0, 2)
        last = G[:, -1]
        tail = np.exp(last[:, None] - G).astype(np.float32)[:, :, None]   # [H, C, 1]
        S0 = np.exp(last).astype(np.float32)[:, None, None] * S0 + C_((K * tail).transpose(0, 2, 1)) @ U
    M[:] = S0.transpose(0, 2, 1)
    return out


def _unit_lower_solve(L: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """X with (I + L) X = rhs, L [H, C, C] strictly lower; rhs [H, C, S]: forward substitution."""
    X = np.empty_like(rhs)
    for t in range(L.shape[1]):
        X[:, t] = rhs[:, t] - np.einsum("hs,hsj->hj", L[:, t, :t], X[:, :t])
    return X


def reference_float64(M: np.ndarray, q, k, v, g, beta) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence token by token in float64 (the tests' reference): returns (o [n, H, S], M)."""
    M = M.astype(np.float64).copy()
    q, k, v, g, beta = (np.asarray(a, np.float64) for a in (q, k, v, g, beta))
    n, H, S = q.shape
    out = np.empty((n, H, S))
    for t in range(n):
        for h in range(H):
            M[h] *= np.exp(g[t, h])
            d = (v[t, h] - M[h] @ k[t, h]) * beta[t, h]
            M[h] += np.outer(d, k[t, h])
            out[t, h] = M[h] @ q[t, h] / np.sqrt(S)
    return out, M
