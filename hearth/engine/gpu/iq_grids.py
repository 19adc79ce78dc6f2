"""The text of engine/wgsl/iq_grids.wgsl: the i-quant grids of engine/quants/tables.npz as WGSL constants.

`python -m hearth.engine.gpu.iq_grids` rewrites the file (after tables.npz changes);
tests/test_gpu_iquants.py checks that the file equals `wgsl_text()`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..quants import tables as T

# (weight type, WGSL name, grid [entries, values])
GRIDS = (("IQ2_XXS", "IQ2XXS_GRID", T.IQ2_GRIDS["iq2xxs"]), ("IQ2_XS", "IQ2XS_GRID", T.IQ2_GRIDS["iq2xs"]),
         ("IQ2_S", "IQ2S_GRID", T.IQ2_GRIDS["iq2s"]), ("IQ3_XXS", "IQ3XXS_GRID", T.IQ3XXS_GRID),
         ("IQ3_S", "IQ3S_GRID", T.IQ3S_GRID))

_HEADER = """\
// The i-quant grids (llama.cpp's iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid, iq3s_grid) as u32
// words: an IQ2 entry (8 unsigned byte values) is two words, an IQ3 entry (4 values) one; byte i of a
// word is value i. Written by `python -m hearth.engine.gpu.iq_grids` from engine/quants/tables.npz (do
// not edit). Included by quant.wgsl: only the grids of the weight types a kernel is built for (QTYPES /
// QTYPE) are emitted.
{% set _iq_used = (QTYPES | default([])) | list + [QTYPE | default("")] %}
"""


def words(grid: np.ndarray) -> np.ndarray:
    """uint8 [entries, 4 | 8] -> the table's u32 words (byte i of a word = value i)."""
    return np.ascontiguousarray(grid.astype(np.uint8)).view("<u4").reshape(-1)


def wgsl_text() -> str:
    out = [_HEADER]
    for qtype, name, g in GRIDS:
        w = words(g)
        body = ",\n".join("    " + ", ".join(f"0x{v:08x}u" for v in w[i:i + 8]) for i in range(0, len(w), 8))
        out.append(f'{{% if "{qtype}" in _iq_used %}}\nconst {name} = array<u32, {len(w)}>(\n{body});\n{{% endif %}}\n')
    return "".join(out)


def path() -> Path:
    return Path(__file__).resolve().parent.parent / "wgsl" / "iq_grids.wgsl"


if __name__ == "__main__":
    path().write_text(wgsl_text(), encoding="utf-8")
