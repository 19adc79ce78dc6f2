"""A tiny qwen35moe GGUF made from the shared tiny qwen35 (its vocabulary, attention and Gated
DeltaNet layers, copied as they are) with each dense FFN replaced by a mixture of experts: a softmax
router over 4 experts, the top 2 renormalised, and a shared expert gated by sigmoid(ffn_gate_inp_shexp x).
New tensors are F32/F16 from a seeded generator, so the file is the same bytes on every machine
(its sha256 is stored next to llama.cpp's logits for it, tests/data/tiny_qwen35moe_ref.npz).

    python -m tests.tiny_qwen35moe <tiny-qwen35.gguf> <out.gguf> [--f32 | --quantized]

--f32 writes every tensor as F32 (llama.cpp's float path, the tight reference). --quantized
(`make_quantized`) makes the shared expert as wide as the routed ones and quantizes every expert
matrix: the model on which the GPU's decode runs the shared expert as one more slot of the experts'
passes (tests/data/tiny_qwen35moe_q_ref.npz: llama.cpp's logits for it, tests/llama_reference.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

N_EXPERT, N_USED, N_FF_EXP, N_FF_SHEXP = 4, 2, 32, 48
SEED = 2035


def make(src: Path, dst: Path, f32: bool = False, n_ff_shexp: int | None = None) -> Path:
    """n_ff_shexp: the shared expert's width (None: N_FF_SHEXP as it is at the call, which a test may
    have patched)."""
    from hearth.engine.quants import dequantize  # noqa: PLC0415
    from tests import gguf_rewrite as R  # noqa: PLC0415
    n_ff_shexp = N_FF_SHEXP if n_ff_shexp is None else n_ff_shexp
    arch = "qwen35moe"
    rng = np.random.default_rng(SEED)
    d = 64   # the tiny qwen35's width

    def mat(*shape, gain=1.0):
        return (rng.standard_normal(shape) * gain / np.sqrt(shape[-1])).astype(np.float32)

    def put(name, arr, half=False):
        # The F32 copy holds the F16 values widened: the same model, exactly
        a = arr.astype(np.float16) if half else arr
        return R.array_tensor(name, a.astype(np.float32) if f32 else a)

    def tensors(name, t):
        if ".ffn_" in name:
            if not name.endswith("ffn_gate.weight"):
                return []
            p = name[:-len("ffn_gate.weight")]
            return [put(p + "ffn_gate_inp.weight", mat(N_EXPERT, d, gain=2.0)),
                    put(p + "ffn_gate_exps.weight", mat(N_EXPERT, N_FF_EXP, d), half=True),
                    put(p + "ffn_up_exps.weight", mat(N_EXPERT, N_FF_EXP, d)),
                    put(p + "ffn_down_exps.weight", mat(N_EXPERT, d, N_FF_EXP), half=True),
                    put(p + "ffn_gate_inp_shexp.weight", mat(d)),
                    put(p + "ffn_gate_shexp.weight", mat(n_ff_shexp, d), half=True),
                    put(p + "ffn_up_shexp.weight", mat(n_ff_shexp, d)),
                    put(p + "ffn_down_shexp.weight", mat(d, n_ff_shexp), half=True)]
        if f32:
            return [R.array_tensor(name, dequantize(t.data, t.type, t.shape, name).astype(np.float32))]
        return None

    meta = {"general.architecture": R.string(arch),
            f"{arch}.expert_count": R.u32(N_EXPERT), f"{arch}.expert_used_count": R.u32(N_USED),
            f"{arch}.expert_feed_forward_length": R.u32(N_FF_EXP),
            f"{arch}.expert_shared_feed_forward_length": R.u32(n_ff_shexp)}
    return R.rewrite(src, dst, rename=lambda k: k.replace("qwen35.", f"{arch}.", 1) if k.startswith("qwen35.") else k,
                     meta=meta, tensors=tensors)


def make_quantized(src: Path, dst: Path) -> Path:
    """make's model with a shared expert of N_FF_EXP and its experts quantized by gguf-py: gate/up
    Q4_0 (routed and shared), down Q8_0 routed and Q4_0 shared (types the GPU's int8 products take;
    the shared down of another type than the routed, as a Q4_K_M mix gives it)."""
    import gguf  # noqa: PLC0415
    from hearth.engine.quants import dequantize  # noqa: PLC0415
    from tests import gguf_rewrite as R  # noqa: PLC0415
    wide = make(src, dst.with_name(dst.stem + "-float.gguf"), n_ff_shexp=N_FF_EXP)

    def tensors(name, t):
        if not name.endswith(("_exps.weight", "_shexp.weight")) or "gate_inp" in name:
            return None
        q = gguf.GGMLQuantizationType.Q8_0 if name.endswith("down_exps.weight") else gguf.GGMLQuantizationType.Q4_0
        raw = gguf.quants.quantize(dequantize(t.data, t.type, t.shape, name).astype(np.float32), q)
        return [(name, tuple(t.shape), int(q), raw.tobytes())]

    return R.rewrite(wide, dst, tensors=tensors)


if __name__ == "__main__":
    if "--quantized" in sys.argv:
        make_quantized(Path(sys.argv[1]), Path(sys.argv[2]))
    else:
        make(Path(sys.argv[1]), Path(sys.argv[2]), f32="--f32" in sys.argv)
