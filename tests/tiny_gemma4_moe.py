"""A tiny gemma4 with mixture-of-experts layers (the 26B-A4B shape), made from the shared tiny gemma4:
layers 1 and 3 get 4 experts (top 2) of width 32 beside their MLP, with the router's input scale and
the extra norms; layer 1's experts as one ffn_gate_up_exps, layer 3's as separate gate/up with a
per-expert ffn_down_exps.scale. llama.cpp's logits for the exact file:
tests/data/tiny_gemma4_moe_ref.npz (with its sha256).

    python -m tests.tiny_gemma4_moe <tiny-gemma4.gguf> <out.gguf> [--f32]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 2046
N_EXPERT, N_USED, N_FF_EXP = 4, 2, 32


def make(src: Path, dst: Path, f32: bool = False) -> Path:
    from hearth.engine.quants import dequantize  # noqa: PLC0415
    from tests import gguf_rewrite as R  # noqa: PLC0415
    rng = np.random.default_rng(SEED)
    d = 32

    def mat(*shape, gain=1.0):
        return (rng.standard_normal(shape) * gain / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def put(name, arr, half=False):
        a = arr.astype(np.float16) if half else arr    # the F32 copy holds the F16 values widened
        return R.array_tensor(name, a.astype(np.float32) if f32 else a)

    def experts(p, fused, scaled):
        out = [put(p + "ffn_gate_inp.weight", mat(N_EXPERT, d, gain=2.0)), put(p + "ffn_gate_inp.scale", norm(d)),
               put(p + "pre_ffw_norm_2.weight", norm(d)), put(p + "post_ffw_norm_1.weight", norm(d)),
               put(p + "post_ffw_norm_2.weight", norm(d))]
        if fused:
            out.append(put(p + "ffn_gate_up_exps.weight", mat(N_EXPERT, 2 * N_FF_EXP, d), half=True))
        else:
            out += [put(p + "ffn_gate_exps.weight", mat(N_EXPERT, N_FF_EXP, d)),
                    put(p + "ffn_up_exps.weight", mat(N_EXPERT, N_FF_EXP, d), half=True)]
        out.append(put(p + "ffn_down_exps.weight", mat(N_EXPERT, d, N_FF_EXP)))
        if scaled:
            out.append(put(p + "ffn_down_exps.scale", (0.5 + rng.random(N_EXPERT)).astype(np.float32)))
        return out

    def tensors(name, t):
        extra = []
        if name in ("blk.1.post_ffw_norm.weight", "blk.3.post_ffw_norm.weight"):
            extra = experts(name[:6], fused=name.startswith("blk.1."), scaled=name.startswith("blk.3."))
        if f32:
            own = [R.array_tensor(name, dequantize(t.data, t.type, t.shape, name).astype(np.float32))]
        else:
            own = [(name, tuple(t.shape), t.type.id, bytes(t.data))]
        return own + extra

    meta = {"gemma4.expert_count": R.u32(N_EXPERT), "gemma4.expert_used_count": R.u32(N_USED),
            "gemma4.expert_feed_forward_length": R.u32(N_FF_EXP),
            "general.name": R.string("tiny-random-gemma4-moe")}
    return R.rewrite(src, dst, meta=meta, tensors=tensors)


def with_quantized_experts(src: Path, dst: Path) -> Path:
    """The made model with its experts quantized by gguf-py (gate/up Q4_0, down Q8_0): the types whose
    products take x as int8 blocks on the GPU (gpu/moe.py's MOE_INT8)."""
    import gguf  # noqa: PLC0415
    from hearth.engine.quants import dequantize  # noqa: PLC0415
    from tests import gguf_rewrite as R  # noqa: PLC0415

    def tensors(name, t):
        if not name.endswith("_exps.weight"):
            return None
        q = gguf.GGMLQuantizationType.Q8_0 if "_down_" in name else gguf.GGMLQuantizationType.Q4_0
        raw = gguf.quants.quantize(dequantize(t.data, t.type, t.shape, name).astype(np.float32), q)
        return [(name, tuple(t.shape), int(q), raw.tobytes())]

    return R.rewrite(src, dst, tensors=tensors)


if __name__ == "__main__":
    make(Path(sys.argv[1]), Path(sys.argv[2]), f32="--f32" in sys.argv)
