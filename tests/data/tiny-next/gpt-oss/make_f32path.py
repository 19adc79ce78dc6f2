"""llama.cpp's float path at every position on the shared tiny gpt-oss (../shared/reference/tiny-next/
gpt-oss): an all-F32 copy of the file (llama-quantize --allow-requantize F32: every tensor, the MXFP4
experts too, dequantized exactly) run with F32 K/V, so no product rounds its x to 8 bits. The
shared folder keeps that path's logits at the last position only; a float32 engine should land
within float rounding of it at every position (tests/test_gpu_moe_models.py).

Run with the python of /work/cache/llama-cpp's venv (llama_cpp importable), from the project root:
    <venv>/bin/python tests/data/tiny-next/gpt-oss/make_f32path.py <reference dir> <llama-quantize>

Writes f32path_top64.npz beside this script: for each prompt of the manifest, `<prompt>_ids` int32
[n_pos, 64] (the path's 64 largest logits per position, descending, ties by lower id) and
`<prompt>_logits` float32 [n_pos, 64], and `sha256` of the source file.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def main(ref: Path, quantize: str) -> None:
    from llama_cpp import Llama  # noqa: PLC0415

    d = ref / "tiny-next" / "gpt-oss"
    manifest = json.loads((d / "manifest.json").read_text())
    src = d / manifest["file"]
    out = {"sha256": np.array(hashlib.sha256(src.read_bytes()).hexdigest())}
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "f32.gguf"
        subprocess.run([quantize, "--allow-requantize", str(src), str(f32), "F32"], check=True, capture_output=True)
        m = Llama(str(f32), n_ctx=128, n_batch=128, n_threads=2, logits_all=True, verbose=False,
                  type_k=0, type_v=0, flash_attn=False, swa_full=True)
        for p in manifest["prompts"]:
            m.reset()
            m.eval(p["ids"])
            lg = np.array(m.scores[:len(p["ids"])], np.float32)
            top = np.argsort(-lg, axis=1, kind="stable")[:, :64].astype(np.int32)
            out[f"{p['name']}_ids"] = top
            out[f"{p['name']}_logits"] = np.take_along_axis(lg, top, axis=1)
            last = np.load(d / f"logits_f32path_last_{p['name']}.npy")
            assert np.array_equal(lg[-1], last), "the last position differs from the shared float-path logits"
        del m
    np.savez_compressed(Path(__file__).with_name("f32path_top64.npz"), **out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
