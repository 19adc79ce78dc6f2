"""One-token passes after a prompt, timed in rounds: `python -m bench.cpu_decode_rounds [--context N]
[--threads T] [--kv-dtype f16] [--rounds R] [--label TEXT]`.

Shorter than bench.cpu_decode_profile (one prefill, the compiled layers only), for comparing two
checkouts one right after the other on a busy machine: run it from each checkout's root with
PYTHONPATH=that checkout. Prints ms per token, the median and the least of the rounds (the least is
the round the other processes disturbed least), and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", default="f16")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--n-ctx", type=int, default=0, help="the cache's positions (default: what the run needs)")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    os.environ["HEARTH_THREADS"] = str(a.threads)

    import numpy as np  # noqa: PLC0415

    import hearth  # noqa: PLC0415
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.cpu_backend import CpuBackend  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415

    g = GGUFFile.open(default_model_path())
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=a.n_ctx or a.context + a.tokens + 8, kv_dtype=a.kv_dtype)
    ids = np.arange(100, 100 + a.context)
    be.forward(ids, 0)
    ts = []
    for r in range(a.rounds + 1):          # round 0 warms up
        t0 = time.perf_counter()
        for j in range(a.tokens):
            be.forward([int(ids[j % a.context])], a.context + j)
        if r:
            ts.append((time.perf_counter() - t0) / a.tokens * 1e3)
    print(f"{a.label:8s} context {a.context}, {a.threads} threads: median {statistics.median(ts):6.2f} "
          f"least {min(ts):6.2f} ms/token  load {os.getloadavg()[0]:.1f}  ({hearth.__file__})")


if __name__ == "__main__":
    main()
