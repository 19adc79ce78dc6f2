"""Builders of the hybrid (Qwen3.5) layers' kernels: Gated DeltaNet's convolution, delta rule
(recurrent and chunked) and the output gates (engine/wgsl/delta_conv.wgsl, delta_net.wgsl,
gated_out.wgsl, delta_chunk.wgsl, delta_step.wgsl): a decoded token runs conv, step, gate
(HEARTH_GPU_DELTA_DECODE=old: conv, then `decode`, a workgroup a head); a prefill chunk conv,
l2norm, gram, solve, scan_u (HEARTH_GPU_DELTA_SCAN=old: prep, scan: the solve inside the sequential
scan), norm_silu. One parameter struct for all of them (DELTA_FIELDS); buffer order in each
`access` tuple is the order of the kernel's bindings 1.. (as ops.py)."""

from __future__ import annotations

import os

from ..models.delta_net import CHUNK
from .kernels import grid

DELTA_FIELDS = (("S", "u"), ("hv", "u"), ("hk", "u"), ("ch", "u"), ("ldp", "u"), ("a_off", "u"), ("b_off", "u"),
                ("z_off", "u"), ("n", "u"), ("st_off", "u"), ("m_off", "u"), ("K", "u"), ("eps", "f"))
# The decode pass keeps a state row of S_k values a thread in registers (a workgroup of S threads), the
# scan [S, 8 or 16] in workgroup memory: bounded here; S a multiple of 8 (the scan's blocks).
MAX_STATE = 256


def conv(ks, d_conv: int):
    """Bindings: proj (conv input at column 0, row stride ldp), out [n, ch], conv state, weights [ch, K]."""
    return ks.get("delta_conv.wgsl", ["r", "rw", "rw", "r"], DELTA_FIELDS, KM1=d_conv - 1)


def conv_rows(ks, d_conv: int):
    """Prefill's conv outputs, a thread a (token, channel); then conv_state. Bindings as conv."""
    return ks.get("delta_conv.wgsl", ["r", "rw", "rw", "r"], DELTA_FIELDS, KM1=d_conv - 1, MODE="rows")


def conv_state(ks, d_conv: int):
    """The carried state after n tokens (conv_groups). Bindings as conv."""
    return ks.get("delta_conv.wgsl", ["r", "rw", "rw", "r"], DELTA_FIELDS, KM1=d_conv - 1, MODE="state")


