"""Model hyper-parameters and architecture flags, read from GGUF metadata.

One `ModelConfig` describes every supported architecture; the differences between families are
flags (`rope_neox`, `qk_norm`, `post_norms`, `activation`, ...) rather than separate config classes,
because the four families differ in a handful of places and otherwise share the whole decoder.
The forward passes in `engine/models/` read only this object, never the metadata.

Where llama.cpp hard-codes something per architecture (NeoX RoPE for qwen2/qwen3/gemma3, Gemma 3's
every-6th-layer global attention, its sliding-window RoPE base of 10,000, its attention scale),
this module does the same, with the reason next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import UnsupportedModelError

# Architectures and the llama.cpp rotation style they use. NeoX rotates pairs (i, i + d/2);
# "normal" rotates adjacent pairs (2i, 2i + 1) (llama.cpp's converter permutes llama's q/k rows
# so that the adjacent-pair form is right for it).
SUPPORTED_ARCHS = {"llama": "normal", "qwen2": "neox", "qwen3": "neox", "gemma3": "neox"}
# Other names for the same computation (mlx-lm keeps a table like this).
ARCH_ALIASES = {"mistral": "llama"}

ROPE_SCALINGS = ("none", "linear", "yarn")


@dataclass
class RopeScaling:
    """How positions are stretched beyond the trained context (llama.cpp's `rope.scaling.*`).

    `kind`: "none", "linear" (positions divided by `factor`) or "yarn" (ggml's rope_yarn with
    the ramp between `beta_fast` and `beta_slow`). Llama 3's scaling arrives as the `rope_freqs`
    tensor instead (per-frequency divisors), so it needs no kind here.
    """
    kind: str = "none"
    factor: float = 1.0
    orig_ctx: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    ext_factor: float = 0.0
    attn_factor: float = 1.0

    @property
    def freq_scale(self) -> float:
        return 1.0 / self.factor if self.kind != "none" else 1.0


@dataclass
class ModelConfig:
    arch: str                    # canonical architecture ("llama", "qwen2", "qwen3", "gemma3")
    n_vocab: int
    n_embd: int                  # model width d
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int                # per-head width of q and k
    head_dim_v: int              # per-head width of v
    n_ff: int
    rms_eps: float
    context_length: int          # trained context
    rope_base: float
    n_rot: int                   # rotated dims per head (the first n_rot; usually head_dim)
    rope_neox: bool
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    # Gemma 3 family
    rope_base_swa: float = 10000.0
    sliding_window: int = 0      # 0: every layer attends to the whole past
    swa_layers: tuple[bool, ...] = ()
    embed_scale: float = 1.0     # token embeddings are multiplied by this (Gemma: sqrt(d))
    post_norms: bool = False     # RMSNorm after attention and after the FFN, before the residual add
    activation: str = "silu"     # "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    final_softcap: float = 0.0   # logits = c * tanh(logits / c) when > 0
    attn_scale: float = 0.0      # multiplies q.k; 0 means 1/sqrt(head_dim)
    tied_output: bool = True     # the output matrix is token_embd

    def __post_init__(self):
        if not self.attn_scale:
            self.attn_scale = 1.0 / math.sqrt(self.head_dim)
        if not self.swa_layers:
            self.swa_layers = (False,) * self.n_layer

    @property
    def n_rep(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.n_head // self.n_head_kv

    def is_swa(self, layer: int) -> bool:
        return self.sliding_window > 0 and self.swa_layers[layer]

    @classmethod
    def from_gguf(cls, g) -> "ModelConfig":
        name = g.path.name
        raw_arch = g.architecture
        arch = ARCH_ALIASES.get(raw_arch, raw_arch)
        if arch not in SUPPORTED_ARCHS:
            raise UnsupportedModelError(
                f"{name}: architecture '{raw_arch or '(none)'}' is not supported by Hearth "
                f"(supported: {', '.join(sorted(SUPPORTED_ARCHS))})")

        def need(suffix):
            v = g.metadata.get(f"{raw_arch}.{suffix}")
            if v is None:
                raise UnsupportedModelError(f"{name}: metadata {raw_arch}.{suffix} is missing")
            return _scalar(v, f"{name}: metadata {raw_arch}.{suffix}")

        def opt(suffix, default):
            v = g.metadata.get(f"{raw_arch}.{suffix}")
            return default if v is None else _scalar(v, f"{name}: metadata {raw_arch}.{suffix}")

        n_embd = int(need("embedding_length"))
        n_layer = int(need("block_count"))
        n_head = int(need("attention.head_count"))
        n_head_kv = int(opt("attention.head_count_kv", n_head))
        head_dim = int(opt("attention.key_length", n_embd // n_head))
        head_dim_v = int(opt("attention.value_length", head_dim))
        if head_dim_v != head_dim:
            raise UnsupportedModelError(f"{name}: key_length {head_dim} != value_length {head_dim_v}")
        if n_head % n_head_kv:
            raise UnsupportedModelError(f"{name}: {n_head} heads is not a multiple of {n_head_kv} KV heads")
        emb = g.tensors.get("token_embd.weight")
        if emb is None:
            raise UnsupportedModelError(f"{name}: tensor token_embd.weight is missing")
        n_vocab = int(emb.shape[1])

        cfg = dict(
            arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
            n_head_kv=n_head_kv, head_dim=head_dim, head_dim_v=head_dim_v,
            n_ff=int(need("feed_forward_length")),
            rms_eps=float(opt("attention.layer_norm_rms_epsilon", 1e-5)),
            context_length=int(opt("context_length", 4096)),
            rope_base=float(opt("rope.freq_base", 10000.0)),
            n_rot=int(opt("rope.dimension_count", head_dim)),
            rope_neox=SUPPORTED_ARCHS[arch] == "neox",
            rope_scaling=_rope_scaling(g, raw_arch, name),
            tied_output="output.weight" not in g.tensors,
        )
        if cfg["n_rot"] > head_dim or cfg["n_rot"] % 2:
            raise UnsupportedModelError(f"{name}: rope.dimension_count {cfg['n_rot']} does not fit head dim {head_dim}")
        if arch == "gemma3":
            cfg.update(_gemma3_flags(g, raw_arch, n_embd, n_head, n_layer, head_dim, opt))
        return cls(**cfg)


def _gemma3_flags(g, raw_arch, n_embd, n_head, n_layer, head_dim, opt) -> dict:
    """Gemma 3 as llama.cpp runs it (llama-model.cpp, LLM_ARCH_GEMMA3):
    - embeddings scaled by sqrt(n_embd);
    - GeGLU with the tanh approximation of GELU;
    - RMSNorm after attention and after the FFN (post norms) besides the usual pre-norms. The
      converter stores Gemma's norm weights with the +1 already added, so they are used as is;
    - q and k RMSNorm per head;
    - sliding-window attention on 5 layers out of every 6 (layer il is global when il % 6 == 5),
      those layers rotating with their own base (rope.freq_base_swa, default 10,000) and no
      RoPE scaling;
    - q scaled by 1/sqrt(key_length), except the 27B model (62 layers) where it is
      1/sqrt(n_embd / n_head) (query_pre_attn_scalar in Google's config).
    """
    window = int(opt("attention.sliding_window", 0))
    pattern = 6
    swa = tuple(window > 0 and (il % pattern) < pattern - 1 for il in range(n_layer))
    scale = 1.0 / math.sqrt(n_embd / n_head) if n_layer == 62 else 1.0 / math.sqrt(head_dim)
    return dict(
        rope_base_swa=float(opt("rope.freq_base_swa", 10000.0)),
        sliding_window=window, swa_layers=swa,
        embed_scale=math.sqrt(n_embd), post_norms=True, activation="gelu_tanh",
        final_softcap=float(opt("final_logit_softcapping", 0.0)), attn_scale=scale,
    )


def _rope_scaling(g, raw_arch: str, name: str) -> RopeScaling:
    md = g.metadata
    kind = md.get(f"{raw_arch}.rope.scaling.type")
    factor = md.get(f"{raw_arch}.rope.scaling.factor")
    if kind is None and md.get(f"{raw_arch}.rope.scale_linear") is not None:
        kind, factor = "linear", md[f"{raw_arch}.rope.scale_linear"]
    if kind is None or kind == "none":
        return RopeScaling()
    if kind not in ROPE_SCALINGS:
        raise UnsupportedModelError(
            f"{name}: RoPE scaling '{kind}' ({raw_arch}.rope.scaling.type) is not supported "
            f"(supported: none, linear, yarn; Llama 3 scaling comes as the rope_freqs tensor)")
    factor = float(_scalar(factor, f"{name}: rope.scaling.factor")) if factor is not None else 1.0
    if factor <= 0:
        raise UnsupportedModelError(f"{name}: rope.scaling.factor {factor} is not positive")
    if factor == 1.0:
        return RopeScaling()
    orig = int(md.get(f"{raw_arch}.rope.scaling.original_context_length", md.get(f"{raw_arch}.context_length", 0)))
    if kind == "linear":
        return RopeScaling("linear", factor, orig)
    for unsupported in ("rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_ext_factor",
                        "rope.scaling.yarn_attn_factor"):
        if md.get(f"{raw_arch}.{unsupported}") not in (None, 0, 0.0, 1.0):
            raise UnsupportedModelError(f"{name}: YaRN variant with {raw_arch}.{unsupported} is not supported")
    return RopeScaling("yarn", factor, orig,
                       beta_fast=float(md.get(f"{raw_arch}.rope.scaling.yarn_beta_fast", 32.0)),
                       beta_slow=float(md.get(f"{raw_arch}.rope.scaling.yarn_beta_slow", 1.0)),
                       ext_factor=1.0, attn_factor=1.0)


def _scalar(v, what: str):
    if isinstance(v, np.ndarray):
        # Some converters write per-layer arrays (e.g. head counts); we only run uniform models.
        if v.size and np.all(v == v.flat[0]):
            return v.flat[0].item()
        raise UnsupportedModelError(f"{what} varies per layer ({v.tolist()[:8]}...), which Hearth cannot run")
    return v
