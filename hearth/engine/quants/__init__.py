"""GGML tensor types and their dequantization to float32, vectorized in numpy.

Every dequantizer takes the raw bytes of whole blocks, `uint8 [n_blocks, type_size]`, and returns
`float32 [n_blocks, block_size]`. Each block layout is written beside its code.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import UnsupportedModelError


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


QK_K = 256  # weights per super-block of the K-quants

# Bit shifts used to unpack several sub-byte fields at once (broadcast over a new axis).
_NIB = np.array([0, 4], np.uint8).reshape(2, 1)            # two nibbles
_CRUMB = np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)    # four 2-bit fields
_BIT = np.arange(8, dtype=np.uint8).reshape(8, 1)          # eight single bits


def _f16(b: np.ndarray) -> np.ndarray:
    """uint8 [n, 2k] -> float32 [n, k], reading little-endian f16."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """uint8 [n, ..., m] -> uint8 [n, *lead, 2, m]: low nibbles of each group, then high nibbles.
    `lead` regroups the m bytes first (e.g. (4, 32) for Q4_K's four 32-byte groups)."""
    q = qs.reshape(len(qs), *lead)[..., None, :] >> _NIB
    q &= np.uint8(0x0F)
    return q


def _nibbles_f32(qs: np.ndarray) -> np.ndarray:
    """uint8 [n, 16] -> float32 [n, 32]: the 16 low nibbles, then the 16 high nibbles, written
    straight into the float output (no uint8 temporary: this is the hot path of Q4 models)."""
    n = len(qs)
    out = np.empty((n, 2, 16), np.float32)
    np.bitwise_and(qs, np.uint8(0x0F), out=out[:, 0], casting="unsafe")
    np.right_shift(qs, np.uint8(4), out=out[:, 1], casting="unsafe")
    return out.reshape(n, 32)


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
    # One pass: numpy casts the int8 to float32 inside the multiply's loop.
    return np.multiply(b[:, 2:].view(np.int8), _f16(b[:, :2]), dtype=np.float32)


# Q4_0 (18 bytes / 32 weights): d f16 | qs u8[16];  weight j < 16 is the low nibble of qs[j],
# weight j + 16 the high nibble;  w = d * (q - 8)
@_register("Q4_0")
def _dq_q4_0(b):
    out = _nibbles_f32(b[:, 2:18])
    out -= np.float32(8)
    out *= _f16(b[:, :2])
    return out


# Q4_1 (20 bytes / 32 weights): d f16 | m f16 | qs u8[16];  nibbles as Q4_0;  w = d * q + m
@_register("Q4_1")
def _dq_q4_1(b):
    # The default model's type (about 250 M weights/s on one core; variants that cast inside
    # the multiply or multiply each half into place measured no faster).
    out = _nibbles_f32(b[:, 4:20])
    out *= _f16(b[:, :2])
    out += _f16(b[:, 2:4])
    return out


def _q5_high_bits(qh: np.ndarray) -> np.ndarray:
    """qh u8[n, 4] (a little-endian u32, bit j = 5th bit of weight j) -> u8[n, 32] of 0/16."""
    bits = np.unpackbits(qh, axis=1, bitorder="little")   # [n, 32], bit j of the u32 at column j
    return bits << np.uint8(4)


# Q5_0 (22 bytes / 32 weights): d f16 | qh u8[4] | qs u8[16];  low 4 bits as Q4_0, bit 4 of
# weight j is bit j of qh (a little-endian u32);  w = d * (q - 16)
@_register("Q5_0")
def _dq_q5_0(b):
    q = _nibbles(b[:, 6:22], (16,)).reshape(-1, 32)
    q |= _q5_high_bits(b[:, 2:6])
    out = (q.view(np.int8) - np.int8(16)).astype(np.float32)
    out *= _f16(b[:, :2])
    return out


# Q5_1 (24 bytes / 32 weights): d f16 | m f16 | qh u8[4] | qs u8[16];  q as Q5_0;  w = d * q + m
@_register("Q5_1")
def _dq_q5_1(b):
    q = _nibbles(b[:, 8:24], (16,)).reshape(-1, 32)
    q |= _q5_high_bits(b[:, 4:8])
    out = q.astype(np.float32)
    out *= _f16(b[:, :2])
    out += _f16(b[:, 2:4])
    return out


# Q2_K (84 bytes / 256 weights): scales u8[16] | qs u8[64] | d f16 | dmin f16.
# 16 sub-blocks of 16 weights; scales[i] low nibble is sub-block i's scale, high nibble its min.
# qs holds two halves of 32 bytes; in half h, 2-bit field k (bits 2k..2k+1) of byte l is weight
# h*128 + k*32 + l (so sub-block h*8 + k*2 + l//16).  w = d * sc * q - dmin * m
@_register("Q2_K")
def _dq_q2_k(b):
    n = len(b)
    sc = b[:, :16]
    d = _f16(b[:, 80:82])
    dmin = _f16(b[:, 82:84])
    dl = (d * (sc & np.uint8(0x0F))).reshape(n, 16, 1)
    ml = (dmin * (sc >> np.uint8(4))).reshape(n, 16, 1)
    q = (b[:, 16:80].reshape(n, 2, 1, 32) >> _CRUMB) & np.uint8(3)   # [n, half, k, 32]
    out = q.reshape(n, 16, 16).astype(np.float32)
    out *= dl
    out -= ml
    return out.reshape(n, QK_K)


# Q3_K (110 bytes / 256 weights): hmask u8[32] | qs u8[64] | scales u8[12] | d f16.
# 16 sub-blocks of 16 weights with 6-bit signed scales (stored + 32): scale i's low 4 bits are
# the low nibble of scales[i] (i < 8) or the high nibble of scales[i - 8]; its high 2 bits are
# bits 2*(i//4)..+1 of scales[8 + i%4].  Weight h*128 + k*32 + l takes its low 2 bits from field
# k of qs[h*32 + l] (as Q2_K) and bit (h*4 + k) of hmask[l]; a clear hmask bit subtracts 4.
# w = d * (scale - 32) * q,  q in -4..3
@_register("Q3_K")
def _dq_q3_k(b):
    n = len(b)
    s = b[:, 96:108]
    lo = (s[:, :8].reshape(n, 1, 8) >> _NIB.reshape(1, 2, 1)) & np.uint8(0x0F)     # [n, 2, 8]
    hi = (s[:, 8:12].reshape(n, 1, 4) >> _CRUMB.reshape(1, 4, 1)) & np.uint8(3)    # [n, 4, 4]
    scale = (lo.reshape(n, 16) | (hi.reshape(n, 16) << np.uint8(4))).view(np.int8) - np.int8(32)
    dl = (_f16(b[:, 108:110]) * scale).reshape(n, 16, 1)
    ql = (b[:, 32:96].reshape(n, 2, 1, 32) >> _CRUMB) & np.uint8(3)                # [n, 2, 4, 32]
    hm = (b[:, :32].reshape(n, 1, 32) >> _BIT) & np.uint8(1)                         # [n, 8, 32]
    q = ql.reshape(n, 8, 32).view(np.int8) - ((hm ^ np.uint8(1)) << np.uint8(2)).view(np.int8)
    out = q.reshape(n, 16, 16).astype(np.float32)
    out *= dl
    return out.reshape(n, QK_K)


def _k_scale_min(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 packed bytes of Q4_K/Q5_K -> (scale u8[n, 8], min u8[n, 8]), 6 bits each:
       bytes 0-3: scale j (low 6 bits), top 2 bits = scale j+4 bits 4-5
       bytes 4-7: min j   (low 6 bits), top 2 bits = min j+4 bits 4-5
       bytes 8-11: low nibble = scale j+4 bits 0-3, high nibble = min j+4 bits 0-3"""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([d & np.uint8(0x3F), (md & np.uint8(0x0F)) | ((d >> np.uint8(2)) & np.uint8(0x30))], axis=1)
    mn = np.concatenate([m & np.uint8(0x3F), (md >> np.uint8(4)) | ((m >> np.uint8(2)) & np.uint8(0x30))], axis=1)
    return sc, mn


# Q4_K (144 bytes / 256 weights): d f16 | dmin f16 | scales u8[12] | qs u8[128].
# 8 sub-blocks of 32 weights, 6-bit scale and min each (packing in _k_scale_min).  In 32-byte
# group j of qs, the low nibbles are sub-block 2j and the high nibbles sub-block 2j + 1.
# w = d * sc * q - dmin * m
@_register("Q4_K")
def _dq_q4_k(b):
    n = len(b)
    sc, mn = _k_scale_min(b[:, 4:16])
    dl = (_f16(b[:, 0:2]) * sc).reshape(n, 8, 1)
    ml = (_f16(b[:, 2:4]) * mn).reshape(n, 8, 1)
    out = _nibbles(b[:, 16:144], (4, 32)).reshape(n, 8, 32).astype(np.float32)
    out *= dl
    out -= ml
    return out.reshape(n, QK_K)


# Q5_K (176 bytes / 256 weights): d f16 | dmin f16 | scales u8[12] | qh u8[32] | qs u8[128].
# As Q4_K, plus bit 4 of weight (sub-block i, index l) is bit i of qh[l].
# w = d * sc * q - dmin * m,  q in 0..31
@_register("Q5_K")
def _dq_q5_k(b):
    n = len(b)
    sc, mn = _k_scale_min(b[:, 4:16])
    dl = (_f16(b[:, 0:2]) * sc).reshape(n, 8, 1)
    ml = (_f16(b[:, 2:4]) * mn).reshape(n, 8, 1)
    q = _nibbles(b[:, 48:176], (4, 32)).reshape(n, 8, 32)
    q |= ((b[:, 16:48].reshape(n, 1, 32) >> _BIT) & np.uint8(1)) << np.uint8(4)
    out = q.astype(np.float32)
    out *= dl
    out -= ml
    return out.reshape(n, QK_K)


# Q6_K (210 bytes / 256 weights): ql u8[128] | qh u8[64] | scales int8[16] | d f16.
# Two halves of 128 weights; in half h, weight h*128 + k*32 + l (k in 0..3) has low 4 bits from
# ql[h*64 + (k%2)*32 + l] (low nibble for k < 2, high for k >= 2), high 2 bits from field k of
# qh[h*32 + l], and scale scales[h*8 + k*2 + l//16].  w = d * scale * (q - 32)
# (exact in float32 in any grouping: an 11-bit f16 mantissa times |scale * q| <= 4096; the same
# holds for every product in this file, so only a final + m / - dmin * m rounds).
@_register("Q6_K")
def _dq_q6_k(b):
    n = len(b)
    ql = _nibbles(b[:, :128], (2, 64)).reshape(n, 2, 4, 32)          # [n, h, nibble*2 + k%2, l]
    qh = (b[:, 128:192].reshape(n, 2, 1, 32) >> _CRUMB) & np.uint8(3)  # [n, h, k, l]
    q = (ql | (qh << np.uint8(4))).view(np.int8) - np.int8(32)
    dl = (_f16(b[:, 208:210]) * b[:, 192:208].view(np.int8)).reshape(n, 16, 1)
    out = q.reshape(n, 16, 16).astype(np.float32)
    out *= dl
    return out.reshape(n, QK_K)


# Q8_K (292 bytes / 256 weights): d f32 | qs int8[256] | bsums int16[16] (sums of 16 weights,
# used only by dot products);  w = d * q
@_register("Q8_K")
def _dq_q8_k(b):
    out = b[:, 4:260].view(np.int8).astype(np.float32)
    out *= np.ascontiguousarray(b[:, :4]).view("<f4")
    return out


def supported_types() -> set[str]:
    return set(_DEQUANT)


class _SupportedView:
    """Live view of the registered names, so types added by other modules count."""

    def __contains__(self, name):
        return name in _DEQUANT

    def __iter__(self):
        return iter(_DEQUANT)


SUPPORTED_TYPES = _SupportedView()


# Blocks per call of a dequantizer: big enough to amortize numpy's per-call cost, small enough
# that its temporaries stay in cache and so that big tensors spread over threads.
_CHUNK_BYTES = 1 << 20


# A corrupt or unusual scale (inf, NaN) gives inf/NaN weights, as in llama.cpp; no warnings.
def _quiet():
    return np.errstate(over="ignore", invalid="ignore")


def dequantize_blocks(blocks: np.ndarray, gtype: GGMLType, name: str = "tensor") -> np.ndarray:
    """uint8 [n_blocks, type_size] -> float32 [n_blocks, block_size]."""
    fn = _DEQUANT.get(gtype.name)
    if fn is None:
        raise UnsupportedModelError(f"tensor {name} has type {gtype.name}, which Hearth cannot dequantize yet "
                                    f"(supported: {', '.join(sorted(_DEQUANT))})")
    n = len(blocks)
    step = max(1, _CHUNK_BYTES // gtype.type_size)
    if n <= step:
        with _quiet():
            return fn(blocks)
    out = np.empty((n, gtype.block_size), np.float32)

    def run(i: int) -> None:
        with _quiet():  # errstate is per thread
            out[i:i + step] = fn(blocks[i:i + step])

    # numpy releases the GIL inside these kernels, so chunks on a few threads run in parallel.
    list(_pool().map(run, range(0, n, step)))
    return out


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="dequant")
    return _POOL


def dequantize(raw: np.ndarray, gtype: GGMLType, shape: tuple[int, ...], name: str = "tensor") -> np.ndarray:
    """Raw GGUF bytes (uint8) of a tensor with GGUF `shape` (ne0 first) -> float32 in numpy order
    (`shape[::-1]`, so a GGUF [n_in, n_out] matrix comes back as [n_out, n_in])."""
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    n_el = 1
    for dim in shape:
        n_el *= int(dim)
    if shape and shape[0] % gtype.block_size or raw.size * gtype.block_size != n_el * gtype.type_size:
        raise ValueError(f"tensor {name}: {raw.size} bytes do not hold a {gtype.name} tensor of shape "
                         f"{list(shape)}")
    out = dequantize_blocks(raw.reshape(-1, gtype.type_size), gtype, name)
    return out.reshape(tuple(reversed(shape)))


def dequantize_tensor(info) -> np.ndarray:
    """A `TensorInfo` from `engine.gguf` -> float32 in numpy order (`info.shape[::-1]`)."""
    return dequantize(info.data, info.type, info.shape, info.name)


def dequantize_rows(info) -> np.ndarray:
    """A `TensorInfo` -> float32 [rows, ne0]: a matrix's rows (for GGUF [n_in, n_out], that is
    [n_out, n_in]); a 1-D tensor comes back as one row."""
    return dequantize_tensor(info).reshape(-1, info.shape[0])


# The i-quants and MXFP4 register themselves (a module of their own: tables and layouts).
from . import iq  # noqa: E402,F401
