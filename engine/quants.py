"""GGML tensor types and their dequantization to float32, vectorized in numpy.

Every dequantizer takes the raw bytes of whole blocks, `uint8 [n_blocks, type_size]`, and returns
`float32 [n_blocks, block_size]`. Each block layout is written beside its code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import UnsupportedModelError


@dataclass(frozen=True)
class GGMLType:
    id: int
    name: str
    block_size: int   # elements per block
    type_size: int    # bytes per block


_TABLE = [
    (0, "F32", 1, 4), (1, "F16", 1, 2), (2, "Q4_0", 32, 18), (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22), (7, "Q5_1", 32, 24), (8, "Q8_0", 32, 34), (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84), (11, "Q3_K", 256, 110), (12, "Q4_K", 256, 144), (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210), (15, "Q8_K", 256, 292), (16, "IQ2_XXS", 256, 66), (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98), (19, "IQ1_S", 256, 50), (20, "IQ4_NL", 32, 18), (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82), (23, "IQ4_XS", 256, 136), (24, "I8", 1, 1), (25, "I16", 1, 2),
    (26, "I32", 1, 4), (27, "I64", 1, 8), (28, "F64", 1, 8), (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2), (34, "TQ1_0", 256, 54), (35, "TQ2_0", 256, 66), (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36), (41, "Q1_0", 128, 18),
]
GGML_TYPES: dict[int, GGMLType] = {i: GGMLType(i, n, b, s) for i, n, b, s in _TABLE}
TYPE_BY_NAME: dict[str, GGMLType] = {t.name: t for t in GGML_TYPES.values()}

_DEQUANT: dict[str, Callable[[np.ndarray], np.ndarray]] = {}


def _register(name: str):
    def deco(fn):
        _DEQUANT[name] = fn
        return fn
    return deco


def _f16(b: np.ndarray) -> np.ndarray:
    """uint8 [n, 2k] -> float32 [n, k], reading little-endian f16."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


# F32: 4 bytes per element.
@_register("F32")
def _dq_f32(b):
    return np.ascontiguousarray(b).view("<f4").reshape(-1, 1).copy()


# F16: 2 bytes per element, IEEE half.
@_register("F16")
def _dq_f16(b):
    return _f16(b).reshape(-1, 1)


# BF16: 2 bytes per element, the top half of an f32.
@_register("BF16")
def _dq_bf16(b):
    u = np.ascontiguousarray(b).view("<u2").astype(np.uint32) << 16
    return u.view(np.float32).reshape(-1, 1)


# Q8_0 (34 bytes / 32 weights): d f16 | qs int8[32];  w = d * q
@_register("Q8_0")
def _dq_q8_0(b):
    d = _f16(b[:, :2])
    q = b[:, 2:].view(np.int8).astype(np.float32)
    return d * q


# Q4_0 (18 bytes / 32 weights): d f16 | qs u8[16];  weight j < 16 is the low nibble of qs[j],
# weight j + 16 the high nibble;  w = d * (q - 8)
@_register("Q4_0")
def _dq_q4_0(b):
    d = _f16(b[:, :2])
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


# Q4_1 (20 bytes / 32 weights): d f16 | m f16 | qs u8[16];  nibbles as Q4_0;  w = d * q + m
@_register("Q4_1")
def _dq_q4_1(b):
    d = _f16(b[:, :2])
    m = _f16(b[:, 2:4])
    qs = b[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return d * q + m


def supported_types() -> set[str]:
    return set(_DEQUANT)


class _SupportedView:
    """Live view of the registered names, so types added by other modules count."""

    def __contains__(self, name):
        return name in _DEQUANT

    def __iter__(self):
        return iter(_DEQUANT)


SUPPORTED_TYPES = _SupportedView()


def dequantize(raw: np.ndarray, gtype: GGMLType, shape: tuple[int, ...], name: str = "tensor") -> np.ndarray:
    """Raw GGUF bytes (uint8) of a tensor with GGUF `shape` (ne0 first) -> float32 in numpy order
    (`shape[::-1]`, so a GGUF [n_in, n_out] matrix comes back as [n_out, n_in])."""
    fn = _DEQUANT.get(gtype.name)
    if fn is None:
        raise UnsupportedModelError(f"tensor {name} has type {gtype.name}, which Hearth cannot dequantize yet")
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, gtype.type_size)
    out = fn(blocks)
    return out.reshape(tuple(reversed(shape)))
