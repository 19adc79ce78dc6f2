"""Qwen3.5's own hyper-parameters (llama.cpp: llama_model_qwen35::load_arch_hparams), checked:
a missing or inconsistent one is an UnsupportedModelError naming its key."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedModelError

MAX_CONV_KERNEL = 64
MAX_STATE = 1024
MAX_SSM_HEADS = 1024


@dataclass(frozen=True)
class MoeConfig:
    n_expert: int                # expert_count
    n_used: int                  # expert_used_count: the top-k of the router's softmax, renormalised
    n_ff_exp: int                # expert_feed_forward_length
    n_ff_shexp: int              # expert_shared_feed_forward_length (the shared expert)


@dataclass(frozen=True)
class Qwen35Config:
    d_conv: int                  # ssm.conv_kernel: the causal convolution's kernel length
    d_state: int                 # ssm.state_size: head dim of q, k and v in the linear layers (S)
    n_k_heads: int               # ssm.group_count: q/k heads (H_k)
    n_v_heads: int               # ssm.time_step_rank: value heads (H_v), a multiple of H_k
    recurrent_layers: tuple[bool, ...]   # per trunk layer: Gated DeltaNet (True) or gated attention
    rope_sections: tuple[int, ...]       # IMROPE sections (all equal positions for text)
    n_mtp_layers: int = 0        # nextn_predict_layers: read, not run (see qwen35.py)
    moe: MoeConfig | None = None # qwen35moe's FFN
    recurrent: bool = True

    @property
    def key_dim(self) -> int:
        return self.n_k_heads * self.d_state

    @property
    def value_dim(self) -> int:
        return self.n_v_heads * self.d_state

    @property
    def conv_channels(self) -> int:
        """q, k and v side by side: the convolution's channels."""
        return 2 * self.key_dim + self.value_dim

    @property
    def attn_layers(self) -> list[int]:
        return [i for i, r in enumerate(self.recurrent_layers) if not r]


def read_qwen35(g, raw_arch: str, n_layer: int, need, opt) -> Qwen35Config:
    """`need(suffix, lo, hi)` / `opt(suffix, default, lo, hi)`: config.py's checked readers."""
    name = g.path.name
    d_conv = need("ssm.conv_kernel", 2, MAX_CONV_KERNEL)
    d_state = need("ssm.state_size", 1, MAX_STATE)
    n_group = need("ssm.group_count", 1, MAX_SSM_HEADS)
    dt_rank = need("ssm.time_step_rank", 1, MAX_SSM_HEADS)
    inner = need("ssm.inner_size", 1, MAX_STATE * MAX_SSM_HEADS)
    if dt_rank % n_group:
        raise UnsupportedModelError(
            f"{name}: metadata {raw_arch}.ssm.time_step_rank ({dt_rank} value heads) is not a multiple of "
            f"{raw_arch}.ssm.group_count ({n_group} key heads)")
    if inner != dt_rank * d_state:
        raise UnsupportedModelError(
            f"{name}: metadata {raw_arch}.ssm.inner_size is {inner}, but {raw_arch}.ssm.time_step_rank x "
            f"{raw_arch}.ssm.state_size is {dt_rank * d_state}")
    pattern = _layer_pattern(g, raw_arch, n_layer, opt)
    sections = g.metadata.get(f"{raw_arch}.rope.dimension_sections")
    sections = tuple(int(x) for x in np.asarray(sections).reshape(-1)) if sections is not None else (0, 0, 0, 0)
    moe = None
    if raw_arch == "qwen35moe":
        n_expert = need("expert_count", 1, 1 << 12)
        n_ff_exp = need("expert_feed_forward_length", 1, 1 << 20)
        moe = MoeConfig(n_expert=n_expert, n_used=need("expert_used_count", 1, n_expert), n_ff_exp=n_ff_exp,
                        n_ff_shexp=opt("expert_shared_feed_forward_length", n_ff_exp, 1, 1 << 20))
    return Qwen35Config(d_conv=d_conv, d_state=d_state, n_k_heads=n_group, n_v_heads=dt_rank,
                        recurrent_layers=pattern, rope_sections=sections,
                        n_mtp_layers=opt("nextn_predict_layers", 0, 0, 1 << 10), moe=moe)


def _layer_pattern(g, raw_arch: str, n_layer: int, opt) -> tuple[bool, ...]:
    """Which trunk layers are recurrent: attention.recurrent_layers (one bool per layer) when the
    file has it, else every layer but each full_attention_interval-th (default 4)."""
    name = g.path.name
    key = f"{raw_arch}.attention.recurrent_layers"
    arr = g.metadata.get(key)
    if arr is not None:
        a = np.asarray(arr).reshape(-1)
        if a.size < n_layer or not np.isin(a, (0, 1)).all():
            raise UnsupportedModelError(f"{name}: metadata {key} must hold a 0/1 flag for each of the "
                                        f"{n_layer} layers (has {a.size} values)")
        pattern = tuple(bool(x) for x in a[:n_layer])
    else:
        interval = opt("full_attention_interval", 4, 1, 1 << 16)
        pattern = tuple((i + 1) % interval != 0 for i in range(n_layer))
    return pattern
