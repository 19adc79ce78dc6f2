"""Forward passes: one module per architecture over shared layers, found by GGUF architecture name.

The shape is mlx-lm's (`mlx_lm/models/llama.py`, `models/base.py`): a module per architecture,
shared pieces beside them, and a registry keyed by the name a GGUF file gives in
`general.architecture`, with an alias table for names that run the same computation.

    layers.py          numpy layers: RMSNorm, RoPE, attention, GLU activations (the references the
                       GPU kernels and compiled CPU layers are checked against)
    weights.py         matrices used from the file's blocks (`Matrices` of engine/cpu/linear.py)
    decoder.py         the shared pre-norm transformer: `Block` (one layer's tensors, optional
                       pieces None), `Decoder` (embed -> N x [attention, FFN] -> norm -> logits over a
                       KV cache, row-parallel), `RowRunner`
    compiled_layers.py which models decode a token through engine/cpu/decode_layer.py
    llama.py qwen2.py qwen3.py gemma3.py   the architectures

An architecture module provides (what `build_model` and `ModelConfig.from_gguf` call):

    Model(cfg: ModelConfig, g: GGUFFile)
        loads its weights by their GGUF names (`blk.{i}.attn_q.weight`, ...); raises
        UnsupportedModelError naming the file and tensor when one is missing or has a wrong shape.
      .forward(ids, pos, state, all_logits=False, par=None, logits=True, tail=None)
        int ids [n] at positions [pos, pos + n): writes what those tokens leave behind into
        `state` and returns float32 logits [n_vocab] of the last position ([n, n_vocab] with
        all_logits; None with logits=False). `par` spreads row ranges over threads (RowRunner).
      .make_state(n_ctx, kv_dtype) -> the state object `forward` writes: a `KVCache` for
        attention models (Decoder's default); an architecture with recurrent layers returns its
        own object with KVCache's interface (n_tokens, check_fits, truncate, read_prefix,
        write_prefix, nbytes) so Engine and prefix images keep working.
      .make_resident(progress), .set_int8(on), .int8_batches   (Decoder has them)
    config_fields(g, raw_arch, opt, base: dict) -> dict    (optional)
        the architecture's own ModelConfig fields, read from its metadata keys; `opt(suffix,
        default, lo, hi)` reads `{raw_arch}.{suffix}` checked against bounds; `base` holds the
        common fields already read (n_embd, n_layer, n_head, head_dim, ...).

Most architectures are `Decoder` with a few methods replaced (`_load_block`, `_embed`, `_act`);
one that is not (a recurrent layer, a mixture-of-experts FFN) subclasses it or writes its own
`Model` with the same methods. Adding one is a module here and one line in ARCHITECTURES
(`"qwen3moe": Arch("qwen3moe", "neox", model="Qwen3MoE")` where the class has another name).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Arch:
    module: str     # the module of this package that runs it
    rope: str       # llama.cpp's rotation: "normal" (adjacent pairs 2i, 2i + 1; its converter
                    # permutes llama's q/k rows for it) or "neox" (pairs i, i + d/2)
    model: str = "Model"    # the module's class that `build_model` makes


# GGUF general.architecture -> how Hearth runs it. One line per architecture.
ARCHITECTURES: dict[str, Arch] = {
    "llama": Arch("llama", "normal"),
    "qwen2": Arch("qwen2", "neox"),
    "qwen3": Arch("qwen3", "neox"),
    "gemma3": Arch("gemma3", "neox"),
    "qwen3moe": Arch("qwen3moe", "neox", model="Qwen3Moe"),
    "gpt-oss": Arch("gpt_oss", "neox", model="GptOss"),
    # qwen35's IMROPE equals NeoX on its rotated dims when every position component is the token's
    # position (text); qwen35.py
    "qwen35": Arch("qwen35", "neox", model="Qwen35"),
    "qwen35moe": Arch("qwen35moe", "neox", model="Qwen35Moe"),
    "gemma4": Arch("gemma4", "neox", model="Gemma4"),
    "smollm3": Arch("smollm3", "normal", model="SmolLM3"),
    "phi3": Arch("phi3", "neox", model="Phi3"),
    "mistral3": Arch("mistral3", "normal", model="Mistral3"),
}
# Other names for the same computation (mlx-lm keeps a table like this).
ALIASES: dict[str, str] = {"mistral": "llama"}


def canonical(raw_arch: str) -> str:
    """The registry's name for a file's `general.architecture` (aliases resolved)."""
    return ALIASES.get(raw_arch, raw_arch)


def module(arch: str) -> ModuleType:
    """The module that runs `arch` (a canonical name), imported when first asked for."""
    return importlib.import_module(f".{ARCHITECTURES[arch].module}", __name__)


def build_model(cfg, g):
    """The model of `cfg.arch` with its weights from the GGUF file `g`."""
    return getattr(module(cfg.arch), ARCHITECTURES[cfg.arch].model)(cfg, g)
