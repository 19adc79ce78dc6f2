"""One decode matrix-vector product per weight type, timed on this thread's cores:
`python -m bench.cpu_matvec [--types Q4_K,Q6_K] [--shape 2048x8192] [--src CHECKOUT ...]`.

For each type (and MXFP4_X8: MXFP4 repacked in groups of 8 rows): a random matrix of the given shape (tests/test_cpu_kernels.random_matrix), x
quantized to 8 bits once, then the 8-bit matvec kernel (`Linear` with 8-bit x) timed over repeats;
prints G weights/s and GB/s of weight bytes read, median of the repeats. With `--src A --src B` each
checkout runs in its own process, alternating, rounds times (A/B of two kernel versions side by
side); pin the thread count with HEARTH_THREADS / NUMBA_NUM_THREADS and the core with taskset.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPES = "Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K"


def measure(types: list[str], rows: int, cols: int, seconds: float) -> dict:
    import numpy as np  # noqa: PLC0415
    from hearth.engine.cpu.linear import Activations, Linear, set_threads  # noqa: PLC0415
    from hearth.engine.quants import TYPE_BY_NAME  # noqa: PLC0415
    from tests.test_cpu_kernels import F16_FIELDS, random_matrix  # noqa: PLC0415
    from tests.test_cpu_kernels_iq import iq_matrix  # noqa: PLC0415
    set_threads(int(os.environ.get("HEARTH_THREADS", "1")))
    x = np.random.default_rng(0).standard_normal((1, cols)).astype(np.float32)
    out = {}
    for name in types:
        if name == "MXFP4_X8":   # MXFP4 repacked in groups of 8 rows (engine/cpu/mxfp4_x8.py)
            from hearth.engine.cpu import mxfp4_x8 as X8  # noqa: PLC0415
            from hearth.engine.cpu.linear_x8 import LinearX8  # noqa: PLC0415
            w = X8.repack_numpy(iq_matrix("MXFP4", rows, cols))
            lin = LinearX8(w, TYPE_BY_NAME["MXFP4"], cols, name, int8=True)
        else:
            w = random_matrix(name, rows, cols) if name in F16_FIELDS else iq_matrix(name, rows, cols)
            lin = Linear(w, TYPE_BY_NAME[name], cols, name, int8=True)
        act = Activations(x, int8=True)
        y = np.empty((1, rows), np.float32)
        lin(act, y)                                    # compile / load, quantize x once
        times = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 5:
            t0 = time.perf_counter()
            lin(act, y)
            times.append(time.perf_counter() - t0)
        t = sorted(times)[len(times) // 2]
        out[name] = (rows * cols / t / 1e9, w.nbytes / t / 1e9)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default=TYPES)
    ap.add_argument("--shape", default="2048x8192", help="rows x cols (n_out x n_in)")
    ap.add_argument("--seconds", type=float, default=1.0, help="timing per type and round")
    ap.add_argument("--src", action="append", help="checkout to time (repeatable); default this one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    rows, cols = (int(v) for v in a.shape.lower().split("x"))
    types = a.types.split(",")
    if a.json:
        print(json.dumps(measure(types, rows, cols, a.seconds)))
        return 0
    srcs = [Path(s).resolve() for s in (a.src or [ROOT])]
    got = {s: {t: [] for t in types} for s in srcs}
    for _ in range(a.rounds):
        for s in srcs:
            env = dict(os.environ, PYTHONPATH=str(s))
            cmd = [sys.executable, str(ROOT / "bench" / "cpu_matvec.py"), "--json", "--types", a.types,
                   "--shape", a.shape, "--seconds", str(a.seconds)]
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=s, check=True)
            for t, v in json.loads(r.stdout.strip().splitlines()[-1]).items():
                got[s][t].append(v)
    print(f"load average {os.getloadavg()[0]:.2f}; shape {rows} x {cols}; G weights/s (GB/s), median of {a.rounds}")
    print("| type | " + " | ".join(s.name for s in srcs) + " |")
    print("|---|" + "---|" * len(srcs))
    for t in types:
        cells = []
        for s in srcs:
            v = sorted(got[s][t])[len(got[s][t]) // 2]
            cells.append(f"{v[0]:.1f} ({v[1]:.1f})")
        print(f"| {t} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
