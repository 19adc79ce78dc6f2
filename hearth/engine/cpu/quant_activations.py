"""llama.cpp's 8-bit quantizations of activations, in numpy: the reference of the CPU decode
kernels' integer products (engine/cpu/kernels_int8.py).

llama.cpp's CPU matrix products quantize the input vector before multiplying it by quantized
weights, and the CPU decode kernels do the same with the same rounding, so that their products
agree with llama.cpp's:
    Q8_0 / Q8_1  blocks of 32 (for Q4_0 Q5_0 Q8_0 / Q4_1 Q5_1 weights): d = max|x| / 127 rounded
                 to float16, q = rint(x * 127 / max|x|) (ties to even, as its AVX2 code rounds);
                 Q8_1 also carries the block's sum s = (max|x| / 127) * sum(q), the float32
                 scale before its float16 rounding, the product rounded to float16
    Q8_K         blocks of 256 (for the K-quants): the value of largest magnitude m (the first one),
                 iscale = -127 / m, q = min(127, rint(iscale * x)), d = 1 / iscale (float32), and
                 the sums of q per 16
Each returns the codes as int8 (the kernels' operand width), values in -127..127.
"""

from __future__ import annotations

import numpy as np


def q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x float32 [k] -> codes int8 [k], scales float32 [k / 32], block sums float32 [k / 32] (values of float16)."""
    xb = np.asarray(x, np.float32).reshape(-1, 32)
    amax = np.abs(xb).max(axis=1)
    d32 = (amax / np.float32(127)).astype(np.float32)
    d = d32.astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(xb * inv[:, None]).astype(np.int8)
    s = (d32 * q.sum(axis=1).astype(np.float32)).astype(np.float16).astype(np.float32)
    return q.reshape(-1), d, s


def q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x float32 [k] -> codes int8 [k], scales float32 [k / 256], sums of codes int32 [k / 16]."""
    xb = np.asarray(x, np.float32).reshape(-1, 256)
    m = xb[np.arange(len(xb)), np.abs(xb).argmax(axis=1)]          # first value of largest |x|
    with np.errstate(divide="ignore"):
        iscale = np.where(m != 0, np.float32(-127) / m, np.float32(0)).astype(np.float32)
        d = np.where(m != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    q = np.minimum(np.rint(xb * iscale[:, None]), 127).astype(np.int8)
    return q.reshape(-1), d, q.reshape(-1, 16).sum(axis=1).astype(np.int32)


def dequantized(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The float64 values q * d of quantized activations (d per block of len(q) / len(d))."""
    return q.astype(np.float64) * np.repeat(d.astype(np.float64), len(q) // len(d))
