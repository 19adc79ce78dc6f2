"""One builder per kernel: its template variables, bindings, parameter fields and workgroup counts.

The backend and the tests both build kernels through these, so a test exercises exactly the
pipeline the model runs. Buffer order in each `access` tuple is the order of the kernel's bindings 1..
"""

from __future__ import annotations

import math
import os

from ..quants import TYPE_BY_NAME
from .kernels import grid

# Types with a dequantizing kernel (engine/wgsl/quant.wgsl).
GPU_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
             "IQ4_NL", "IQ4_XS", "MXFP4", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S")
# Types whose decode matvec can take x as int8 blocks (quant.wgsl `_dq8`): every quantized one. Float
# weights keep f32 x (their products gain nothing from integer dot products and would lose x's precision).
INT8_TYPES = GPU_TYPES[2:]

# Matvec layout (lanes, rows per thread): LANES threads share a row group, 256 / LANES row groups a
# workgroup, each thread RPT rows. The default is the small-matrix layout (one 32-lane group a row).
MATVEC_DEFAULT = (32, 1)
MATVEC_ROWS = 8                 # rows per workgroup of the default layout
# A large GPU holds about a thousand workgroups of 256 threads at once (the H200: 132 SMs x 8): more
# rows per thread (x reused from registers, more loads in flight) only while the grid stays that big.
MATVEC_TARGET_GROUPS = 1024
MATVEC_MAX_RPT = 4
MATVEC_UNROLL = 2
ATTN_CHUNK = 64       # keys per workgroup of decode attention's split pass
MATVEC_FIELDS = (("K", "u"), ("M", "u"), ("m0", "u"), ("m1", "u"), ("rb0", "u"), ("rb1", "u"), ("rb2", "u"),
                 ("x_off", "u"), ("y_off", "u"), ("eps", "f"), ("a0", "u"), ("a1", "u"), ("a2", "f"))
ATTN_X_MAX = 4096     # the largest attention output (heads x head dim) merged in workgroup memory
ATTN_WS_MAX = 2048    # and the most (head, split) weights kept there beside it


def row_bytes(qtype: str, k: int) -> int:
    t = TYPE_BY_NAME[qtype]
    return k // t.block_size * t.type_size


