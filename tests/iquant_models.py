"""Tiny models in i-quant and MXFP4 types for end-to-end tests: the shipped tiny llama
(../shared/reference/tiny/llama) with some of its layer matrices replaced by blocks that llama.cpp's
llama-quantize (and gguf-py, for MXFP4) made from it. Only the replaced tensors are stored
(tests/data/iquants/<model>.npz: each tensor's bytes and type), a few kB, so the test builds the
file from the shipped model; tests/data/iquants/make.py made them and llama.cpp's logits on the
built files (top64_<model>_<prompt>.npz), and says how.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from hearth.engine.gguf import GGUFFile
from hearth.engine.library.split_gguf import _raw_kvs, _write_gguf
from hearth.engine.quants import GGML_TYPES

DATA = Path(__file__).parent / "data" / "iquants"
MODELS = ["mix_a", "mix_b"]


def compose(src: Path, replacements: dict[str, tuple[int, np.ndarray]], dst: Path) -> Path:
    """src's metadata (its own bytes) and tensors, with `replacements` {name: (GGML type id, uint8
    bytes)} in place of those tensors (same shape)."""
    g = GGUFFile.open(src)
    try:
        tensors = []
        for t in g.tensors.values():
            if t.name in replacements:
                tid, raw = replacements[t.name]
                gt = GGML_TYPES[int(tid)]
                raw = np.ascontiguousarray(raw, np.uint8).reshape(-1)
                assert raw.size * gt.block_size == t.n_elements * gt.type_size, t.name
                t = dataclasses.replace(t, type=gt, n_bytes=raw.size, data=raw)
            tensors.append(t)
        with open(dst, "wb") as out:
            _write_gguf(out, g.version, _raw_kvs(g, list(g.metadata_spans)), tensors, g.alignment)
    finally:
        g.close()
    return dst


def load_replacements(model: str) -> dict[str, tuple[int, np.ndarray]]:
    with np.load(DATA / f"{model}.npz") as z:
        names = [k[:-5] for k in z.files if k.endswith(".type")]
        return {n: (int(z[n + ".type"]), z[n + ".data"]) for n in names}


def build(model: str, tiny_llama: Path, folder: Path) -> Path:
    return compose(tiny_llama, load_replacements(model), folder / f"tiny-llama-{model}.gguf")
