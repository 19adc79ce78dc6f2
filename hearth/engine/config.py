"""Model hyper-parameters, read from GGUF metadata and checked.

`ModelConfig.from_gguf` reads what every architecture has (widths, heads, RoPE, context) and
then the architecture module's `config_fields` hook (engine/models/__init__.py: the contract)
for its own fields, such as Gemma 3's sliding windows. The forward passes (engine/models/, the
GPU backend) read only this object, never the metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import models
from .errors import UnsupportedModelError
from .models.moe_config import MOE_ARCHS

# Architectures and the llama.cpp rotation style they use, from the registry (engine/models/).
SUPPORTED_ARCHS = {name: a.rope for name, a in models.ARCHITECTURES.items()}
ARCH_ALIASES = models.ALIASES
# Architectures with hyper-parameters of their own (layer patterns, recurrent state), read by their
# module in engine/models/.
OWN_METADATA_ARCHS = ("qwen35", "qwen35moe", "gemma4")
# Those the GPU backend's plans have no layers for: Engine refuses backend="gpu" for them and "auto"
# picks the CPU (engine._make_backend). Every architecture has GPU plans now (qwen35/qwen35moe:
# gpu/hybrid.py; gemma4: gpu/gemma4.py and, with experts, gpu/gemma4_moe.py).
CPU_ONLY_ARCHS: tuple[str, ...] = ()

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
    # Set by an architecture's config_fields (engine/models/gemma3.py sets all of these)
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
    # Newer dense families (models/dense_config.py reads them)
    nope_layers: tuple[bool, ...] = ()   # layers that rotate nothing (smollm3)
    rope_orig_ctx: int = 0       # a context above this takes rope_factors_long, else _short (phi3)
    attn_temp_scale: float = 0.0  # q times 1 + s ln(floor(pos / attn_temp_floor) + 1) (mistral3)
    attn_temp_floor: int = 0
    cpu_only: str = ""           # why the GPU backend cannot run this model ("" : it can)
    # An architecture's own hyper-parameters beyond these (qwen35: its recurrent layers), read by
    # its module in engine/models/; None for the plain decoders.
    hybrid: object | None = None

    @property
    def recurrent(self) -> bool:
        """Whether the model keeps a recurrent state (truncation then costs a recompute)."""
        return bool(getattr(self.hybrid, "recurrent", False))


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
        if arch in ("qwen35", "qwen35moe"):   # block_count counts the multi-token-prediction layers too
            n_layer -= opt("nextn_predict_layers", 0, 0, n_layer - 1)
        n_head = need("attention.head_count", 1, MAX_HEADS)
        if arch == "gemma4":
            return _gemma4(cls, g, raw_arch, n_embd, n_layer, n_head, need, opt)
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
        n_vocab = _n_vocab(g, raw_arch, n_embd)

        cfg = dict(
            arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
            n_head_kv=n_head_kv, head_dim=head_dim, head_dim_v=head_dim_v,
            # MoE: every FFN is experts (their widths elsewhere); the dense width may be absent
            n_ff=opt("feed_forward_length", 0, 0, MAX_FF) if arch in MOE_ARCHS else
            opt("feed_forward_length", 1, 1, MAX_FF) if arch == "qwen35moe" else
            need("feed_forward_length", 1, MAX_FF),
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
        hook = getattr(models.module(arch), "config_fields", None)
        if hook is not None:
            cfg.update(hook(g, raw_arch, opt, cfg))
        if arch in ("qwen35", "qwen35moe"):
            from .models.qwen35_config import read_qwen35  # noqa: PLC0415  (models import this module)
            cfg["hybrid"] = read_qwen35(g, raw_arch, n_layer, need, opt)
        return cls(**cfg)


def _n_vocab(g, raw_arch: str, n_embd: int) -> int:
    name = g.path.name
    emb = g.tensors.get("token_embd.weight")
    if emb is None:
        raise UnsupportedModelError(f"{name}: tensor token_embd.weight is missing")
    if len(emb.shape) != 2 or emb.shape[0] != n_embd or not 1 <= emb.shape[1] <= MAX_VOCAB:
        raise UnsupportedModelError(f"{name}: tensor token_embd.weight has shape {list(emb.shape)}; "
                                    f"expected [{n_embd} ({raw_arch}.embedding_length), n_vocab]")
    return int(emb.shape[1])


def _gemma4(cls, g, raw_arch, n_embd, n_layer, n_head, need, opt) -> "ModelConfig":
    """Gemma 4 (engine/models/gemma4.py): per-layer head sizes, KV head counts and FFN widths are in
    `hybrid` (Gemma4Config); the fields here hold the full-attention layers' values, the widest FFN
    and the most KV heads."""
    from .models.gemma4_config import read_gemma4  # noqa: PLC0415  (models import this module)
    head_dim = need("attention.key_length", 1, MAX_HEAD_DIM)
    if opt("attention.value_length", head_dim, 1, MAX_HEAD_DIM) != head_dim:
        raise UnsupportedModelError(f"{g.path.name}: {raw_arch}.attention.value_length differs from key_length")
    hc = read_gemma4(g, raw_arch, n_layer, head_dim, need, opt)
    if any(n_head % k for k in hc.n_head_kv):
        raise UnsupportedModelError(f"{g.path.name}: {raw_arch}.attention.head_count_kv {list(hc.n_head_kv)} does "
                                    f"not divide {n_head} heads")
    return cls(
        arch="gemma4", n_vocab=_n_vocab(g, raw_arch, n_embd), n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        n_head_kv=max(hc.n_head_kv), head_dim=head_dim, head_dim_v=head_dim, n_ff=max(hc.n_ff),
        rms_eps=float(opt("attention.layer_norm_rms_epsilon", 1e-6, 0.0, 1.0)),
        context_length=opt("context_length", 4096, 1, MAX_CONTEXT),
        rope_base=float(opt("rope.freq_base", 10000.0, 1e-3, 1e12)),
        n_rot=opt("rope.dimension_count", head_dim, 2, head_dim), rope_neox=True,
        rope_base_swa=hc.rope_base_swa, sliding_window=hc.window, swa_layers=hc.swa_layers,
        embed_scale=math.sqrt(n_embd), post_norms=True, activation="gelu_tanh",
        final_softcap=float(opt("final_logit_softcapping", 0.0, 0.0, 1e6)), attn_scale=1.0,
        tied_output="output.weight" not in g.tensors, hybrid=hc)


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
