"""The lookup tables of the i-quants and MXFP4, as llama.cpp defines them.

Source: llama.cpp's `ggml/src/ggml-common.h` (the `GGML_TABLE_BEGIN` tables `ksigns_iq2xs`,
`iq2xxs_grid`, `iq2xs_grid`, `iq2s_grid`, `iq3xxs_grid`, `iq3s_grid`, `kvalues_iq4nl`, `kvalues_fp4`).
They are stored in `tables.npz` beside this module, generated from that header by
    python -m hearth.engine.quants.tables path/to/ggml-common.h
(tests/test_quants_iq.py checks them against gguf-py's copies). Each grid entry's bytes are stored
as llama.cpp's little-endian uint64/uint32 lays them out, so entry i's byte j is weight j:

    IQ2_GRIDS[name]  uint8 [256 | 512 | 1024, 8]  values 0x08, 0x19, 0x2b (iq2xxs, iq2xs, iq2s)
    IQ3XXS_GRID      uint8 [256, 4]               values 0x04 .. 0x3e
    IQ3S_GRID        uint8 [512, 4]               values 1 .. 15 (odd)
    KSIGNS           uint8 [128]   7 sign bits and an 8th making the count of set bits even
    KVALUES_IQ4NL    int8 [16]     IQ4_NL / IQ4_XS non-linear codebook
    KVALUES_MXFP4    int8 [16]     e2m1 values doubled (the scale is e8m0 halved)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

_FILE = Path(__file__).with_name("tables.npz")
# header table name -> (our name, bytes per entry)
_HEADER = {
    "ksigns_iq2xs": ("ksigns", 1), "iq2xxs_grid": ("iq2xxs", 8), "iq2xs_grid": ("iq2xs", 8),
    "iq2s_grid": ("iq2s", 8), "iq3xxs_grid": ("iq3xxs", 4), "iq3s_grid": ("iq3s", 4),
    "kvalues_iq4nl": ("kvalues_iq4nl", 1), "kvalues_fp4": ("kvalues_mxfp4", 1),
}


def parse_header(text: str) -> dict[str, np.ndarray]:
    """ggml-common.h's text -> {our name: uint8/int8 array}, entries as their little-endian bytes."""
    out = {}
    for m in re.finditer(r"GGML_TABLE_BEGIN\((\w+),\s*(\w+),\s*(\w+)\)(.*?)GGML_TABLE_END", text, re.S):
        ctype, name, body = m.group(1), m.group(2), m.group(4)
        if name not in _HEADER:
            continue
        ours, width = _HEADER[name]
        vals = [int(v, 0) for v in re.findall(r"-?(?:0x[0-9a-fA-F]+|\d+)", body)]
        if width == 1:
            out[ours] = np.array(vals, np.int8 if ctype == "int8_t" else np.uint8)
        else:
            out[ours] = np.array(vals, f"<u{width}").view(np.uint8).reshape(-1, width)
    missing = {v[0] for v in _HEADER.values()} - set(out)
    if missing:
        raise ValueError(f"ggml-common.h: tables {sorted(missing)} not found")
    return out


if __name__ == "__main__":   # regenerate the data file (before reading it)
    np.savez_compressed(_FILE, **parse_header(Path(sys.argv[1]).read_text()))
    print(f"wrote {_FILE} ({_FILE.stat().st_size} bytes)")
    sys.exit(0)


def _load() -> dict[str, np.ndarray]:
    with np.load(_FILE) as z:
        return {k: z[k] for k in z.files}


_T = _load()
KSIGNS: np.ndarray = _T["ksigns"]
IQ2_GRIDS: dict[str, np.ndarray] = {k: _T[k] for k in ("iq2xxs", "iq2xs", "iq2s")}
IQ3XXS_GRID: np.ndarray = _T["iq3xxs"]
IQ3S_GRID: np.ndarray = _T["iq3s"]
KVALUES_IQ4NL: np.ndarray = _T["kvalues_iq4nl"]
KVALUES_MXFP4: np.ndarray = _T["kvalues_mxfp4"]


def sign_table() -> np.ndarray:
    """float32 [128, 8]: +-1 for each 7-bit sign index (KSIGNS expanded; bit j set: weight j negative)."""
    bits = (KSIGNS[:, None] >> np.arange(8, dtype=np.uint8)) & np.uint8(1)
    return np.where(bits != 0, np.float32(-1), np.float32(1))
