"""llama.cpp's logits for a tiny model made by a tests/tiny_*.py maker (run with the venv that has
llama_cpp, e.g. /work/cache/llama-cpp/venv; the models are made beforehand with Hearth's venv):

    python tests/llama_reference.py <made.gguf> <manifest.json of the prompts> <out.npz>

`<made>-f32.gguf` (the maker's --f32 output) lies beside <made.gguf> where the reference holds the
F32 copy's logits too; without it, only the made file's top 64.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np


def llama_cpp_reference(src: Path, out: Path, prompts: dict[str, list[int]]) -> None:
    """Run with /work/cache/llama-cpp's venv (llama_cpp importable) on `src` (a made model) and its
    all-F32 copy beside it (`<stem>-f32.gguf`): llama.cpp's top-64 logits at every position (batch) and the F32 copy's last
    logits, for each prompt, into `out` (.npz) with the made file's sha256."""

    from llama_cpp import Llama  # noqa: PLC0415
    q, f = src, src.with_name(src.stem + "-f32.gguf")   # made beforehand by `make` (the hearth venv)
    res = {"sha256": np.array(hashlib.sha256(q.read_bytes()).hexdigest())}
    for path, tag in ((q, "q"), (f, "f32")) if f.exists() else ((q, "q"),):
        m = Llama(str(path), n_ctx=128, n_threads=2, n_batch=128, logits_all=True, verbose=False,
                  type_k=0 if tag == "f32" else 1, type_v=0 if tag == "f32" else 1)
        for name, ids in prompts.items():
            m.reset()
            m.eval(ids)
            lg = np.array(m.scores[:len(ids)], np.float32)
            if tag == "q":
                top = np.argsort(-lg, axis=1, kind="stable")[:, :64].astype(np.int32)
                res[f"{name}_ids"] = np.array(ids, np.int32)
                res[f"{name}_top_ids"] = top
                res[f"{name}_top_logits"] = np.take_along_axis(lg, top, axis=1)
            else:   # the F32 copy's last position at its 512 largest logits (a tight, small target)
                top = np.argsort(-lg[-1], kind="stable")[:512].astype(np.int32)
                res[f"{name}_f32_ids"], res[f"{name}_f32_logits"] = top, lg[-1][top]
        del m
    np.savez_compressed(out, **res)


if __name__ == "__main__":
    manifest = json.loads(Path(sys.argv[2]).read_text())
    llama_cpp_reference(Path(sys.argv[1]), Path(sys.argv[3]), {p["name"]: p["ids"] for p in manifest["prompts"]})
