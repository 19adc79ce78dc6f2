"""Hearth's 8-bit decode activations and products against llama.cpp's own CPU functions:
`python -m bench.cpu_int8_ggml --llama-python PY`.

llama-cpp-python's libggml-cpu exports quantize_row_q8_0 / q8_1 / q8_K and ggml_vec_dot_<type>_q8_*;
this loads that library (from the llama_cpp package of the interpreter PY) through ctypes and, for
every quantized weight type, on random blocks (tests/test_cpu_kernels.random_matrix) and three kinds
of x, compares the codes, scales and block sums with engine/cpu/quant_activations.py and every row's
product with the decode kernels' (Linear with 8-bit x). Prints, per type, whether the quantized x
is identical and the largest |ours - llama.cpp| / max |llama.cpp|.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
VEC_DOT_TYPE = {"Q4_0": "q8_0", "Q4_1": "q8_1", "Q5_0": "q8_0", "Q5_1": "q8_1", "Q8_0": "q8_0",
                "Q2_K": "q8_K", "Q3_K": "q8_K", "Q4_K": "q8_K", "Q5_K": "q8_K", "Q6_K": "q8_K"}
BLOCK_BYTES = {"q8_0": 34, "q8_1": 36, "q8_K": 292}   # f16 d | qs[32]; f16 d, f16 s | qs[32]; f32 d | qs[256] | i16 bsums[16]


def load_ggml(llama_python: str) -> ctypes.CDLL:
    lib = Path(subprocess.run([llama_python, "-c", "import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))"],
                              capture_output=True, text=True, check=True).stdout.strip()) / "lib"
    ctypes.CDLL(str(lib / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(lib / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    cpu.ggml_cpu_init()
    for kind in BLOCK_BYTES:
        getattr(cpu, f"quantize_row_{kind}").argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return cpu


def their_q8(cpu, kind: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(raw blocks, codes, scales, sums: Q8_1's s or Q8_K's bsums, else empty) from llama.cpp."""
    per = 256 if kind == "q8_K" else 32
    y = np.zeros(x.size // per * BLOCK_BYTES[kind], np.uint8)
    getattr(cpu, f"quantize_row_{kind}")(x.ctypes.data, y.ctypes.data, x.size)
    b = y.reshape(-1, BLOCK_BYTES[kind])
    if kind == "q8_K":
        return y, b[:, 4:260].view(np.int8).reshape(-1), b[:, :4].copy().view(np.float32)[:, 0], \
            b[:, 260:].copy().view(np.int16).reshape(-1)
    off = 4 if kind == "q8_1" else 2
    d = b[:, :2].copy().view(np.float16)[:, 0].astype(np.float32)
    s = b[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float32) if kind == "q8_1" else np.empty(0)
    return y, b[:, off:].view(np.int8).reshape(-1), d, s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-python", required=True)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from hearth.engine.cpu import quant_activations as QA  # noqa: PLC0415
    from hearth.engine.cpu.linear import Activations, Linear  # noqa: PLC0415
    from hearth.engine.quants import TYPE_BY_NAME  # noqa: PLC0415
    from tests.test_cpu_kernels import _awkward_x, random_matrix  # noqa: PLC0415
    cpu = load_ggml(a.llama_python)
    rng = np.random.default_rng(0)
    print("| type | x as | quantized x identical | max abs(ours - llama.cpp) / max abs(llama.cpp) |")
    print("|---|---|---|---|")
    for name, kind in VEC_DOT_TYPE.items():
        dot = getattr(cpu, f"ggml_vec_dot_{name[:-2].lower() + '_K' if name.endswith('_K') else name.lower()}_{kind}")
        dot.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        same, worst = True, 0.0
        for cols in (256, 768, 1536, 2048):
            w = np.ascontiguousarray(random_matrix(name, 64, cols, seed=cols))
            normal = rng.standard_normal(cols).astype(np.float32)
            for x in (_awkward_x(cols, cols), normal, normal * rng.standard_exponential(cols).astype(np.float32) ** 2):
                x = np.ascontiguousarray(x, np.float32)
                y, q, d, s = their_q8(cpu, kind, x)
                oq, od, os_ = (QA.q8_k if kind == "q8_K" else QA.q8_0)(x)
                same &= np.array_equal(q, oq) and np.array_equal(d, od)
                same &= kind == "q8_0" or np.array_equal(s, os_)
                ref, out = np.zeros(64, np.float32), np.zeros(1, np.float32)
                for r in range(64):
                    dot(cols, out.ctypes.data, 0, w[r].ctypes.data, 0, y.ctypes.data, 0, 1)
                    ref[r] = out[0]
                got = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)(Activations(x[None], int8=True))[0]
                worst = max(worst, float(np.abs(got - ref).max() / np.abs(ref).max()))
        print(f"| {name} | {kind.upper()} | {'yes' if same else 'NO'} | {worst:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
