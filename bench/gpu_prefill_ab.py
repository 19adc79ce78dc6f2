"""Prefill with f16 products against int8 products, side by side in one process:
`python -m bench.gpu_prefill_ab --model PATH [--repeat 3] [--no-check] [--quick]`.

Two GpuBackends of one file: `mm8=False` (the plan HEARTH_GPU_MM8=0 gives) and `mm8=True` (int8
products for every type ops.matmul8 reads). bench.gpu's prompts (512 and 2,000 tokens) and its
prefill timing (median of --repeat after a warm-up, range in brackets), each pair timed twice in
alternation. Then, unless --no-check, the last position's logits and the K cache of the 512-token
prefill with f16 and with int8 products, each against f32 products (a third backend): centered
|dlogit| mean and max, argmax, the K cache's relative error by layer (bench/README.md, round 8).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from bench.gpu import REF, prefill_tps


def _fmt(r):
    return f"{r[0]:,.0f} ({r[1]:,.0f}-{r[2]:,.0f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--no-check", action="store_true", help="timings only")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run on a software adapter)")
    a = ap.parse_args(argv)
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.gpu import GpuBackend  # noqa: PLC0415
    g = GGUFFile.open(a.model)
    cfg = ModelConfig.from_gguf(g)
    prompts = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())
    ids512 = [i % cfg.n_vocab for i in prompts["512"]["ids"]]
    ids2000 = [i % cfg.n_vocab for i in prompts["2000"]["ids"]]
    if a.quick:
        ids512, ids2000, a.repeat, a.n_ctx = ids512[:24], ids2000[:40], 1, 128
    t = time.perf_counter()
    b16 = GpuBackend(cfg, g, a.n_ctx, f16=True, mm8=False)
    l16 = time.perf_counter() - t
    t = time.perf_counter()
    b8 = GpuBackend(cfg, g, a.n_ctx, f16=True, mm8=True)
    l8 = time.perf_counter() - t
    nq = sum(op["label"].endswith(".q8") for op in b8.prefill_plan.ops)
    print(f"{g.path.name}: load f16 {l16:.2f} s, int8 {l8:.2f} s; prefill ops f16 {len(b16.prefill_plan.ops)}, "
          f"int8 {len(b8.prefill_plan.ops)} ({nq} quantize passes)", flush=True)
    for ids in (ids512, ids2000):
        r = [prefill_tps(be, ids, a.repeat) for be in (b16, b8, b16, b8)]
        print(f"  prefill {len(ids)}: f16 {_fmt(r[0])}, again {_fmt(r[2])} | int8 {_fmt(r[1])}, again {_fmt(r[3])} | "
              f"ratio {r[1][0] / r[0][0]:.3f}, {r[3][0] / r[2][0]:.3f}", flush=True)
    if a.no_check:
        b16.close()
        b8.close()
        return 0
    n = len(ids512)
    res = {}

    def keep(name, be):
        lg = be.forward(np.asarray(ids512, np.int32), 0).copy()
        res[name] = (lg, [np.asarray(be.kv.read_prefix(i, n)[0], np.float32).copy() for i in range(cfg.n_layer)])
        be.close()
    keep("f16", b16)
    keep("int8", b8)
    keep("f32", GpuBackend(cfg, g, a.n_ctx, f16=False, mm8=False))
    for x, y in (("f16", "f32"), ("int8", "f32"), ("int8", "f16")):
        la, ka = res[x]
        lb, kb = res[y]
        d = np.abs((la - la.mean()) - (lb - lb.mean()))
        kr = [float(np.linalg.norm(p - q) / np.linalg.norm(q)) for p, q in zip(ka, kb)]
        top = np.sort(lb)[-2:]
        print(f"  {x} vs {y} ({n} tokens): logits centered |d| mean {d.mean():.4f} max {d.max():.4f} "
              f"(span {lb.max() - lb.min():.1f}); argmax {int(la.argmax())} / {int(lb.argmax())} "
              f"(top two {top[1] - top[0]:.2f} apart); K rel err by layer: "
              + ", ".join(f"{i} {kr[i]:.1e}" for i in sorted({0, 1, min(2, len(kr) - 1), len(kr) - 1}))
              + f", max {max(kr):.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
