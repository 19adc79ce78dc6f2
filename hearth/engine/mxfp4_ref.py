"""MXFP4 (the type gpt-oss's experts ship in) dequantized in numpy: the reference of its values.

Block of 32 weights in 17 bytes (ggml's block_mxfp4):
    e   uint8      an E8M0 exponent: the block's scale is 2^(e - 127)
    qs  uint8[16]  4-bit E2M1 codes; weight j < 16 is the low nibble of qs[j], weight 16 + j its high
                   nibble
    w = E2M1(code) * 2^(e - 127). ggml keeps the E2M1 values doubled as integers
    (0, 1, 2, 3, 4, 6, 8, 12, then the same negated) and halves the scale instead
    (ggml_e8m0_to_fp32_half), so that e = 0 and 1 give the subnormal halves 2^-128 and 2^-127.

Registered in engine.quants' table of dequantizers (so files with MXFP4 tensors open) unless
quants has its own MXFP4 already.
"""

from __future__ import annotations

import numpy as np

BLOCK = 32
BLOCK_BYTES = 17
# E2M1 codes -> value * 2 (sign in bit 3)
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float32)


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """uint8 exponents -> float32 2^(e - 128), as ggml_e8m0_to_fp32_half (e < 2 as subnormals)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def dequantize_mxfp4(blocks: np.ndarray) -> np.ndarray:
    """uint8 [n_blocks, 17] -> float32 [n_blocks, 32]."""
    b = np.asarray(blocks, np.uint8).reshape(-1, BLOCK_BYTES)
    d = e8m0_half(b[:, 0])[:, None]                               # [n, 1]
    qs = b[:, 1:]                                                 # [n, 16]
    codes = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)   # [n, 32]
    return KVALUES[codes] * d


def register() -> None:
    """Add MXFP4 to engine.quants' dequantizers where it has none."""
    from . import quants
    if "MXFP4" not in quants.supported_types():
        quants._register("MXFP4")(dequantize_mxfp4)