def conv_rows_groups(n: int, ch: int):
    gx, gy = grid(-(-(n * ch) // 64))
    return gx, gy, 1


def parallel_conv() -> bool:
    """Prefill's conv as conv_rows + conv_state (default) or the serial conv (HEARTH_GPU_DELTA_CONV=old)."""
    return os.environ.get("HEARTH_GPU_DELTA_CONV", "") != "old"


def conv_groups(ch: int):
    gx, gy = grid(-(-ch // 64))
    return gx, gy, 1


def l2norm(ks, S: int):
    """Bindings: conv [n, ch] (its q and k heads normalized in place)."""
    return ks.get("delta_net.wgsl", ["rw"], DELTA_FIELDS, PASS="l2norm", S=S, C=CHUNK)


def l2norm_groups(n: int, hk: int):
    gx, gy = grid(-(-(n * 2 * hk) // 64))
    return gx, gy, 1


def decode(ks, S: int):
    """One token, fused: q/k L2 norms, the update, RMSNorm(o) * ssm_norm * silu(z). Bindings: conv
    (not normalized), proj, da, state M, out [hv, S] (gated), ssm_norm [S]. A workgroup of S threads a head."""
    return ks.get("delta_net.wgsl", ["r", "r", "r", "rw", "rw", "r"], DELTA_FIELDS, PASS="decode", S=S, C=CHUNK)


def split_decode() -> bool:
    """Whether a decoded token takes the new passes (the default: step + gate, rows over many
    workgroups; HEARTH_GPU_DELTA_DECODE=head: head_step) rather than the one-pass `decode` (=old)."""
    return os.environ.get("HEARTH_GPU_DELTA_DECODE", "") != "old"


def head_lanes(S: int) -> int:
    return 8 if S * 8 <= 1024 else 4


def head_decode(dev, S: int) -> bool:
    """HEARTH_GPU_DELTA_DECODE=head, where the device runs workgroups of S x head_lanes threads."""
    return (os.environ.get("HEARTH_GPU_DELTA_DECODE", "") == "head"
            and S * head_lanes(S) <= int(dev.limits["max-compute-invocations-per-workgroup"]))


def head_step(ks, S: int):
    """step and gate in one pass, a workgroup of S x head_lanes threads a head (groups (1, hv, 1)).
    Bindings: conv (not normalized), proj, da, state M, out [hv, S] (gated), ssm_norm [S]."""
    return ks.get("delta_step.wgsl", ["r", "r", "r", "rw", "rw", "r"], DELTA_FIELDS, PASS="head", S=S,
                  LANES=step_lanes(S), HL=head_lanes(S))


def step_lanes(S: int) -> int:
    return 32 if S % 32 == 0 else 8


def step(ks, S: int):
    """One token's update, its state rows spread over workgroups (delta_step.wgsl). Bindings: conv
    (not normalized), proj, da, state M, out [hv, S] (o before its norm and gate: then `gate`)."""
    return ks.get("delta_step.wgsl", ["r", "r", "r", "rw", "rw"], DELTA_FIELDS, PASS="step", S=S,
                  LANES=step_lanes(S))


def fuse_conv() -> bool:
    """Whether a decoded token's conv runs inside step_conv (each workgroup the channels it reads) and
    its state update inside gate_shift: two dispatches less a layer than conv, step, gate
    (HEARTH_GPU_DELTA_FUSE=0 keeps the conv pass)."""
    return os.environ.get("HEARTH_GPU_DELTA_FUSE", "") != "0"


def gate_in_out() -> bool:
    """Whether a decoded token's gate (and, with fuse_conv, the conv state's update) runs inside the
    ssm_out matvec as it reads o (ops.matvec gated): no gate pass (HEARTH_GPU_DELTA_GATE=0 keeps it)."""
    return os.environ.get("HEARTH_GPU_DELTA_GATE", "") != "0"


def step_conv(ks, S: int, d_conv: int):
    """step with the conv + SiLU of its channels computed in it from the carried state (only read).
    Bindings: proj, da, state M, out [hv, S] (before the gate), conv state, conv weights [ch, d_conv].
    Groups: step_groups. Then gate_shift."""
    return ks.get("delta_step.wgsl", ["r", "r", "rw", "rw", "r", "r"], DELTA_FIELDS, PASS="step", S=S,
                  LANES=step_lanes(S), CONV=True, KM1=d_conv - 1)


def gate_shift(ks, S: int, d_conv: int):
    """gate for one token, with the conv state moved on by proj's conv input (after step_conv).
    Bindings: o [hv, S], proj, ssm_norm [S], conv state. Groups (1, hv, 1)."""
    return ks.get("delta_step.wgsl", ["rw", "r", "r", "rw"], DELTA_FIELDS, PASS="gate", S=S, LANES=step_lanes(S),
                  SHIFT=True, KM1=d_conv - 1)


def step_groups(S: int, hv: int):
    """256 // lanes rows a workgroup: 16 workgroups a head of 128 (512 on Qwen3.5-4B's 32 heads)."""
    return -(-S // (256 // step_lanes(S))), hv, 1


def gate(ks, S: int):
    """RMSNorm(o per head) * ssm_norm * silu(z), in place, a workgroup a (token, head). Bindings:
    o [n, hv, S], proj, ssm_norm [S]. Groups (n, hv, 1)."""
    return ks.get("delta_step.wgsl", ["rw", "r", "r"], DELTA_FIELDS, PASS="gate", S=S, LANES=step_lanes(S))


def prep(ks, S: int):
    """Bindings: conv, proj, da, gb [n, hv, 2], mat [chunks, hv, C, C]."""
    return ks.get("delta_net.wgsl", ["r", "r", "r", "rw", "rw"], DELTA_FIELDS, PASS="prep", S=S, C=CHUNK)


def prep_groups(n: int, hv: int):
    return -(-n // CHUNK), hv, 1


def scan_block(S: int) -> int:
    """Value dims a scan workgroup keeps in workgroup memory ([S, VB] of the state and [C, VB] of
    U: 12.5 KB at S 128, under WebGPU's guaranteed 16 KB)."""
    return 16 if S <= 128 and S % 16 == 0 else 8


def scan(ks, S: int):
    """Bindings: conv, gb, mat, state M, out [n, hv, S]."""
    return ks.get("delta_net.wgsl", ["r", "r", "r", "rw", "rw"], DELTA_FIELDS, PASS="scan", S=S, C=CHUNK,
                  VB=scan_block(S))


def scan_groups(S: int, hv: int):
    return S // scan_block(S), hv, 1


def gram(ks, S: int):
    """solve's and scan_u's chunk matrices (A^T above, L below the diagonal) and gb, as a tiled
    product. Bindings: conv, proj, da, gb [n, hv, 2], mat [chunks, hv, C, C]. Groups: prep_groups."""
    return ks.get("delta_chunk.wgsl", ["r", "r", "r", "rw", "rw"], DELTA_FIELDS, PASS="gram", S=S, C=CHUNK)


def solve_scan() -> bool:
    """Whether prefill takes the solve out of the sequential scan (solve + scan_u, the default)."""
    return os.environ.get("HEARTH_GPU_DELTA_SCAN", "") != "old"


def solve(ks, S: int):
    """The chunks' triangular systems, all at once. Bindings: conv, gb, mat, wt, qt (both
    [chunks, hv, S, C]: W^T and the scaled Q^T, tw_floats), u [n, hv, S] (U0). One thread per
    right-hand column: 2 S of them per (chunk, head)."""
    return ks.get("delta_chunk.wgsl", ["r", "r", "r", "rw", "rw", "rw"], DELTA_FIELDS, PASS="solve", S=S, C=CHUNK,
                  U=scan_unroll())


def tw_floats(n: int, hv: int, S: int) -> int:
    """float32 values of each of solve's transposed outputs for n tokens."""
    return -(-n // CHUNK) * hv * S * CHUNK


def solve_groups(n: int, S: int, hv: int):
    return -(-2 * S // 64), -(-n // CHUNK), hv


def scan_u_block(S: int) -> int:
    """Value dims a scan_u workgroup takes: 4 gives S / 4 x hv workgroups (1,024 on Qwen3.5-4B's
    32 heads of 128), each reading its chunks' W and Q again: on the H100 its 24 layers took 35 ms of a
    2,048-token chunk against 45 with 8 (both with 8 loads in flight, scan_unroll).
    HEARTH_GPU_DELTA_VB=8 or 16 (dividing S) trades workgroups for fewer repeated reads."""
    vb = int(os.environ.get("HEARTH_GPU_DELTA_VB", "4"))
    return vb if vb in (4, 8, 16) and S % vb == 0 else (4 if S % 4 == 0 else 8)


def scan_unroll() -> int:
    """Loads scan_u issues before their products (state rows of W and Q, tokens of A and K), and solve
    of a row of L (at least 4): their loops are bound by load latency, a workgroup a few warps.
    HEARTH_GPU_DELTA_UNROLL=1: a load at a time in scan_u, 4 in solve."""
    u = int(os.environ.get("HEARTH_GPU_DELTA_UNROLL", "8"))
    return u if u in (1, 2, 4, 8, 16) else 8


def scan_u(ks, S: int):
    """Bindings: conv, gb, mat, wt, qt, state M, u (U0 in, the delta rule's output o out)."""
    return ks.get("delta_chunk.wgsl", ["r", "r", "r", "r", "r", "rw", "rw"], DELTA_FIELDS, PASS="scan", S=S, C=CHUNK,
                  VB=scan_u_block(S), U=scan_unroll())


def scan_u_groups(S: int, hv: int):
    return S // scan_u_block(S), hv, 1


def mat_floats(n: int, hv: int) -> int:
    """float32 values of the prep pass's matrices for n tokens."""
    return -(-n // CHUNK) * hv * CHUNK * CHUNK


def norm_silu(ks):
    """Bindings: o [n, hv, S] (in place), proj (z at z_off, row stride ldp), norm weight [S]."""
    return ks.get("gated_out.wgsl", ["rw", "r", "r"], DELTA_FIELDS, PASS="norm_silu")


def sigmoid_gate(ks):
    """Bindings: y [n, ch] (in place), gate [n, ch] at float offset z_off."""
    return ks.get("gated_out.wgsl", ["rw", "r"], DELTA_FIELDS, PASS="sigmoid")


def gate_in_attention() -> bool:
    """Whether decode attention applies Qwen3.5's sigmoid gate as it writes its output (ops.attn_split /
    attn_combine gate_off; HEARTH_GPU_HYBRID_ATTN_GATE=0: the sigmoid pass after it)."""
    return os.environ.get("HEARTH_GPU_HYBRID_ATTN_GATE", "") != "0"


def threads_groups(count: int):
    gx, gy = grid(-(-count // 64))
    return gx, gy, 1
