"""An 8B llama-shape random-weight file in IQ4_XS (Q6_K where the Q4_K_M mix has it: output, attn_v,
every other ffn_down), for speed and memory beside llama.cpp.
Never run by the tests. Random IQ4_XS blocks are written as bytes (d f16 sane, random 6-bit scales and
codes) through ../shared/tools/make_big_gguf.py's writer, so the file takes a minute; quantizing an
F16/Q8_0 file with llama-quantize takes over an hour on a loaded 2-core machine.

    python bench/make_iq4xs_gguf.py [SHAPE] OUT.gguf      (SHAPE of make_big_gguf.py, default llama8b)
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT

ROOT = Path(__file__).resolve().parent.parent
TOOL = next(p for p in (ROOT.parent / "shared" / "tools" / "make_big_gguf.py",
                        ROOT.parent.parent / "shared" / "tools" / "make_big_gguf.py") if p.is_file())
spec = importlib.util.spec_from_file_location("make_big_gguf", TOOL)
big = importlib.util.module_from_spec(spec)
spec.loader.exec_module(big)
base_blocks = big.rand_blocks
big.BLOCK[QT.IQ4_XS] = (256, 136)      # d f16, scales_h u16, scales_l 4 bytes, 128 bytes of codes


def rand_blocks(rng, qt, n_out, n_in, std):
    if qt != QT.IQ4_XS:
        return base_blocks(rng, qt, n_out, n_in, std)
    raw = rng.integers(0, 256, size=(n_out * (n_in // 256), 136), dtype=np.uint8)
    raw[:, 0:2] = np.frombuffer(np.float16(std / 1200.0).tobytes(), np.uint8)   # |scale - 32| * |code| ~ 1200
    return raw.reshape(n_out, -1)


big.rand_blocks = rand_blocks


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", nargs="?", default="llama8b", help="a shape of make_big_gguf.py")
    ap.add_argument("out", help="the file to write")
    a = ap.parse_args()
    shape, out = a.shape, a.out
    # Q6_K mix: "Q4_K_M" makes Q6_K the output's; the rest takes the IQ4_XS in place of Q4_K.
    orig_qt = big.QT
    class _Types:  # Q4_K -> IQ4_XS for the body; Q6_K stays for the output, attn_v and half of ffn_down
        def __getattr__(self, name):
            return orig_qt.IQ4_XS if name == "Q4_K" else getattr(orig_qt, name)
        def __getitem__(self, name):
            return orig_qt[name]
    big.QT = _Types()
    big.main(shape, "Q4_K_M", out, str(big.__dict__.get("VOCAB_DIR", ROOT.parent / "shared" / "reference" / "vocab")))
