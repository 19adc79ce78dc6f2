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
from .dense_config import DENSE_ARCHS, config_fields as dense_fields
from .moe_config import MOE_ARCHS, config_fields as moe_fields

# Architectures and the llama.cpp rotation style they use. NeoX rotates pairs (i, i + d/2);
# "normal" rotates adjacent pairs (2i, 2i + 1) (llama.cpp's converter permutes llama's q/k rows
# so that the adjacent-pair form is right for it).
SUPPORTED_ARCHS = {"llama": "normal", "qwen2": "neox", "qwen3": "neox", "gemma3": "neox",
                   "qwen3moe": "neox", "gpt-oss": "neox", **DENSE_ARCHS}
# Other names for the same computation (mlx-lm keeps a table like this).
ARCH_ALIASES = {"mistral": "llama"}

ROPE_SCALINGS = ("none", "linear", "yarn")
YARN_LOG_MUL_ARCHS = ("mistral3",)


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
    # Mixture of experts (qwen3moe, gpt-oss; moe_config.py reads and checks them)
    n_expert: int = 0            # 0: a dense FFN
    n_expert_used: int = 0       # top k
    n_ff_exp: int = 0            # one expert's FFN width
    expert_gating: str = ""      # "softmax" (over all experts) or "softmax_weight" (over the top k)
    expert_weights_norm: bool = False   # the top k's weights renormalised to sum 1
    attn_sinks: bool = False     # one learned logit per head joins each softmax (gpt-oss)
    # Newer dense families (dense_config.py reads them)
    nope_layers: tuple[bool, ...] = ()   # layers that rotate nothing (smollm3)
    rope_orig_ctx: int = 0       # a context above this takes rope_factors_long, else _short (phi3)
    attn_temp_scale: float = 0.0  # q times 1 + s ln(floor(pos / attn_temp_floor) + 1) (mistral3)
    attn_temp_floor: int = 0
    cpu_only: str = ""           # why the GPU backend cannot run this model ("" : it can)

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

        def need(suffix, lo=1, hi=None):
            v = g.metadata.get(f"{raw_arch}.{suffix}")
            if v is None:
                raise UnsupportedModelError(f"{name}: metadata {raw_arch}.{suffix} is missing")
            return _checked(v, name, f"{raw_arch}.{suffix}", lo, hi)

        def opt(suffix, default, lo=None, hi=None):
            v = g.metadata.get(f"{raw_arch}.{suffix}")
            return default if v is None else _checked(v, name, f"{raw_arch}.{suffix}", lo, hi)

        n_embd = need("embedding_length", 1, MAX_WIDTH)
        n_layer = need("block_count", 1, MAX_LAYERS)
        n_head = need("attention.head_count", 1, MAX_HEADS)
        n_head_kv = opt("attention.head_count_kv", n_head, 1, n_head)
        head_dim = opt("attention.key_length", None, 1, MAX_HEAD_DIM)
        if head_dim is None:
            if n_embd % n_head:
                raise UnsupportedModelError(f"{name}: {raw_arch}.embedding_length {n_embd} does not split into "
                                            f"{n_head} heads ({raw_arch}.attention.head_count)")
            head_dim = n_embd // n_head
        head_dim_v = opt("attention.value_length", head_dim, 1, MAX_HEAD_DIM)
        if head_dim_v != head_dim:
            raise UnsupportedModelError(f"{name}: key_length {head_dim} != value_length {head_dim_v}")
        if n_head % n_head_kv:
            raise UnsupportedModelError(f"{name}: {n_head} heads is not a multiple of {n_head_kv} KV heads")
        emb = g.tensors.get("token_embd.weight")
        if emb is None:
            raise UnsupportedModelError(f"{name}: tensor token_embd.weight is missing")
        if len(emb.shape) != 2 or emb.shape[0] != n_embd or not 1 <= emb.shape[1] <= MAX_VOCAB:
            raise UnsupportedModelError(f"{name}: tensor token_embd.weight has shape {list(emb.shape)}; "
                                        f"expected [{n_embd} ({raw_arch}.embedding_length), n_vocab]")
        n_vocab = int(emb.shape[1])

        cfg = dict(
            arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
            n_head_kv=n_head_kv, head_dim=head_dim, head_dim_v=head_dim_v,
            n_ff=opt("feed_forward_length", 0, 0, MAX_FF) if arch in MOE_ARCHS else need("feed_forward_length", 1, MAX_FF),
            rms_eps=float(opt("attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0)),
            context_length=opt("context_length", 4096, 1, MAX_CONTEXT),
            rope_base=float(opt("rope.freq_base", 10000.0, 1e-3, 1e12)),
            n_rot=opt("rope.dimension_count", head_dim, 0, head_dim),
            rope_neox=SUPPORTED_ARCHS[arch] == "neox",
            rope_scaling=_rope_scaling(g, raw_arch, name),
            tied_output="output.weight" not in g.tensors,
        )
        if cfg["n_rot"] > head_dim or cfg["n_rot"] % 2:
            raise UnsupportedModelError(f"{name}: rope.dimension_count {cfg['n_rot']} does not fit head dim {head_dim}")
        if arch == "gemma3":
            cfg.update(_gemma3_flags(g, raw_arch, n_embd, n_head, n_layer, head_dim, opt))
        if arch in MOE_ARCHS:
            cfg.update(moe_fields(g, raw_arch, opt, cfg))
        if arch in DENSE_ARCHS:
            cfg.update(dense_fields(g, raw_arch, opt, cfg))
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
    window = opt("attention.sliding_window", 0, 0, MAX_CONTEXT)
    pattern = 6
    swa = tuple(window > 0 and (il % pattern) < pattern - 1 for il in range(n_layer))
    scale = 1.0 / math.sqrt(n_embd / n_head) if n_layer == 62 else 1.0 / math.sqrt(head_dim)
    return dict(
        rope_base_swa=float(opt("rope.freq_base_swa", 10000.0, 1e-3, 1e12)),
        sliding_window=window, swa_layers=swa,
        embed_scale=math.sqrt(n_embd), post_norms=True, activation="gelu_tanh",
        final_softcap=float(opt("final_logit_softcapping", 0.0, 0.0, 1e6)), attn_scale=scale,
    )


def _rope_scaling(g, raw_arch: str, name: str) -> RopeScaling:
    md = g.metadata
    # llama.cpp multiplies cos and sin by rope.scaling.attn_factor whatever the scaling (phi3 sets it).
    attn = float(_scalar(md.get(f"{raw_arch}.rope.scaling.attn_factor", 1.0), f"{name}: rope.scaling.attn_factor"))
    if not 0 < attn < 1e3:
        raise UnsupportedModelError(f"{name}: metadata {raw_arch}.rope.scaling.attn_factor is {attn}; it must be positive")
    kind = md.get(f"{raw_arch}.rope.scaling.type")
    factor = md.get(f"{raw_arch}.rope.scaling.factor")
    if kind is None and md.get(f"{raw_arch}.rope.scale_linear") is not None:
        kind, factor = "linear", md[f"{raw_arch}.rope.scale_linear"]
    if kind is None or kind == "none":
        return RopeScaling(attn_factor=attn)
    if kind not in ROPE_SCALINGS:
        raise UnsupportedModelError(
            f"{name}: RoPE scaling '{kind}' ({raw_arch}.rope.scaling.type) is not supported "
            f"(supported: none, linear, yarn; Llama 3 scaling comes as the rope_freqs tensor)")
    factor = float(_scalar(factor, f"{name}: rope.scaling.factor")) if factor is not None else 1.0
    if factor <= 0:
        raise UnsupportedModelError(f"{name}: rope.scaling.factor {factor} is not positive")
    if factor == 1.0:
        return RopeScaling(attn_factor=attn)
    orig = int(md.get(f"{raw_arch}.rope.scaling.original_context_length", md.get(f"{raw_arch}.context_length", 0)))
    if kind == "linear":
        return RopeScaling("linear", factor, orig, attn_factor=attn)
    # YaRN's log multiplier m (mscale_all_dim), which llama.cpp reads for mistral3 only: its attention
    # factor becomes (1 + 0.1 ln f) / (1 + 0.1 m ln f) in all; Rope multiplies by the numerator itself.
    unsupported_keys = ["rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"]
    if raw_arch in YARN_LOG_MUL_ARCHS:
        log_mul = float(_scalar(md.get(f"{raw_arch}.rope.scaling.yarn_log_multiplier", 0.0), f"{name}: yarn_log_multiplier"))
        if not 0 <= log_mul < 1e3:
            raise UnsupportedModelError(f"{name}: metadata {raw_arch}.rope.scaling.yarn_log_multiplier is {log_mul}")
        attn /= 1.0 + 0.1 * log_mul * math.log(factor)
    else:
        unsupported_keys.append("rope.scaling.yarn_log_multiplier")
    for unsupported in unsupported_keys:
        if md.get(f"{raw_arch}.{unsupported}") not in (None, 0, 0.0, 1.0):
            raise UnsupportedModelError(f"{name}: YaRN variant with {raw_arch}.{unsupported} is not supported")
    return RopeScaling("yarn", factor, orig,
                       beta_fast=float(md.get(f"{raw_arch}.rope.scaling.yarn_beta_fast", 32.0)),
                       beta_slow=float(md.get(f"{raw_arch}.rope.scaling.yarn_beta_slow", 1.0)),
                       ext_factor=1.0, attn_factor=attn)


# Bounds on hyper-parameters: far beyond any released model, tight enough that a damaged or hostile
# file fails here with its key named rather than as a division by zero or a huge allocation later.
MAX_WIDTH = 1 << 16
MAX_LAYERS = 1024
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_FF = 1 << 20
MAX_VOCAB = 1 << 22
MAX_CONTEXT = 1 << 24


def _checked(v, name: str, key: str, lo=None, hi=None):
    """A metadata value as int or float, within [lo, hi]; an UnsupportedModelError naming `key` if not.
    Integer bounds want a whole number; float bounds a finite number."""
    v = _scalar(v, f"{name}: metadata {key}")
    want_int = isinstance(lo, int) and isinstance(hi, int)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (want_int and v != int(v)):
        raise UnsupportedModelError(f"{name}: metadata {key} is {v!r}, not {'a whole number' if want_int else 'a number'}")
    if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        bounds = f"between {lo:g} and {hi:g}" if hi is not None else f"at least {lo:g}" if lo is not None else "finite"
        raise UnsupportedModelError(f"{name}: metadata {key} is {v!r}; it must be {bounds}")
    return int(v) if want_int else v


def _scalar(v, what: str):
    if isinstance(v, np.ndarray):
        # Some converters write per-layer arrays (e.g. head counts); we only run uniform models.
        if v.size and np.all(v == v.flat[0]):
            return v.flat[0].item()
        raise UnsupportedModelError(f"{what} varies per layer ({v.tolist()[:8]}...), which Hearth cannot run")
    return v