def matvec_layout(k: int, m: int, mult: int = 0, mats: int = 1) -> tuple[int, int, int]:
    """(lanes, rows per thread, unroll) for M rows of K weights, `mats` matrices a row (2: glu).
    Measured on the H200 (bench.gpu_profile --matvec-sweep): 128 lanes for K of 2,048-4,096 and 256
    past that; as many rows a thread as keep MATVEC_TARGET_GROUPS workgroups; two chunks a step for
    one matrix (more loads in flight), one for two (the second matrix already doubles them).
    `mult`: the rows per workgroup must divide it (the Q|K|V boundaries, so a workgroup reads one matrix)."""
    chunks = k // 8
    lanes = 32 if chunks < 128 else 64 if chunks < 256 else 128 if chunks < 1024 else 256
    for rpt in (4, 2, 1):
        rpw = 256 // lanes * rpt
        if rpt <= MATVEC_MAX_RPT and (mult == 0 or mult % rpw == 0) and (rpt == 1 or m // rpw >= MATVEC_TARGET_GROUPS):
            break
    else:
        lanes, rpt = 256, 1            # one row a workgroup: divides any boundary
    unroll = MATVEC_UNROLL if mats == 1 and chunks >= MATVEC_UNROLL * lanes else 1
    return lanes, rpt, unroll


def matvec_rows(layout=None) -> int:
    lanes, rpt, *rest = layout or MATVEC_DEFAULT
    unroll = rest[0] if rest else 1
    return 256 // lanes * rpt


# Row lengths that take the int8-x path (measured on the H200, bench.gpu_profile --matvec-sweep): every
# workgroup quantizes all of x first, which pays at K 2,048-4,096 (gate/up, Q|K|V, O, head: 1.1-1.5x)
# and costs more than it saves at K 8,192-14,336 (the down products: 0.6x); smaller K not measured.
INT8_K_MIN, INT8_K_MAX = 2048, 4096


def int8_layout(k: int, m: int, qtypes, mult: int = 0) -> tuple[int, int, int]:
    """The int8 path's (lanes, rows per thread, unroll): 64 lanes x 4 rows (16 rows a workgroup share
    the quantized x); rows of at most 2,048 weights 2 rows a thread; fewer where `mult` (the Q|K|V
    boundaries) needs it. Chosen from whole-model decode on the H200 (bench.gpu, one call each):
    8B Q4_K_M 64 x 4 195 tok/s against 32 x 2 187, 64 x 2 171, 128 x 4 174; 8B Q4_0 64 x 4 240
    against 128 x 4 209, 64 x 2 204, 128 x 2 164; 1B Q4_K_M 64 x 2 619 against 64 x 4 592, 32 x 2
    619, 128 x 4 575 (pipelined steps). Rows of at most 2,048 weights with Q4_K / Q5_K weights take 32
    lanes, so the 64-weight chunks (int8_c64) fill them (bench/README.md, round 6)."""
    lanes = 64
    if INT8_C64_LANES and INT8_C64 and any(t in C64_TYPES for t in qtypes):
        lanes = INT8_C64_LANES
    elif k <= 2048 and int8_c64(qtypes, k, 32) and any(t in ("Q4_K", "Q5_K") for t in qtypes):
        lanes = 32      # a 64-weight chunk for every lane (1B Q4_K_M: 673 tok/s pipelined against 625 at 64 lanes)
    for rpt in ((2, 1) if k <= 2048 else (4, 2, 1)):
        if mult == 0 or mult % (256 // lanes * rpt) == 0:
            return lanes, rpt, 1
    return 256, 1, 1


def int8_ok(dev, qtypes, k: int) -> bool:
    """Whether a matvec over these weight types and row length takes the int8-x path on `dev`: K in
    the measured range, the device has the integer dot products and x's int8 copy (K bytes + K/8
    sums + K/32 scales and squares) fits in workgroup memory beside the reduction buffer (at most
    9 values x 256 threads)."""
    if not getattr(dev, "int8", False) or k % 32 or not all(t in INT8_TYPES for t in qtypes):
        return False
    if not INT8_K_MIN <= k <= INT8_K_MAX:
        return False
    need = k + k // 2 + k // 4 + 9 * 1024
    return need <= int(dev.limits["max-compute-workgroup-storage-size"])


# Types whose int8-x matvec reads 64-weight chunks (matvec.wgsl C64, quant.wgsl `_dq64`): a matvec with
# one of them among its weights takes them (its other types run eight 8-weight products a chunk),
# where a row has a chunk for every lane (K >= 64 x lanes: 4,096 at the int8 layouts' 64 lanes).
# HEARTH_GPU_KSUB=0 keeps 8-weight chunks everywhere, =k only for the K-quants; HEARTH_GPU_KSUB_LANES=n
# gives those matvecs n lanes (bench.gpu comparisons; the layouts are measured in bench/README.md).
_KSUB = os.environ.get("HEARTH_GPU_KSUB", "")
# IQ4_XS / IQ4_NL take them too (a sub-block's scale decoded once, the codes read as aligned words and
# looked up 8 a word), unless HEARTH_GPU_IQ4_C64=0 (their 8-weight `_dq8` chunks). The lookup: selects
# on constants (HEARTH_GPU_IQ4_LUT=0), reads of the pair table (=tab; gpu/iq_grids.py) or, the default
# in the dense matvec, of the codebook's tables in workgroup memory (quant.wgsl `kv_wg4`). Other kernels
# use the selects.
IQ4_C64 = os.environ.get("HEARTH_GPU_IQ4_C64", "") != "0"
IQ4_LUT = {"0": "", "1": "tab", "tab": "tab"}.get(os.environ.get("HEARTH_GPU_IQ4_LUT", ""), "wg")
C64_TYPES = (("Q4_K", "Q5_K", "Q6_K") + (() if _KSUB == "k" else ("Q4_0", "Q8_0"))
             + (("IQ4_XS", "IQ4_NL") if IQ4_C64 else ()))
INT8_C64 = _KSUB != "0"
# Those chunks' Q4_K / Q5_K header and codes read in 16-byte loads (matvec.wgsl V4): 8B Q4_K_M 252-253
# tok/s pipelined against 231-233 a word at a time (H200, bench/README.md round 7). HEARTH_GPU_V4=0 reads
# them a word at a time.
INT8_V4 = os.environ.get("HEARTH_GPU_V4", "") != "0"
INT8_C64_LANES = int(os.environ.get("HEARTH_GPU_KSUB_LANES", "0") or 0)


def int8_c64(qtypes, q8x: int, lanes: int) -> bool:
    """Whether an int8-x matvec (q8x = K) over these types with this many lanes reads 64-weight chunks."""
    return (bool(q8x) and INT8_C64 and q8x % 64 == 0 and q8x // 64 >= lanes
            and any(t in C64_TYPES for t in qtypes))


def matvec(ks, qtypes, mode="concat", act="silu", norm=False, bias=False, residual=False, attn_x=0, rope="",
           attn_ws=1, layout=None, q8x=0, q8g=False, q8out=False, gated=None, pre=False, gelu_mul=False):
    """y (+)= W x for one token. Bindings: x, y, w0[, w1[, w2]][, g][, b][, step] or [, kc, vc, cs, step].
    attn_x = heads x head dim: x is decode attention's split partials (bind the step buffer last;
    params a0 = head dim, a1 = max splits), merged before the product; attn_ws = heads x max splits.
    rope = "normal" | "neox": Q|K|V with RoPE and the KV store fused (a0 = head dim, a1 = max_ctx).
    layout: (lanes, rows per thread), see matvec_layout; concat boundaries must be multiples of its
    rows per workgroup (matvec_rows). q8x = K: x goes to int8 blocks of 32 first (see int8_ok);
    the kernel is then built for rows of exactly K weights. q8g (with q8x): x (binding 1) is
    already quantized, quantize_x's blocks (see int8_pre_ok); no norm, no attn_x. q8out (glu, 32 rows a
    workgroup: GLU_Q8OUT_LAYOUT; M a multiple of 32): y is also written as quantize_x's blocks to a
    binding after the others (glu_q8out_ok). gated = (S, heads, conv channels, conv kernel - 1 or 0):
    x is Qwen3.5's delta-rule output, gated as it is read (two bindings after bias: proj with z at a1,
    the norm [S]; with a conv state, a third: moved on, see matvec.wgsl GATE_S).
    pre: a pending post-norm added to x first (bindings pt, pw, po after the others; a2 = scale):
    x' = (x + RMSNorm(pt) pw) a2, written to po by workgroup 0. gelu_mul (concat): y = gelu(W x) * em[a0:]
    (binding em last)."""
    lanes, rpt, *rest = layout or MATVEC_DEFAULT
    gs, ghv, gch, gkm1 = gated or (0, 0, 0, 0)
    tph = 1
    while gs and ghv * tph * 2 <= 256 and gs % (tph * 2) == 0:
        tph *= 2
    unroll = rest[0] if rest else 1
    access = (["r", "rw"] + ["r"] * len(qtypes) + (["r"] if norm else []) + (["r"] if bias else [])
              + (["r", "r"] if gs else []) + (["rw"] if gkm1 else [])
              + (["r"] if attn_x else []) + (["rw"] if q8out else []) + (["r", "r", "rw"] if pre else [])
              + (["r"] if gelu_mul else []) + (["rw", "rw", "r", "r"] if rope else []))
    if gs and ghv > 256:
        raise ValueError(f"a gated x of {ghv} heads (at most 256)")
    return ks.get("matvec.wgsl", access, MATVEC_FIELDS, QTYPES=tuple(qtypes), MODE=mode, ACT=act,
                  GATE_S=gs, GATE_HV=ghv, GATE_TPH=tph, SHIFT_CH=gch, SHIFT_KM1=gkm1,
                  NORM=bool(norm), BIAS=bool(bias), RESIDUAL=bool(residual), ROWS=256 // lanes * rpt, RPT=rpt, UNROLL=unroll,
                  ATTN_X=int(attn_x), ATTN_WS=int(attn_ws), ATTN_CHUNK=ATTN_CHUNK, ROPE=rope, Q8X=int(q8x), Q8G=bool(q8g),
                  Q8OUT=bool(q8out), C64=int8_c64(qtypes, q8x, lanes), V4=INT8_V4, IQ4_LUT=iq4_lookup(qtypes, q8x, lanes),
                  **({"PRE": True} if pre else {}), **({"GELU_MUL": True} if gelu_mul else {}))


# MXFP4's codes in the int8-x products: fp4_pack4's arithmetic, or with HEARTH_GPU_FP4_LUT=wg the
# codebook in workgroup memory (kv_wg4), which lost on the H200 (gpt-oss-20b decode 229.6 against 237.0
# tok/s pipelined, bench/README.md) where IQ4's selects, twice fp4_pack4's work, gained from it.
FP4_LUT = "wg" if os.environ.get("HEARTH_GPU_FP4_LUT", "") == "wg" else ""


def fp4_lookup(qtypes, q8x) -> str:
    """How an int8-x product's MXFP4 codes are looked up (quant.wgsl FP4_LUT), "" where it has none."""
    return FP4_LUT if q8x and "MXFP4" in qtypes else ""


def iq4_lookup(qtypes, q8x: int, lanes: int) -> str:
    """How a matvec's IQ4 64-weight chunks look their codes up (IQ4_LUT), "" where it has none."""
    has = any(t in ("IQ4_XS", "IQ4_NL") for t in qtypes)
    return IQ4_LUT if has and int8_c64(qtypes, q8x, lanes) else ""


# Row lengths whose matvec reads x quantized once, to global memory, by a pass before it
# (quantize_x, then matvec q8g): e.g. the 8B's down products (K 14,336), where every workgroup quantizing
# all of x itself cost more than it saved (above). Measured on the H200 (bench.gpu, same call): 8B
# Q4_K_M decode 1.12x, Q4_0 1.01x; the 1B's (K 8,192) 0.96x (its Q6_K down rows gain nothing and the
# pass is one dispatch more a layer), so it keeps f32 x.
# From 9,216 (Qwen3.5-4B's down rows; the gate/up product writes the blocks, no pass): its decode 222-224
# tok/s pipelined against 193.9 (H200, bench/README.md); the 1B's 8,192 stay f32 as measured above.
# HEARTH_GPU_PRE_K_MIN=n moves the bound.
INT8_PRE_K_MIN = int(os.environ.get("HEARTH_GPU_PRE_K_MIN", "9216"))
QUANTIZE_X_FIELDS = (("K", "u"), ("x_off", "u"))


def q8_words(k: int) -> int:
    """u32 words of x's int8 blocks in global memory: codes K/4, chunk sums K/8, scales K/32."""
    return k // 4 + k // 8 + k // 32


def quantize_x(ks):
    """x [K] f32 -> int8 blocks of 32 (codes, chunk sums, scales: q8_words). Bindings: x, xg.
    Params K (a multiple of 32), x_off."""
    return ks.get("quantize_x.wgsl", ["r", "rw"], QUANTIZE_X_FIELDS)


def quantize_x_groups(k: int):
    return -(-(k // 8) // 256), 1, 1


def int8_pre_ok(dev, qtypes, k: int) -> bool:
    """Whether a matvec over these weight types and row length reads x quantized once to global
    memory (quantize_x + matvec q8g): the device has the integer dot products, the weights are
    quantized and K is at least INT8_PRE_K_MIN (nothing in workgroup memory, so no upper bound)."""
    return (getattr(dev, "int8", False) and k % 32 == 0 and k >= INT8_PRE_K_MIN
            and all(t in INT8_TYPES for t in qtypes))


# The gate/up product in front of such a down product writes its output's int8 blocks itself (matvec
# q8out: no quantize_x pass, one dispatch less a layer) in a layout of 32 rows a workgroup, one block:
# 32 lanes x 4 rows (8B Q4_K_M 252.3 tok/s pipelined against 64x8 219.7, 16x2 239.8; Q4_0 283-293
# against 64x8 262.3; bench/README.md round 7). HEARTH_GPU_GLU_Q8=0 keeps the quantize_x pass.
GLU_Q8OUT_LAYOUT = tuple(int(v) for v in os.environ.get("HEARTH_GPU_GLU_Q8_LAYOUT", "32,4,1").split(","))
GLU_Q8OUT = os.environ.get("HEARTH_GPU_GLU_Q8", "") != "0"


def glu_q8out_ok(gate_q8x: int, m: int) -> bool:
    """Whether a glu matvec (int8 x when gate_q8x, M = m rows) writes its int8 blocks for the down product."""
    return GLU_Q8OUT and bool(gate_q8x) and m % 32 == 0


# The layout of those products (lanes, rows per thread, unroll): one chunk a step. With 64-weight
# chunks (224 a 14,336 row) the 8B Q4_K_M decodes at 260.5 tok/s pipelined against 252.3-253.2 with
# two a step (128x2x2, which the 8-weight chunks' sweep had picked), 64x4x1 261.7, 64x2x1 257.8-259.4,
# 256x4x1 223.4 (without 16-byte loads), 32x1x1 211.4 (bench.gpu on the H200, bench/README.md round 7).
# HEARTH_GPU_PRE_LAYOUT=lanes,rpt,unroll sets it (bench.gpu comparisons).
INT8_PRE_LAYOUT = tuple(int(v) for v in os.environ.get("HEARTH_GPU_PRE_LAYOUT", "128,2,1").split(","))


def matvec_params(qtypes, k, rows, eps=0.0, x_off=0, y_off=0, mode="concat"):
    """`rows`: the row count of each matrix (concat: they are stacked; glu: both the same)."""
    rb = [row_bytes(t, k) for t in qtypes] + [0] * (3 - len(qtypes))
    m = rows[0] if mode == "glu" else sum(rows)
    r = list(rows) + [0] * (3 - len(rows))
    return dict(K=k, M=m, m0=r[0], m1=r[1], rb0=rb[0], rb1=rb[1], rb2=rb[2], x_off=x_off, y_off=y_off, eps=eps)


def matvec_groups(m: int, layout=None):
    gx, gy = grid(-(-m // matvec_rows(layout)))
    return gx, gy, 1


# The O projection merges decode attention's splits itself (one dispatch less) while every workgroup
# re-reading all the partials costs less than this many bytes; past it, a combine pass comes first.
ATTN_FUSE_BYTES = 4 << 20


def attn_fuse_splits(groups: int, k: int) -> int:
    """The most attention splits for which the fused merge stays under ATTN_FUSE_BYTES."""
    return ATTN_FUSE_BYTES // max(1, groups * k * 4)


MATMUL_FIELDS = (("K", "u"), ("M", "u"), ("n", "u"), ("rb0", "u"), ("rb1", "u"), ("ldy", "u"), ("y_off", "u"),
                 ("ldx", "u"))


def matmul(ks, qtypes, act="silu", bias=False, residual=False, epi_glu=False):
    """Y[n, ldy] (+)= X[n, K] W^T for prefill. Bindings: x, y, w0[, b].
    epi_glu: Y holds the gate product already; it becomes act(gate) * (X W^T)."""
    access = ["r", "rw", "r"] + (["r"] if bias else [])
    return ks.get("matmul.wgsl", access, MATMUL_FIELDS, QTYPES=tuple(qtypes), ACT=act,
                  BIAS=bool(bias), RESIDUAL=bool(residual), EPI_GLU=bool(epi_glu))


def matmul_params(qtypes, k, m, n, ldy, y_off=0, ldx=None):
    rb = [row_bytes(t, k) for t in qtypes] + [0]
    return dict(K=k, M=m, n=n, rb0=rb[0], rb1=rb[1], ldy=ldy, y_off=y_off, ldx=k if ldx is None else ldx)


def matmul_groups(m: int, n: int):
    return -(-m // 64), -(-n // 64), 1


# Weight types of the f16 prefill product (matmul16.wgsl): F32 weights keep the f32 kernel (their
# own precision would be lost).
F16_TYPES = GPU_TYPES[1:]
# Its tile (rows, tokens per thread: 16 RM x 16 RN outputs a workgroup) and the steps of 32 weights
# summed in f16 before an f32 add (FLUSH); measured on the H200 (bench.gpu_profile --matmul-sweep):
# 8x8 with 2 steps 33-35 TFLOP/s on every 8B/1B shape with enough rows, 1 step 30-33, 4 steps or the
# k loop unrolled by the template 17-34 (erratic between shapes, so not kept).
MATMUL16_TILE = (8, 8)
MATMUL16_FLUSH = 2


# X of the down product, act(gate) * up, is not bounded by a norm (xn is, by |g| sqrt(d); attention's
# output by max |V|): it is stored in f16 times 2^-8 (W times 2^8), which raises its ceiling from
# 65,504 to 1.7e7 and costs only resolution below 2^-6 (absolute steps of 1.5e-5 there).
MATMUL16_FF_SHIFT = 8


def matmul16(ks, qtypes, act="silu", bias=False, residual=False, epi_glu=False, tile=None, flush=None, xshift=0):
    """As matmul, in half precision (the device must have shader-f16; weight types F16_TYPES).
    tile = (RM, RN) with RM in (4, 8), RN in (2, 4, 8); flush: steps of 32 weights a f16 partial sum spans;
    xshift: X scaled by 2^-xshift and W by 2^xshift in f16 (0..12)."""
    if qtypes[0] not in F16_TYPES:
        raise ValueError(f"no f16 prefill product for weight type {qtypes[0]}")
    rm, rn = tile or MATMUL16_TILE
    if rm not in (4, 8) or rn not in (2, 4, 8):
        raise ValueError(f"matmul16 tile {rm}x{rn} per thread is not built")
    if not 0 <= xshift <= 12:
        raise ValueError(f"matmul16 xshift {xshift} outside 0..12")
    access = ["r", "rw", "r"] + (["r"] if bias else [])
    return ks.get("matmul16.wgsl", access, MATMUL_FIELDS, QTYPES=tuple(qtypes), ACT=act, BIAS=bool(bias),
                  RESIDUAL=bool(residual), EPI_GLU=bool(epi_glu), RM=rm, RN=rn,
                  FLUSH=int(flush or MATMUL16_FLUSH), XSHIFT=int(xshift))


# A smaller tile where the big one would leave the GPU short of workgroups (the H200 has 132 SMs, and
# the 8x8 tile's 128 accumulators a thread leave room for about one workgroup an SM: the 1B's K/V
# products, M = 512, 64 workgroups, ran at half speed with it).
MATMUL16_MIN_GROUPS = 128
MATMUL16_SMALL_TILES = ((4, 8), (4, 4))


def matmul16_tile(m: int, n: int) -> tuple[int, int]:
    """The tile for M rows over n tokens (a full prefill chunk): MATMUL16_TILE unless that gives fewer
    than MATMUL16_MIN_GROUPS workgroups, then the first smaller tile that does (else the smallest)."""
    return _tile_for(m, n, (MATMUL16_TILE,) + MATMUL16_SMALL_TILES)


def _tile_for(m: int, n: int, tiles) -> tuple[int, int]:
    """The first of `tiles` (16 RM x 16 RN outputs a workgroup) that gives MATMUL16_MIN_GROUPS
    workgroups for M rows over n tokens, else the last."""
    for rm, rn in tiles:
        if -(-m // (16 * rm)) * -(-n // (16 * rn)) >= MATMUL16_MIN_GROUPS:
            return rm, rn
    return tiles[-1]


def matmul16_groups(m: int, n: int, tile=None):
    rm, rn = tile or MATMUL16_TILE
    return -(-m // (16 * rm)), -(-n // (16 * rn)), 1


# The int8 prefill product (matmul8.wgsl): X quantized a row at a time to int8 blocks of 32
# (quantize_rows.wgsl, quantize_x's rounding), W's blocks decoded to int8 codes in workgroup memory,
# each block's 32 products 8 dot4I8Packed summed exactly in i32 and scaled once into f32. Weight types
# with a decoder there; the others (Q5_0, Q5_1, Q2_K, Q3_K, F16; F32) keep the f16 (f32) kernel.
INT8_MM_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
                 "IQ4_NL", "IQ4_XS")
# The types a real GPU runs through it by default: those measured faster in whole-model prefill on
# the H200 (8B Q4_0 1.40x, 8B Q4_K_M (Q4_K + Q6_K) 1.36x, 1B Q4_K_M 1.31x at 2,000 tokens;
# bench/README.md round 8). Q4_1 / Q8_0 / Q5_K were measured at most as single products, so they stay
# on the f16 kernel unless HEARTH_GPU_MM8=1 (every type above).
INT8_MM_DEFAULT_TYPES = ("Q4_0", "Q4_K", "Q6_K")
# Tile (rows, tokens a thread) as matmul16's: 8x8 on every 8B/1B shape with enough rows (H200,
# bench.gpu_profile --matmul8-sweep: 51-55 TFLOP/s against 45-53 for 8x4, 4x8, 4x4), a smaller one
# where it would leave the GPU short of workgroups (the 1B's K/V products: 4x8 44 TFLOP/s, 8x8 26).
MATMUL8_TILE = (8, 8)
MATMUL8_SMALL_TILES = ((4, 8), (4, 4))
MATMUL8_TILES = ((8, 8), (8, 4), (4, 8), (4, 4))
MATMUL8_FIELDS = (("K", "u"), ("M", "u"), ("n", "u"), ("rb0", "u"), ("s_off4", "u"), ("ldy", "u"),
                  ("y_off", "u"), ("pad", "u"))
QUANTIZE_ROWS_FIELDS = (("K", "u"), ("n", "u"), ("ldx", "u"), ("s_off", "u"))


def q8_rows_scales(n: int, k: int) -> int:
    """First word of the scales in quantize_rows' buffer for n rows of K (a multiple of 4 words)."""
    return -(-(n * k // 4) // 4) * 4


def q8_rows_words(n: int, k: int) -> int:
    """u32 words of n rows of K values as int8 blocks: codes n K/4, then (d, d * code sum) a block."""
    return q8_rows_scales(n, k) + n * k // 16


def quantize_rows(ks):
    """X [n, ldx] f32 -> int8 blocks of 32 a row (q8_rows_words). Bindings: x, xq.
    Params K (a multiple of 32), n, ldx, s_off (q8_rows_scales of the buffer's row capacity)."""
    return ks.get("quantize_rows.wgsl", ["r", "rw"], QUANTIZE_ROWS_FIELDS)


def quantize_rows_groups(n: int, k: int):
    gx, gy = grid(-(-(n * k // 8) // 256))
    return gx, gy, 1


def matmul8(ks, qtype, act="silu", bias=False, residual=False, epi_glu=False, tile=None):
    """Y[n, ldy] (+)= X W^T for prefill with X as quantize_rows' int8 blocks. Bindings: xq, y, w0[, b].
    The device must have the 4-way int8 dot products (Device.int8); tile = (RM, RN) in MATMUL8_TILES."""
    if qtype not in INT8_MM_TYPES:
        raise ValueError(f"no int8 prefill product for weight type {qtype}")
    rm, rn = tile or MATMUL8_TILE
    if (rm, rn) not in MATMUL8_TILES:
        raise ValueError(f"matmul8 tile {rm}x{rn} per thread is not built")
    access = ["r", "rw", "r"] + (["r"] if bias else [])
    # Q8X / C64: quant.wgsl's integer helpers (LO4, kq_scale_min), which the decoders share with the matvec
    return ks.get("matmul8.wgsl", access, MATMUL8_FIELDS, QTYPE=qtype, ACT=act, BIAS=bool(bias),
                  RESIDUAL=bool(residual), EPI_GLU=bool(epi_glu), RM=rm, RN=rn, Q8X=1, C64=True)


def matmul8_params(qtype, k, m, n, ldy, s_off, y_off=0):
    """s_off: the scales' first word in the xq buffer (q8_rows_scales of its row capacity)."""
    if s_off % 4:
        raise ValueError("the scales of an int8 X must start on a 16-byte boundary")
    return dict(K=k, M=m, n=n, rb0=row_bytes(qtype, k), s_off4=s_off // 4, ldy=ldy, y_off=y_off)


def matmul8_tile(m: int, n: int) -> tuple[int, int]:
    """The tile for M rows over n tokens (a full prefill chunk): MATMUL8_TILE unless that gives fewer
    than MATMUL16_MIN_GROUPS workgroups, then the first smaller tile that does (else the smallest)."""
    return _tile_for(m, n, (MATMUL8_TILE,) + MATMUL8_SMALL_TILES)


def tiles_by_n(m: int, chunk: int, choose) -> list[tuple[tuple[int, int], int, int]]:
    """[(tile, lo, hi)]: the prefill product's tile `choose(m, hi)` (matmul8_tile / matmul16_tile) for
    calls of lo < n <= hi tokens, hi halving from the plan's chunk down to 128. The plan is built for
    a whole chunk, but a 512-token prompt given the chunk's tile can leave most SMs idle (gpt-oss's K/V
    products, M = 512: 32 workgroups); each range is its own op, the others dispatch nothing.
    HEARTH_GPU_TILE_BY_N=0: the chunk's tile for every n."""
    if os.environ.get("HEARTH_GPU_TILE_BY_N", "") == "0":
        return [(choose(m, chunk), 0, chunk)]
    his = [chunk]
    while his[-1] // 2 >= 128:
        his.append(his[-1] // 2)
    out = []
    for hi in his:                              # widest first; a range below takes over where the tile changes
        t = choose(m, hi)
        if out and out[-1][0] == t:
            continue
        if out:
            out[-1] = (out[-1][0], hi, out[-1][2])
        out.append((t, 0, hi))
    return out


def in_range(groups, lo: int, hi: int, n_of=None):
    """groups(n, kv) of an op of a tiles_by_n range: groups(n) for calls of lo < n <= hi tokens, no
    workgroups otherwise. n_of(n, kv): the op's own count of a call's tokens (the call's n if None)."""
    if n_of is None:
        return lambda n, kv: groups(n) if lo < n <= hi else (0, 0, 0)
    return lambda n, kv: groups(n_of(n, kv)) if lo < n_of(n, kv) <= hi else (0, 0, 0)


def matmul8_groups(m: int, n: int, tile=None):
    rm, rn = tile or MATMUL8_TILE
    return -(-m // (16 * rm)), -(-n // (16 * rn)), 1


ROPE_FIELDS = (("n_head", "u"), ("n_kv", "u"), ("n_rot", "u"), ("max_ctx", "u"), ("neox", "u"), ("eps", "f"))


def rope_store(ks, head_dim: int, qk_norm: bool, kv_f16: bool = False):
    """Bindings: qkv, q_out, k_cache, v_cache, cos_sin, step[, q_norm, k_norm]. kv_f16: a float16 cache."""
    access = ["r", "rw", "rw", "rw", "r", "r"] + (["r", "r"] if qk_norm else [])
    return ks.get("rope_store.wgsl", access, ROPE_FIELDS, HD=head_dim, QK_NORM=bool(qk_norm), KV_F16=bool(kv_f16))


def rope_groups(n_tokens: int, n_head: int, n_kv: int):
    gx, gy = grid(n_tokens * (n_head + n_kv))
    return gx, gy, 1


ATTN_DECODE_FIELDS = (("n_head", "u"), ("n_kv", "u"), ("max_ctx", "u"), ("max_splits", "u"), ("scale", "f"),
                      ("window", "u"), ("n_rot", "u"), ("v_off", "u"), ("eps", "f"), ("kv_w", "u"))


def attn_split(ks, head_dim: int, kv_f16: bool = False, direct: bool = False, chunk: int = ATTN_CHUNK,
               prep: bool = False, gate_off=None):
    """Bindings: q, k_cache, v_cache, partials, step. kv_f16: a float16 cache. direct: for contexts of
    one split (one chunk of keys), the partials binding gets the merged output [n_head, head_dim].
    chunk: keys a workgroup scores (its threads), at least head_dim / 4 (ATTN_CHUNK fits head dims up
    to 256; the splits are then ceil(kv_len / chunk), and attn_combine must be given the same chunk).
    prep (Gemma 4): q is the raw Q|K|V row and the head norms, NeoX RoPE and the new K/V's store are
    done here (bindings then q = qkv, k_cache, v_cache, partials, step, cos_sin, q_norm, k_norm;
    params n_rot, v_off, eps, kv_w: 1 where the layer writes K/V). gate_off (direct; Qwen3.5): the
    output is written times sigmoid(gate), gate at that float offset of a binding after step."""
    if chunk * 4 < head_dim or chunk > 256:
        raise ValueError(f"a decode attention chunk of {chunk} keys for head dim {head_dim}")
    if gate_off is not None and not direct:
        raise ValueError("the output gate is applied by the direct split or the combine only")
    kv = "rw" if prep else "r"
    return ks.get("attn_decode.wgsl", ["r", kv, kv, "rw", "r"] + (["r", "r", "r"] if prep else [])
                  + (["r"] if gate_off is not None else []), ATTN_DECODE_FIELDS,
                  HD=head_dim, CHUNK=chunk, PASS="split", KV_F16=bool(kv_f16), DIRECT=bool(direct),
                  **({"PREP": True} if prep else {}), **({"GATE_OFF": gate_off} if gate_off is not None else {}))


def attn_combine(ks, head_dim: int, chunk: int = ATTN_CHUNK, gate_off=None):
    """Bindings: partials, out, step[, gate (gate_off: as attn_split's)]."""
    return ks.get("attn_decode.wgsl", ["r", "rw", "r"] + (["r"] if gate_off is not None else []), ATTN_DECODE_FIELDS,
                  HD=head_dim, CHUNK=chunk, PASS="combine", **({"GATE_OFF": gate_off} if gate_off is not None else {}))


def attn_splits(kv_len: int) -> int:
    return -(-kv_len // ATTN_CHUNK)


ATTN_PREFILL_FIELDS = (("n_head", "u"), ("n_kv", "u"), ("max_ctx", "u"), ("scale", "f"), ("window", "u"),
                       ("n_splits", "u"))
ATTN_BQ = 64
ATTN_MAX_SPLITS = 8


def attn_prefill_wide(head_dim: int) -> bool:
    """Whether prefill attention at this head dim shares each query row among threads
    (attn_prefill_wide.wgsl): from head dim 256 up, where a thread's whole row would spill.
    HEARTH_GPU_ATTN_WIDE_HD=N moves the threshold; =off keeps attn_prefill.wgsl everywhere."""
    v = os.environ.get("HEARTH_GPU_ATTN_WIDE_HD", "256")
    return v != "off" and head_dim % 16 == 0 and head_dim >= int(v)


def attn_prefill_slices(head_dim: int) -> int:
    """Threads sharing a query row in attn_prefill_wide.wgsl: 16, fewer for heads under 64 dims
    (each keeps at least one vec4 of q and of o)."""
    return 16 if head_dim % 64 == 0 else 8 if head_dim % 32 == 0 else 4


def attn_prefill_bq(head_dim: int) -> int:
    """Queries a prefill attention workgroup takes. The wide kernel's (16 threads a query):
    HEARTH_GPU_ATTN_WIDE_BQ = 4, 8 or 16 (the default; 256 threads, WebGPU's guaranteed most)."""
    if not attn_prefill_wide(head_dim):
        return ATTN_BQ
    bq = os.environ.get("HEARTH_GPU_ATTN_WIDE_BQ", "16")
    return int(bq) if bq in ("4", "8", "16") else 16


def attn_prefill(ks, head_dim: int, kv_f16: bool = False):
    """Bindings: q, k_cache, v_cache, partials, step. Then attn_prefill_combine. kv_f16: a float16 cache.
    Dispatch with attn_prefill_groups(..., head_dim): the two kernels tile queries differently."""
    if attn_prefill_wide(head_dim):
        return ks.get("attn_prefill_wide.wgsl", ["r", "r", "r", "rw", "r"], ATTN_PREFILL_FIELDS, HD=head_dim,
                      BQ=attn_prefill_bq(head_dim), T=attn_prefill_slices(head_dim),
                      KT=min(8, attn_prefill_slices(head_dim)), KV_F16=bool(kv_f16))
    kt = max(4, min(32, 2048 // head_dim))
    return ks.get("attn_prefill.wgsl", ["r", "r", "r", "rw", "r"], ATTN_PREFILL_FIELDS, HD=head_dim,
                  BQ=ATTN_BQ, KT=kt, PASS="split", KV_F16=bool(kv_f16))


def attn_prefill_combine(ks, head_dim: int):
    """Bindings: partials, out [n, n_head * head_dim]."""
    return ks.get("attn_prefill.wgsl", ["r", "rw"], ATTN_PREFILL_FIELDS, HD=head_dim, BQ=ATTN_BQ, KT=4,
                  PASS="combine")


def attn_prefill_splits(kv_len: int) -> int:
    """Key splits per query tile: enough workgroups to fill a large GPU once the context is long."""
    return max(1, min(ATTN_MAX_SPLITS, kv_len // 256))


def attn_prefill_groups(n: int, n_head: int, n_splits: int, head_dim: int):
    return -(-n // attn_prefill_bq(head_dim)), n_head, n_splits


EMBED_FIELDS = (("d", "u"), ("row_bytes", "u"), ("scale", "f"), ("n", "u"), ("id_off", "u"),
                ("s1", "u"), ("s2", "u"), ("s3", "u"))


def embed(ks, qtype: str, parts: int = 1):
    """Bindings: ids (u32), x, table part 0[, part 1 ...] (params s1.. = first row of each later part)."""
    if not 1 <= parts <= 4:
        raise ValueError(f"an embedding table in {parts} parts (at most 4)")
    return ks.get("embed.wgsl", ["r", "rw"] + ["r"] * parts, EMBED_FIELDS, QTYPE=qtype, PARTS=parts)


RMSNORM_FIELDS = (("d", "u"), ("n", "u"), ("eps", "f"))


def rmsnorm(ks, add: bool = False):
    """Bindings: x, y, g."""
    return ks.get("rmsnorm.wgsl", ["r", "rw", "r"], RMSNORM_FIELDS, ADD=bool(add))


def rows_groups(n: int):
    gx, gy = grid(n)
    return gx, gy, 1


ARGMAX_FIELDS = (("n", "u"), ("x_off", "u"))


def argmax(ks):
    """Bindings: x, out (u32)."""
    wg = 1024 if ks.dev.limits["max-compute-invocations-per-workgroup"] >= 1024 else 256
    return ks.get("argmax.wgsl", ["r", "rw"], ARGMAX_FIELDS, WG=wg)
