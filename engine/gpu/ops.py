"""One builder per kernel: its template variables, bindings, parameter fields and workgroup counts.

The backend and the tests both build kernels through these, so a test exercises exactly the
pipeline the model runs. Buffer order in each `access` tuple is the order of the kernel's bindings 1..
"""

from __future__ import annotations

from ..quants import TYPE_BY_NAME
from .kernels import grid

# Types with a dequantizing kernel (engine/wgsl/quant.wgsl).
GPU_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K")

MATVEC_ROWS = 8
MATVEC_FIELDS = (("K", "u"), ("M", "u"), ("m0", "u"), ("m1", "u"), ("rb0", "u"), ("rb1", "u"), ("rb2", "u"),
                 ("x_off", "u"), ("y_off", "u"), ("eps", "f"))


def row_bytes(qtype: str, k: int) -> int:
    t = TYPE_BY_NAME[qtype]
    return k // t.block_size * t.type_size


def matvec(ks, qtypes, mode="concat", act="silu", norm=False, bias=False, residual=False):
    """y (+)= W x for one token. Bindings: x, y, w0[, w1[, w2]][, g][, b]."""
    access = ["r", "rw"] + ["r"] * len(qtypes) + (["r"] if norm else []) + (["r"] if bias else [])
    return ks.get("matvec.wgsl", access, MATVEC_FIELDS, QTYPES=tuple(qtypes), MODE=mode, ACT=act,
                  NORM=bool(norm), BIAS=bool(bias), RESIDUAL=bool(residual), ROWS=MATVEC_ROWS)


def matvec_params(qtypes, k, rows, eps=0.0, x_off=0, y_off=0, mode="concat"):
    """`rows`: the row count of each matrix (concat: they are stacked; glu: both the same)."""
    rb = [row_bytes(t, k) for t in qtypes] + [0] * (3 - len(qtypes))
    m = rows[0] if mode == "glu" else sum(rows)
    r = list(rows) + [0] * (3 - len(rows))
    return dict(K=k, M=m, m0=r[0], m1=r[1], rb0=rb[0], rb1=rb[1], rb2=rb[2], x_off=x_off, y_off=y_off, eps=eps)


def matvec_groups(m: int):
    gx, gy = grid(-(-m // MATVEC_ROWS))
    return gx, gy, 1
