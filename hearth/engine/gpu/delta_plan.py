"""The Gated DeltaNet part of a hybrid layer's plan (GpuHybridBackend's `_linear_tail`): from the
in-projections' row proj [n, ch | vd (z) | hv (beta) | hv (alpha)] to the gated output o [n, hv, S]
that ssm_out reads. Which kernels (delta_ops.py), with the older forms kept for A/B runs:

    decode    step_conv (a head's state rows over 16 workgroups, each computing the conv of the
              channels it reads); the gate and the conv state's update inside ssm_out's matvec
              HEARTH_GPU_DELTA_GATE=0: step_conv, gate_shift (the gate, and the conv state moved on)
              HEARTH_GPU_DELTA_FUSE=0: conv, step (and the gate pass with HEARTH_GPU_DELTA_GATE=0)
              HEARTH_GPU_DELTA_DECODE=head: conv, head_step (step and gate, a 1,024-thread workgroup a head)
              HEARTH_GPU_DELTA_DECODE=old: conv, decode (norms, update and gate; a workgroup a head)
    prefill   conv_rows + conv_state (HEARTH_GPU_DELTA_CONV=old: the serial conv), l2norm, then
              gram, solve (every chunk's triangular system at once), scan_u (products only), gate
              HEARTH_GPU_DELTA_SCAN=old: prep, scan (the solve inside the sequential scan), norm_silu
"""

from __future__ import annotations

from . import delta_ops as D


def _conv(be, P, i: int, L: dict, decode: bool) -> None:
    hc, ks = be.cfg.hybrid, be.ks
    r = be.kv.recurrent_slot[i]
    bufs = [be.proj, be.convo, be.kv.conv[r], L["conv_w"]]
    if decode or not D.parallel_conv():
        P.add(D.conv(ks, hc.d_conv), bufs, D.conv_groups(hc.conv_channels), f"{i}.conv", **be._dp())
        return
    P.add(D.conv_rows(ks, hc.d_conv), bufs, lambda n, kv: D.conv_rows_groups(n, hc.conv_channels), f"{i}.conv",
          **be._dp())
    P.add(D.conv_state(ks, hc.d_conv), bufs, D.conv_groups(hc.conv_channels), f"{i}.conv", **be._dp())


def add_decode(be, P, i: int, L: dict) -> None:
    hc, ks = be.cfg.hybrid, be.ks
    S, hv = hc.d_state, hc.n_v_heads
    M = be.kv.delta[be.kv.recurrent_slot[i]]
    fused = _split_step(be, S) and D.fuse_conv()
    if not fused:
        _conv(be, P, i, L, decode=True)
    if not D.split_decode():
        P.add(D.decode(ks, S), [be.convo, be.proj, L["da"], M, be.o, L["ssm_norm"]], (1, hv, 1), f"{i}.delta",
              **be._dp())
        return
    if D.head_decode(be.dev, S):
        P.add(D.head_step(ks, S), [be.convo, be.proj, L["da"], M, be.o, L["ssm_norm"]], (1, hv, 1), f"{i}.delta",
              **be._dp())
        return
    cst = be.kv.conv[be.kv.recurrent_slot[i]]
    if fused:
        P.add(D.step_conv(ks, S, hc.d_conv), [be.proj, L["da"], M, be.o, cst, L["conv_w"]], D.step_groups(S, hv),
              f"{i}.delta", **be._dp())
    else:
        P.add(D.step(ks, S), [be.convo, be.proj, L["da"], M, be.o], D.step_groups(S, hv), f"{i}.delta", **be._dp())
    if decode_gated_out(be, S)[0]:
        return                  # in ssm_out's matvec
    if fused:
        P.add(D.gate_shift(ks, S, hc.d_conv), [be.o, be.proj, L["ssm_norm"], cst], (1, hv, 1), f"{i}.gate",
              **be._dp())
    else:
        P.add(D.gate(ks, S), [be.o, be.proj, L["ssm_norm"]], (1, hv, 1), f"{i}.gate", **be._dp())


def _split_step(be, S: int) -> bool:
    """Whether a decoded token's delta rule is the step over 16 workgroups a head (not decode / head_step)."""
    return D.split_decode() and not D.head_decode(be.dev, S)


def decode_gated_out(be, S: int) -> tuple[bool, bool]:
    """(whether ssm_out's matvec gates o itself, whether it also moves the conv state on): add_decode's
    choice for a decoded token."""
    gated = _split_step(be, S) and D.gate_in_out() and be.cfg.hybrid.n_v_heads <= 256     # ops.matvec's bound
    return gated, gated and D.fuse_conv()


def add_prefill(be, P, i: int, L: dict) -> None:
    hc, ks = be.cfg.hybrid, be.ks
    S, hv, hk = hc.d_state, hc.n_v_heads, hc.n_k_heads
    M = be.kv.delta[be.kv.recurrent_slot[i]]
    _conv(be, P, i, L, decode=False)
    P.add(D.l2norm(ks, S), [be.convo], lambda n, kv: D.l2norm_groups(n, hk), f"{i}.l2norm", **be._dp())
    first = [be.convo, be.proj, L["da"], be.gb, be.mat]
    if not D.solve_scan():
        P.add(D.prep(ks, S), first, lambda n, kv: D.prep_groups(n, hv), f"{i}.delta.prep", **be._dp())
        P.add(D.scan(ks, S), [be.convo, be.gb, be.mat, M, be.o], D.scan_groups(S, hv), f"{i}.delta.scan", **be._dp())
        P.add(D.norm_silu(ks), [be.o, be.proj, L["ssm_norm"]], lambda n, kv: D.threads_groups(n * hv), f"{i}.gate",
              **be._dp())
        return
    P.add(D.gram(ks, S), first, lambda n, kv: D.prep_groups(n, hv), f"{i}.delta.prep", **be._dp())
    P.add(D.solve(ks, S), [be.convo, be.gb, be.mat, be.delta_wt, be.delta_qt, be.o],
          lambda n, kv: D.solve_groups(n, S, hv), f"{i}.delta.solve", **be._dp())
    P.add(D.scan_u(ks, S), [be.convo, be.gb, be.mat, be.delta_wt, be.delta_qt, M, be.o], D.scan_u_groups(S, hv),
          f"{i}.delta.scan", **be._dp())
    P.add(D.gate(ks, S), [be.o, be.proj, L["ssm_norm"]], lambda n, kv: (n, hv, 1), f"{i}.gate", **be._dp())
