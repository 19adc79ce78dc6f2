"""Batch products of one matrix on one thread, VNNI tiles and int8 tiles against float32 tiles:
`python -m bench.cpu_tiles [--model PATH] [--tensor NAME ...] [--rows 8,16,32,64,128,256] [--repeat R]`,
or on random matrices of the given types: `--random Q4_K,IQ4_XS,... [--shape 2048x2048]`.

For each tensor (default: a 1B-shaped file's ffn_gate, ffn_down and attn_q of block 0), the product
with `rows` rows of x through engine/cpu/linear.py's batch paths, alternating in this process:
VNNI tiles (engine/cpu/tiles_vnni.py + gemm_vnni.py, every quantized type; where the CPU has no VNNI
they run as generic vector IR, far slower: the column says so), int8 tiles (engine/cpu/tiles_int8.py +
gemm_int8.py, x quantized to Q8_K: K-quants only) and float32 tiles (dequantized, then OpenBLAS
sgemm); OpenBLAS held to one thread as the engine holds it, the best of R runs after one warm-up.
Prints GOP/s (2 x rows x matrix elements per second) and the ratios to float32 tiles.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"

DEFAULT_TENSORS = ["blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a GGUF file with K-quant matrices (a 1B-shaped Q4_K_M)")
    ap.add_argument("--random", help="types of random matrices instead of a file's (tests' random blocks)")
    ap.add_argument("--shape", default="2048x2048", help="rows x cols of the random matrices")
    ap.add_argument("--tensor", action="append", default=None)
    ap.add_argument("--rows", default="8,16,32,64,128,256")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    import numpy as np  # noqa: PLC0415

    from hearth.engine.cpu import linear as L  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415

    rng = np.random.default_rng(0)
    from hearth.engine.cpu import simd_vnni  # noqa: PLC0415
    vnni = {16: "AVX-512 VNNI", 8: "AVX-VNNI"}.get(simd_vnni.lanes(), "generic IR: no VNNI on this CPU")
    print(f"{a.model or 'random matrices'}, one thread, GOP/s (best of {a.repeat}); VNNI tiles: {vnni}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| tensor | type | shape | rows of x | VNNI tiles | int8 tiles | float32 tiles | VNNI / float32 | int8 / float32 |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for name, w, gtype, n_in in _matrices(a):
        lin = L.Linear(w, gtype, n_in, name, int8=True)
        paths = {"vnni": lin._tiles_vnni, "int8": lin._tiles8, "f32": lin._tiles}
        if lin._tile8 is None:
            del paths["int8"]
        for n in (int(v) for v in a.rows.split(",")):
            x = rng.standard_normal((n, n_in)).astype(np.float32)
            out = np.empty((n, lin.n_out), np.float32)
            best = dict.fromkeys(paths, float("inf"))
            for rep in range(a.repeat + 1):
                for path, fn in paths.items():
                    act = L.Activations(x, int8=path != "f32")
                    t = time.perf_counter()
                    fn(act, out)
                    if rep:
                        best[path] = min(best[path], time.perf_counter() - t)
            ops = 2 * n * lin.n_out * n_in
            rate = {k: ops / v / 1e9 for k, v in best.items()}
            i8 = f"{rate['int8']:.0f}" if "int8" in rate else "-"
            r8 = f"{rate['int8'] / rate['f32']:.2f}" if "int8" in rate else "-"
            print(f"| {name} | {gtype.name} | {lin.n_out} x {n_in} | {n} | {rate['vnni']:.0f} | {i8} | "
                  f"{rate['f32']:.0f} | {rate['vnni'] / rate['f32']:.2f} | {r8} |")


def _matrices(a):
    """(name, uint8 [rows, bytes a row], type, n_in) of each matrix to time."""
    if a.random:
        from hearth.engine.quants import TYPE_BY_NAME  # noqa: PLC0415
        from tests.test_cpu_kernels import F16_FIELDS, random_matrix  # noqa: PLC0415
        from tests.test_cpu_kernels_iq import iq_matrix  # noqa: PLC0415
        rows, cols = (int(v) for v in a.shape.lower().split("x"))
        for t in a.random.split(","):
            w = random_matrix(t, rows, cols) if t in F16_FIELDS else iq_matrix(t, rows, cols)
            yield "random", w, TYPE_BY_NAME[t], cols
        return
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    g = GGUFFile.open(a.model)
    for name in a.tensor or DEFAULT_TENSORS:
        info = g.tensors[name]
        yield name, g.tensor_bytes(name).reshape(info.shape[1], -1), info.type, info.shape[0]


if __name__ == "__main__":
    main()
