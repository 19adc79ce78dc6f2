"""Where a decoded token's time goes on the CPU: `python -m bench.cpu_decode_profile [--model PATH]
[--kv-dtype f16] [--threads T] [--context N] [--tokens N] [--repeat R]`.

One process, one backend: a prompt of `--context` ids, then `--tokens` one-token passes in a tight
loop (the Engine's sampling left out), timed; each round runs both one-token paths one after the
other (the compiled layers, engine/cpu/decode_layer.py, and the per-operation path,
HEARTH_CPU_COMPILED_LAYERS=0's), each with the matrix-vector products and again with them skipped
(every product gives zeros: the compiled layers' matrices given no rows, the per-operation path's
kernels replaced by a compiled call that writes zeros; x is still quantized, everything else runs),
so that what is left is the work around the kernels. Prints ms per token, medians over the rounds,
and whether both paths gave the same logits. Run on a checkout without the compiled layers
(PYTHONPATH=that checkout), it times its per-operation path alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--kv-dtype", default="f16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    os.environ["HEARTH_THREADS"] = str(a.threads)

    import numpy as np  # noqa: PLC0415
    from numba import njit  # noqa: PLC0415

    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.cpu.linear import Linear  # noqa: PLC0415
    from hearth.engine.cpu_backend import CpuBackend  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415

    g = GGUFFile.open(a.model or default_model_path())
    be = CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=a.context + a.tokens + 8, kv_dtype=a.kv_dtype)
    dec = be.model
    reason = getattr(dec, "compiled_reason", "not in this checkout")
    print(f"{g.path.name}: compiled layers {'yes' if reason is None else 'no: ' + reason}, "
          f"{a.threads} threads, {a.kv_dtype} KV, context {a.context}, {a.tokens} tokens")

    @njit(nogil=True, cache=True)
    def zeros(ws, q, d, s, out, scales):
        out[:] = 0.0

    linears = [p for m in dec._matrices() for p in m.parts if isinstance(p, Linear)]
    kernels = {id(p): p._matvec8 for p in linears}

    def skip(on: bool) -> None:
        for p in linears:
            p._matvec8 = zeros if on else kernels[id(p)]
        comp = getattr(dec, "compiled", None)
        if comp is not None:
            if not hasattr(comp, "_rows"):
                comp._rows = comp.meta[:, :, 1].copy()
            comp.meta[:, :, 1] = 0 if on else comp._rows

    ids = np.arange(100, 100 + a.context)
    modes = [("compiled", True, False), ("per-operation", False, False),
             ("compiled, kernels skipped", True, True), ("per-operation, kernels skipped", False, True)]
    if reason is not None:
        modes = [m for m in modes if not m[1]]
    times: dict[str, list[float]] = {m[0]: [] for m in modes}
    last: dict[str, np.ndarray] = {}
    for r in range(a.repeat + 1):          # round 0 warms up (compiles, first touches)
        for name, compiled, skipped in modes:
            dec.compiled_on = compiled
            skip(skipped)
            be.kv.clear()
            be.forward(ids, 0)
            t0 = time.perf_counter()
            for j in range(a.tokens):
                out = be.forward([int(ids[j % len(ids)])], a.context + j)
            last[name] = out
            if r:
                times[name].append((time.perf_counter() - t0) / a.tokens * 1e3)
    skip(False)
    for name, ts in times.items():
        print(f"  {name:32s} {statistics.median(ts):6.2f} ms/token  ({min(ts):.2f}..{max(ts):.2f})")
    if reason is None:
        same = np.array_equal(last["compiled"], last["per-operation"])
        print(f"  last logits of both paths bit-identical: {same}")
    print(f"  load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
