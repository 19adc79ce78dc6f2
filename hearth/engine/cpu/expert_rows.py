"""A decoded token's experts' rows in a few parallel launches.

Why: a mixture-of-experts layer's decode ran two products per chosen expert (gate/up, then down)
and two for the shared expert, each its own launch of numba's threads over 512-2,048 rows, plus x
quantized again for each: with 8 experts of Qwen3.5-35B-A3B's shape that is ~19 launches and
~0.9 ms a layer on a cut file where its weights' bytes take an estimated ~0.3 ms (40 layers). Here
any set of experts' rows, of up to four tensors, is one loop over the threads.

    expert_rows(ws, ts, jobs, q0, d0, s0, qk, dk, sk, out)
        for each job (p, e, xi, o) of jobs int64 [n_jobs, 4]: out[o:o + R] = the R rows of expert e
        of tensor ws[p] times x row xi; ws a tuple of 4 uint8 [n_expert, R, bytes per row] (the 3-D
        GGUF tensors as mapped; a 2-D one, the shared expert's, as [1, R, bytes]), ts their type codes
        (decode_layer.TYPE_CODES, quantized types only); x in 8 bits as llama.cpp quantizes it: Q8_0/Q8_1
        codes q0 int8 [nx, n], scales d0 and sums s0 float32 [nx, n / 32], and Q8_K codes qk int8
        [nx, n], scales dk [nx, n / 256], sums sk int32 [nx, n / 16] (only the kind the types read need
        be filled). A decoded token makes two launches a layer: every chosen expert's gate and up rows
        and the shared expert's (x row 0, the token's), then their down rows (x row s, slot s's input).

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
def expert_rows(ws, ts, jobs, q0, d0, s0, qk, dk, sk, out):
    n = jobs.shape[0]
    start = np.zeros(n + 1, np.int64)     # each job's first row among all
    for j in range(n):
        start[j + 1] = start[j] + ws[jobs[j, 0]].shape[1]
    xf = np.zeros(1, np.float32)          # float x: never read (quantized types only)
    for g in prange(start[n]):
        j = 0
        while g >= start[j + 1]:
            j += 1
        p, e, xi = jobs[j, 0], jobs[j, 1], jobs[j, 2]
        r = g - start[j]
        out[jobs[j, 3] + r] = _dot_row(ts[p], ws[p][e, r], xf, q0[xi], d0[xi], s0[xi], qk[xi], dk[xi], sk[xi])


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


def multiply(ws: tuple, ts: np.ndarray, jobs: np.ndarray, xq: tuple, out: np.ndarray) -> np.ndarray:
    """expert_rows under the kernels' launch lock; ws: up to 4 tensors (padded to 4 with the first)."""
    ws = tuple(ws) + (ws[0],) * (4 - len(ws))
    ts = np.array(list(ts) + [ts[0]] * (4 - len(ts)), np.int64)
    with _LAUNCH:
        expert_rows(ws, ts, np.ascontiguousarray(jobs, np.int64), *xq, out)
    return out
