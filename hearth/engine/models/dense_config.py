"""Hyper-parameters of the newer dense families (smollm3, phi3, mistral3), read and checked for
`ModelConfig`.

What llama.cpp hard-codes per architecture is hard-coded here too (src/models/<arch>.cpp):
- smollm3: llama's layers, but layer il rotates nothing when (il + 1) % 4 == 0 (NoPE layers; the
  step 4 is not in the metadata).
- phi3 (Phi-4-mini): fused q/k/v (`attn_qkv`) and gate+up (`ffn_up`, gate first); NeoX rotation of
  the first `rope.dimension_count` dims; per-frequency divisors `rope_factors_long` when the context
  is longer than `rope.scaling.original_context_length`, else `rope_factors_short`; cos and sin
  times `rope.scaling.attn_factor` (config._rope_scaling reads that for every architecture).
  A `sliding_window` key is ignored, as llama.cpp ignores it for phi3.
- mistral3 (Ministral 3, Mistral Small 3.x): llama's layers with YaRN (its log multiplier, in
  config._rope_scaling) and, when `attention.temperature_scale` is set, Llama 4's temperature
  tuning: q at position p times 1 + scale * ln(floor(p / n) + 1), n the original context.
  Its MoE variant is refused.
"""

from __future__ import annotations

from ..errors import UnsupportedModelError

# Architecture -> llama.cpp's rotation style for it (llama-model.cpp, llama_model_rope_type).
DENSE_ARCHS = {"smollm3": "normal", "phi3": "neox", "mistral3": "normal"}
SMOLLM3_NOPE_STEP = 4


def config_fields(g, raw_arch: str, opt, base: dict) -> dict:
    """ModelConfig fields of these architectures. `opt(suffix, default, lo, hi)` reads
    `{raw_arch}.<suffix>` checked against bounds; `base` holds the common fields already read."""
    name, arch, n_layer = g.path.name, base["arch"], base["n_layer"]
    if arch == "smollm3":
        return {"nope_layers": tuple((il + 1) % SMOLLM3_NOPE_STEP == 0 for il in range(n_layer))}
    if arch == "phi3":
        if opt("expert_count", 0, 0, 1 << 12):
            raise UnsupportedModelError(f"{name}: phi3 with experts ({raw_arch}.expert_count) is not "
                                        f"supported by Hearth; its dense models are")
        orig = opt("rope.scaling.original_context_length", base["context_length"], 1, 1 << 24)
        for t in ("rope_factors_long.weight", "rope_factors_short.weight"):
            if t in g.tensors and tuple(g.tensors[t].shape) != (base["n_rot"] // 2,):
                raise UnsupportedModelError(
                    f"{name}: tensor {t} has shape {list(g.tensors[t].shape)}; expected "
                    f"[{base['n_rot'] // 2}] (half of {raw_arch}.rope.dimension_count)")
        return {"rope_orig_ctx": orig}
    if arch == "mistral3":
        if opt("expert_count", 0, 0, 1 << 12):
            raise UnsupportedModelError(f"{name}: mistral3 with experts ({raw_arch}.expert_count) is not "
                                        f"supported by Hearth; its dense models are")
        scale = float(opt("attention.temperature_scale", 0.0, 0.0, 1e3))
        floor = base["rope_scaling"].orig_ctx
        if scale and floor <= 0:
            raise UnsupportedModelError(f"{name}: {raw_arch}.attention.temperature_scale needs "
                                        f"{raw_arch}.rope.scaling.original_context_length")
        return {"attn_temp_scale": scale, "attn_temp_floor": floor}
    raise AssertionError(arch)
