"""A decoded token's chosen experts multiplied in one parallel launch per expert tensor.

Why: a mixture-of-experts layer's decode ran two products per chosen expert (gate/up, then down),
each its own launch of numba's threads over 512-2,048 rows, plus x quantized again for each: with 8
experts of Qwen3.5-35B-A3B's shape that is ~19 launches and ~0.55 ms of a layer's ~0.9 ms beyond
the weights' bytes (40 layers). Here the rows of every chosen expert of gate and up are one loop
over the threads, and those of down another.

    expert_rows(ws, ts, n_parts, chosen, per_slot, q0, d0, s0, qk, dk, sk, out)
        out[p, s, r] = row r of expert chosen[s] of matrix ws[p] . slot s's x, for p < n_parts:
        ws a tuple of uint8 [n_expert, R, bytes per row] (the 3-D GGUF tensors as mapped), ts their
        type codes (decode_layer.TYPE_CODES, quantized types only), chosen int64 [k]; x in 8 bits
        as llama.cpp quantizes it: Q8_0/Q8_1 codes q0 int8 [nx, n], scales d0 and sums s0 float32
        [nx, n / 32], and Q8_K codes qk int8 [nx, n], scales dk [nx, n / 256], sums sk int32 [nx, n / 16]
        (only the kind the types read need be filled); slot s reads x row s where per_slot (down: each
        expert its own input), else row 0 (gate and up: the token's); out float32 [>= n_parts, k, R].

Each row is decode_layer's `_dot_row`, the loop of kernels_int8's row kernels: the same bits as the
expert's own matrix-vector product (tests/test_expert_rows.py), whatever thread runs it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import kernels_int8 as K8
from .decode_layer import _FIRST_IQ, _FIRST_K, _LAST_K, TYPE_CODES, _dot_row
from .linear import _LAUNCH

# The types this kernel takes: every quantized type of the compiled layers (not F32/F16/BF16).
QUANT_CODES = {n: c for n, c in TYPE_CODES.items() if c < 10 or c >= _FIRST_IQ}


@njit(nogil=True, cache=True, parallel=True)
def expert_rows(ws, ts, n_parts, chosen, per_slot, q0, d0, s0, qk, dk, sk, out):
    k, R = chosen.shape[0], ws[0].shape[1]
    xf = np.zeros(1, np.float32)          # float x: never read (quantized types only)
    for g in prange(n_parts * k * R):
        p = g // (k * R)
        s = (g - p * k * R) // R
        r = g - p * k * R - s * R
        xi = s if per_slot else 0
        out[p, s, r] = _dot_row(ts[p], ws[p][chosen[s], r], xf, q0[xi], d0[xi], s0[xi], qk[xi], dk[xi], sk[xi])


def wants(codes) -> tuple[bool, bool]:
    """(Q8_0/Q8_1 x, Q8_K x): which 8-bit forms of x the type codes read (decode_layer._quantize)."""
    w0 = any(t < _FIRST_K or t in (_FIRST_IQ + 6, _FIRST_IQ + 7) for t in codes)
    wk = any(_FIRST_K <= t <= _LAST_K or (t >= _FIRST_IQ and t not in (_FIRST_IQ + 6, _FIRST_IQ + 7)) for t in codes)
    return w0, wk


_NONE8 = (np.zeros((1, 32), np.int8), np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32))
_NONEK = (np.zeros((1, 256), np.int8), np.zeros((1, 1), np.float32), np.zeros((1, 16), np.int32))


def quantized(x: np.ndarray, codes) -> tuple:
    """x float32 [nx, n] as the 8-bit arrays expert_rows reads (q0, d0, s0, qk, dk, sk) for types `codes`."""
    w0, wk = wants(codes)
    return (*(K8.q8_0_rows(x) if w0 else _NONE8), *(K8.q8_k_rows(x) if wk else _NONEK))


def multiply(ws: tuple, ts: np.ndarray, chosen: np.ndarray, xq: tuple, per_slot: bool, out: np.ndarray) -> np.ndarray:
    """expert_rows over all of ws (a tuple of one or two tensors), under the kernels' launch lock."""
    if len(ws) == 1:
        ws, ts = (ws[0], ws[0]), np.array([ts[0], ts[0]], np.int64)
        n = 1
    else:
        n = 2
    with _LAUNCH:
        expert_rows(ws, ts, n, chosen, per_slot, *xq, out)
    return out
