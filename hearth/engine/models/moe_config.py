"""Mixture-of-experts hyper-parameters (qwen3moe, gpt-oss), read and checked for `ModelConfig`.

What llama.cpp hard-codes per architecture is hard-coded here too (llama-model.cpp):
- qwen3moe: a softmax over every expert's router logit, the top k taken and their weights
  renormalised to sum 1; SiLU-gated experts; q/k RMS norms; no shared expert.
- gpt-oss: the top k taken on the raw router logits (plus the router's bias), a softmax over those
  k alone; experts with biases and OpenAI's clamped SwiGLU; attention sinks and q/k/v/o biases;
  sliding-window attention on even layers (layer il is windowed when il % 2 == 0) and full
  attention on odd ones, both rotating with the same base and YaRN scaling; the FFN's pre-norm is
  the tensor `post_attention_norm`.

Every expert tensor's shape is checked against the metadata here, so a file whose expert count,
top-k or expert width disagrees with its tensors fails at load with the file, key and tensor named.
"""

from __future__ import annotations

from ..errors import UnsupportedModelError

MOE_ARCHS = ("qwen3moe", "gpt-oss")
MAX_EXPERTS = 1 << 12

# (router: "softmax" over all experts | "softmax_weight" over the chosen ones, renormalise the top k,
#  expert activation)
GATING = {"qwen3moe": ("softmax", True, "silu"), "gpt-oss": ("softmax_weight", False, "swiglu_oai")}


def config_fields(g, raw_arch: str, opt, base: dict) -> dict:
    """ModelConfig fields of a MoE architecture. `opt(suffix, default, lo, hi)` reads
    `{raw_arch}.<suffix>` checked against bounds; `base` holds the common fields already read."""
    name, arch, n_embd, n_layer = g.path.name, base["arch"], base["n_embd"], base["n_layer"]

    def need(suffix, lo, hi):
        v = opt(suffix, None, lo, hi)
        if v is None:
            raise UnsupportedModelError(f"{name}: metadata {raw_arch}.{suffix} is missing")
        return v

    n_expert = need("expert_count", 1, MAX_EXPERTS)
    n_used = need("expert_used_count", 1, MAX_EXPERTS)
    if n_used > n_expert:
        raise UnsupportedModelError(
            f"{name}: metadata {raw_arch}.expert_used_count is {n_used}, more than "
            f"{raw_arch}.expert_count ({n_expert})")
    n_ff_exp = need("expert_feed_forward_length", 1, 1 << 20)
    _check_expert_tensors(g, raw_arch, n_layer, n_embd, n_expert, n_ff_exp)
    gating, norm_w, act = GATING[arch]
    out = {"n_expert": n_expert, "n_expert_used": n_used, "n_ff_exp": n_ff_exp, "expert_gating": gating,
           "expert_weights_norm": norm_w, "activation": act}
    if arch == "gpt-oss":
        window = need("attention.sliding_window", 1, 1 << 24)
        out.update({"sliding_window": window, "swa_layers": tuple(il % 2 == 0 for il in range(n_layer)),
                    "attn_sinks": True})
    return out


def _check_expert_tensors(g, raw_arch, n_layer, d, n_expert, n_ff_exp) -> None:
    """Router [n_expert, d] and gate/up [n_expert, n_ff_exp, d], down [n_expert, d, n_ff_exp] (numpy
    order) in every layer, and their biases where present; a disagreement names the tensor and the
    metadata it contradicts."""
    name = g.path.name
    k_e, k_f, k_d = (f"{raw_arch}.expert_count", f"{raw_arch}.expert_feed_forward_length",
                     f"{raw_arch}.embedding_length")
    for il in range(n_layer):
        p = f"blk.{il}."
        want = {
            "ffn_gate_inp.weight": ((d, n_expert), f"[{d} ({k_d}), {n_expert} ({k_e})]"),
            "ffn_gate_exps.weight": ((d, n_ff_exp, n_expert), f"[{d} ({k_d}), {n_ff_exp} ({k_f}), {n_expert} ({k_e})]"),
            "ffn_up_exps.weight": ((d, n_ff_exp, n_expert), f"[{d} ({k_d}), {n_ff_exp} ({k_f}), {n_expert} ({k_e})]"),
            "ffn_down_exps.weight": ((n_ff_exp, d, n_expert), f"[{n_ff_exp} ({k_f}), {d} ({k_d}), {n_expert} ({k_e})]"),
        }
        biases = {   # optional (gpt-oss has them)
            "ffn_gate_inp.bias": ((n_expert,), f"[{n_expert} ({k_e})]"),
            "ffn_gate_exps.bias": ((n_ff_exp, n_expert), f"[{n_ff_exp} ({k_f}), {n_expert} ({k_e})]"),
            "ffn_up_exps.bias": ((n_ff_exp, n_expert), f"[{n_ff_exp} ({k_f}), {n_expert} ({k_e})]"),
            "ffn_down_exps.bias": ((d, n_expert), f"[{d} ({k_d}), {n_expert} ({k_e})]"),
        }
        want.update({k: v for k, v in biases.items() if p + k in g.tensors})
        for tname, (shape, words) in want.items():
            t = g.tensors.get(p + tname)
            if t is None:
                raise UnsupportedModelError(f"{name}: tensor {p + tname} is missing (a {raw_arch} layer's experts)")
            if tuple(int(s) for s in t.shape) != shape:
                raise UnsupportedModelError(
                    f"{name}: tensor {p + tname} has shape {list(t.shape)} (GGUF order); the metadata "
                    f"says {words}")
