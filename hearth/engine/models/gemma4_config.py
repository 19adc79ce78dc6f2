"""Gemma 4's own hyper-parameters (llama.cpp: llama_model_gemma4::load_arch_hparams), checked: a
missing or inconsistent one is an UnsupportedModelError naming its key. Gemma 4's head sizes,
RoPE and sometimes head counts and FFN widths differ per layer, so they are read here, per layer,
instead of as the plain decoder's single values."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedModelError
from .qwen35_config import MoeConfig


@dataclass(frozen=True)
class Gemma4Config:
    swa_layers: tuple[bool, ...]     # attention.sliding_window_pattern: True = sliding window
    window: int                      # attention.sliding_window
    head_dim_swa: int                # attention.key_length_swa (sliding layers); key_length (full)
    n_rot_swa: int                   # rope.dimension_count_swa
    rope_base_swa: float             # rope.freq_base_swa
    n_head_kv: tuple[int, ...]       # per layer
    n_ff: tuple[int, ...]            # per layer
    n_embd_per_layer: int            # embedding_length_per_layer_input (0: no per-layer inputs)
    n_kv_layers: int                 # layers from this one on reuse earlier layers' K/V (shared_kv_layers)
    moe: MoeConfig | None = None     # the 26B-A4B shape: layers with ffn_gate_inp (gemma4_moe.py)
    recurrent: bool = False

    def kv_source(self, layer: int) -> int:
        """The layer whose K/V `layer` attends to: itself, or for a KV-sharing layer the last layer
        of its kind (sliding or full) that has K/V (llama.cpp: n_layer_kv_from_start - 2 or - 1)."""
        if layer < self.n_kv_layers:
            return layer
        return self.n_kv_layers - (2 if self.swa_layers[layer] else 1)


def per_layer(g, key: str, n_layer: int, default=None, lo: int = 1, hi: int = 1 << 20) -> tuple[int, ...]:
    """A per-layer array or one scalar for every layer, each within [lo, hi]."""
    name = g.path.name
    v = g.metadata.get(key, default)
    if v is None:
        raise UnsupportedModelError(f"{name}: metadata {key} is missing")
    a = np.asarray(v).reshape(-1)
    if a.size == 1:
        a = np.repeat(a, n_layer)
    if a.size < n_layer or not np.all((a[:n_layer] >= lo) & (a[:n_layer] <= hi)):
        raise UnsupportedModelError(f"{name}: metadata {key} must give one value in [{lo}, {hi}] for each of "
                                    f"the {n_layer} layers (has {a.tolist()[:8]})")
    return tuple(int(x) for x in a[:n_layer])


def read_gemma4(g, raw_arch: str, n_layer: int, head_dim: int, need, opt) -> Gemma4Config:
    name = g.path.name
    moe = None
    if any(t.endswith("ffn_gate_inp.weight") for t in g.tensors):
        n_expert = need("expert_count", 1, 1 << 12)
        n_ff_exp = per_layer(g, f"{raw_arch}.expert_feed_forward_length", n_layer)
        if len(set(n_ff_exp)) > 1:
            raise UnsupportedModelError(f"{name}: metadata {raw_arch}.expert_feed_forward_length varies per layer, "
                                        "which Hearth cannot run yet")
        moe = MoeConfig(n_expert=n_expert, n_used=need("expert_used_count", 1, n_expert), n_ff_exp=n_ff_exp[0],
                        n_ff_shexp=0)
    key = f"{raw_arch}.attention.sliding_window_pattern"
    pat = g.metadata.get(key)
    if pat is None:
        raise UnsupportedModelError(f"{name}: metadata {key} is missing")
    pat = np.asarray(pat).reshape(-1)
    if pat.size < n_layer:
        raise UnsupportedModelError(f"{name}: metadata {key} has {pat.size} values for {n_layer} layers")
    swa = tuple(bool(x) for x in pat[:n_layer])
    hd_swa = need("attention.key_length_swa", 1, 1024)
    if opt("attention.value_length_swa", hd_swa, 1, 1024) != hd_swa:
        raise UnsupportedModelError(f"{name}: metadata {raw_arch}.attention.value_length_swa differs from key_length_swa")
    shared = opt("attention.shared_kv_layers", 0, 0, n_layer)
    n_kv_layers = n_layer - shared
    if shared and (n_kv_layers < 2 or swa[n_kv_layers - 2] is not True or swa[n_kv_layers - 1] is not False):
        raise UnsupportedModelError(
            f"{name}: metadata {raw_arch}.attention.shared_kv_layers {shared} leaves no sliding and full layer "
            "with K/V right before the sharing layers, a layer pattern Hearth cannot run")
    return Gemma4Config(
        swa_layers=swa,
        window=need("attention.sliding_window", 1, 1 << 24),
        head_dim_swa=hd_swa,
        n_rot_swa=opt("rope.dimension_count_swa", hd_swa, 2, hd_swa),
        rope_base_swa=float(opt("rope.freq_base_swa", 10000.0, 1e-3, 1e12)),
        n_head_kv=per_layer(g, f"{raw_arch}.attention.head_count_kv", n_layer, hi=1024),
        n_ff=per_layer(g, f"{raw_arch}.feed_forward_length", n_layer),
        n_embd_per_layer=need("embedding_length_per_layer_input", 0, 1 << 16),
        n_kv_layers=n_kv_layers,
        moe=moe,
    )
