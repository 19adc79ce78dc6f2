"""`LinearX8`: engine/cpu/linear.py's `Linear` for MXFP4 matrices repacked in groups of 8 rows
(engine/cpu/mxfp4_x8.py), so that a layer whose experts were repacked at load multiplies them on
every path without the file's copy: decode rows through kernels_mxfp4_x8's 8-row kernel, batches of
8-bit x through the VNNI tiles (the row layout's products to the bit), float32 x through dequantized
tiles and BLAS (the exact float path; per row too, there being no float32-x kernel for this layout).
"""

from __future__ import annotations

import numpy as np

from . import kernels_mxfp4_x8 as KX
from . import mxfp4_x8 as X8
from .linear import TILE_FLOATS, TILE_MIN_ROWS, Activations, Linear, int8_default


class LinearX8(Linear):
    """ws: repacked matrices, each uint8 [rows / 8, n_in / 32 * 136], reading the same n_in inputs."""

    def __init__(self, ws, gtype, n_in: int, name: str = "matrix", int8: bool | None = None):
        if gtype.name != "MXFP4":
            raise ValueError(f"{name}: only MXFP4 matrices are repacked in groups of 8 rows, not {gtype.name}")
        super().__init__(ws, gtype, n_in, name, int8=False)
        for w in self.ws:
            if w.shape[1] != n_in // X8.BLOCK * X8.GROUP_BLOCK:
                raise ValueError(f"{name}: repacked rows of {w.shape[1]} bytes, expected "
                                 f"{n_in // X8.BLOCK * X8.GROUP_BLOCK} for {n_in} inputs")
        self.rows = [X8.GROUP * w.shape[0] for w in self.ws]
        self.n_out = sum(self.rows)
        tile = min(max(self.rows), max(TILE_MIN_ROWS, TILE_FLOATS // n_in))
        self._tile = max(X8.GROUP, tile // X8.GROUP * X8.GROUP)   # tiles start on a group
        self._matvec = None
        self._matvec8 = KX.matvec8_mxfp4_x8
        self._dequant = KX.dequant_mxfp4_x8
        self._vnni_job = KX.vnni_mxfp4_x8
        self.int8 = int8_default() if int8 is None else int8

    def _rows(self, act: Activations, out: np.ndarray) -> None:
        if self._int8 and act.int8:
            super()._rows(act, out)
        else:
            self._tiles(act, out)
