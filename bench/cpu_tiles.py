"""Batch products of one matrix on one thread, int8 tiles against float32 tiles:
`python -m bench.cpu_tiles [--model PATH] [--tensor NAME ...] [--rows 8,16,32,64,128,256] [--repeat R]`.

For each tensor (default: a 1B-shaped file's ffn_gate, ffn_down and attn_q of block 0), the product
with `rows` rows of x through engine/cpu/linear.py's two batch paths, alternating in this process:
int8 tiles (engine/cpu/tiles_int8.py + gemm_int8.py, x quantized to Q8_K: K-quants only) and
float32 tiles (dequantized, then OpenBLAS sgemm); OpenBLAS held to one thread as the engine holds
it, the best of R runs after one warm-up. Prints GOP/s (2 x rows x matrix elements per second) and
the ratio.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"

DEFAULT_TENSORS = ["blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a GGUF file with K-quant matrices (a 1B-shaped Q4_K_M)")
    ap.add_argument("--tensor", action="append", default=None)
    ap.add_argument("--rows", default="8,16,32,64,128,256")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    import numpy as np  # noqa: PLC0415

    from hearth.engine.cpu import linear as L  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415

    g = GGUFFile.open(a.model)
    rng = np.random.default_rng(0)
    print(f"{g.path.name}, one thread, GOP/s (best of {a.repeat})")
    print("| tensor | type | shape | rows of x | int8 tiles | float32 tiles | int8 / float32 |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name in a.tensor or DEFAULT_TENSORS:
        info = g.tensors[name]
        n_in = info.shape[0]
        w = g.tensor_bytes(name).reshape(info.shape[1], -1)
        lin = L.Linear(w, info.type, n_in, name, int8=True)
        if lin._tile8 is None:
            print(f"| {name} | {info.type.name} | no int8 tiles for this type |")
            continue
        for n in (int(v) for v in a.rows.split(",")):
            x = rng.standard_normal((n, n_in)).astype(np.float32)
            out = np.empty((n, lin.n_out), np.float32)
            best = {"int8": float("inf"), "f32": float("inf")}
            for rep in range(a.repeat + 1):
                for path in best:
                    act = L.Activations(x, int8=path == "int8")
                    t = time.perf_counter()
                    (lin._tiles8 if path == "int8" else lin._tiles)(act, out)
                    if rep:
                        best[path] = min(best[path], time.perf_counter() - t)
            ops = 2 * n * lin.n_out * n_in
            i8, f32 = ops / best["int8"] / 1e9, ops / best["f32"] / 1e9
            print(f"| {name} | {info.type.name} | {lin.n_out} x {n_in} | {n} | {i8:.0f} | {f32:.0f} | {i8 / f32:.2f} |")


if __name__ == "__main__":
    main()
