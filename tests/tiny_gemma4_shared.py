"""A tiny gemma4 with KV shared between layers and per-layer FFN widths, made from the shared tiny
gemma4 (as E2B/E4B are shaped): layers [sliding, full, sliding, full], the last two computing no K/V
and attending to layers 0 and 1's (attention.shared_kv_layers 2), FFN widths [96, 96, 192, 192]
(feed_forward_length as a per-layer array). Layer 1 becomes a full layer (head dim 32, fresh seeded
weights), layers 2 and 3 lose attn_k/attn_v/attn_k_norm and get wider FFNs. llama.cpp's logits for
the exact file: tests/data/tiny_gemma4_shared_ref.npz (with its sha256).

    python -m tests.tiny_gemma4_shared <tiny-gemma4.gguf> <out.gguf> [--f32]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 2044
PATTERN = (True, False, True, False)
N_FF = (96, 96, 192, 192)


def make(src: Path, dst: Path, f32: bool = False) -> Path:
    from hearth.engine.quants import dequantize  # noqa: PLC0415
    from tests import gguf_rewrite as R  # noqa: PLC0415
    rng = np.random.default_rng(SEED)
    d, nh, hd = 32, 4, 32

    def mat(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def put(name, arr, half=False):
        # The F32 copy holds the F16 values widened: the same model, exactly
        a = arr.astype(np.float16) if half else arr
        return R.array_tensor(name, a.astype(np.float32) if f32 else a)

    def tensors(name, t):
        if name.startswith("blk.1.") and name.split(".")[2] in ("attn_q", "attn_k", "attn_v", "attn_output",
                                                                  "attn_q_norm", "attn_k_norm"):
            kind = name.split(".")[2]
            shape = {"attn_q": (nh * hd, d), "attn_k": (hd, d), "attn_v": (hd, d), "attn_output": (d, nh * hd)}
            return [put(name, norm(hd) if kind.endswith("norm") else mat(*shape[kind]), half=kind == "attn_k")]
        if name.startswith(("blk.2.", "blk.3.")):
            kind = name.split(".")[2]
            if kind in ("attn_k", "attn_v", "attn_k_norm"):
                return []
            if kind in ("ffn_gate", "ffn_up"):
                return [put(name, mat(192, d), half=kind == "ffn_up")]
            if kind == "ffn_down":
                return [put(name, mat(d, 192))]
        if f32:
            return [R.array_tensor(name, dequantize(t.data, t.type, t.shape, name).astype(np.float32))]
        return None

    meta = {"gemma4.attention.sliding_window_pattern": R.bool_array(PATTERN),
            "gemma4.attention.shared_kv_layers": R.u32(2),
            "gemma4.feed_forward_length": R.i32_array(N_FF),
            "general.name": R.string("tiny-random-gemma4-shared-kv")}
    return R.rewrite(src, dst, meta=meta, tensors=tensors)


if __name__ == "__main__":
    make(Path(sys.argv[1]), Path(sys.argv[2]), f32="--f32" in sys.argv)
