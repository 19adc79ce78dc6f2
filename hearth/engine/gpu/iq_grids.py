"""The i-quant lookup tables as one storage buffer, bound at binding TABLE_BINDING of every kernel that
declares it (quant.wgsl's `iq_tab`, for the IQ2 / IQ3 weight types and IQ4_XS's pair lookups).

Why a buffer: as WGSL `const` arrays indexed at run time the grids are copied into every invocation's
private memory (SPIR-V function variables): lavapipe takes minutes to compile and run such a kernel,
and on a real GPU the copy is 2-8 KB of registers or local memory per thread. A read-only storage
buffer of 18 KB is uploaded once per device (`Device.iq_tables`), stays in the GPU's L1 / L2 cache,
and needs no copy at kernel start (a workgroup-memory copy would need a barrier and the workgroup
size in every kernel that includes quant.wgsl). Kernels.get sees the declaration and adds the
binding; Plan binds the device's buffer there, so no call site passes it.

Layout, u32 words (quant.wgsl's `IQ_*` offsets; tests/test_gpu_iquants.py checks they agree):
    iq2xxs_grid [256 x 2] | iq2xs_grid [512 x 2] | iq2s_grid [1024 x 2]  (IQ2 entry: 8 byte values, 2 words)
    iq3xxs_grid [256] | iq3s_grid [512]                                   (IQ3 entry: 4 byte values, 1 word)
    iq4_pairs [256]: byte b = (hi << 4) | lo of IQ4 codes -> kvalues_iq4nl[lo] in bits 0..7,
                     kvalues_iq4nl[hi] in bits 16..23 (two int8, so two bytes' entries pack by shifts)
Byte i of a grid word is the entry's value i.
"""

from __future__ import annotations

import numpy as np

from ..quants import tables as T

# Binding number of `iq_tab` in every kernel (above any kernel's own bindings 1..).
TABLE_BINDING = 63
DECLARATION = f"@group(0) @binding({TABLE_BINDING}) var<storage, read> iq_tab: array<u32>;"

# (WGSL offset name, grid [entries, values]); the pair table follows them
GRIDS = (("IQ2XXS_GRID", T.IQ2_GRIDS["iq2xxs"]), ("IQ2XS_GRID", T.IQ2_GRIDS["iq2xs"]),
         ("IQ2S_GRID", T.IQ2_GRIDS["iq2s"]), ("IQ3XXS_GRID", T.IQ3XXS_GRID), ("IQ3S_GRID", T.IQ3S_GRID))
# Weight types whose kernels read the table (IQ4_XS only in its 64-weight int8 chunks, see quant.wgsl)
GRID_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S")


def words(grid: np.ndarray) -> np.ndarray:
    """uint8 [entries, 4 | 8] -> the table's u32 words (byte i of a word = value i)."""
    return np.ascontiguousarray(grid.astype(np.uint8)).view("<u4").reshape(-1)


def iq4_pairs() -> np.ndarray:
    """u32 [256]: entry (hi << 4) | lo = kvalues_iq4nl[lo] as a byte | kvalues_iq4nl[hi] as a byte << 16."""
    kv = T.KVALUES_IQ4NL.astype(np.int8).view(np.uint8).astype(np.uint32)
    b = np.arange(256)
    return (kv[b & 15] | (kv[b >> 4] << 16)).astype("<u4")


def layout() -> tuple[np.ndarray, dict[str, int]]:
    """(u32 words of the whole table, {offset name: first word})."""
    parts, offsets, o = [], {}, 0
    for name, g in GRIDS:
        w = words(g)
        offsets[name] = o
        parts.append(w)
        o += w.size
    offsets["IQ4_PAIRS"] = o
    parts.append(iq4_pairs())
    return np.concatenate(parts).astype("<u4"), offsets
