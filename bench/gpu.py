"""GPU backend benchmark: `python -m bench.gpu [--model PATH] [--quick] [--no-numpy]`.

On the default model with the exact prompts of ../shared/reference/smollm2/bench_prompts.json
(HEARTH_REFERENCE overrides where that folder is): load time, prefill tokens/s at 512 and 2,000 (`--long N`: N)
tokens, decode tokens/s after 16 and after 2,000 tokens (greedy, with the on-GPU argmax a step at a
time, pipelined with the id kept on the GPU (GpuBackend.greedy_steps), and with full logits read
back), dispatches per decoded token, and the time to save (read_prefix of every layer) and
restore (write_prefix of every layer) a 2,000-token prefix's KV cache — with the numpy backend's
figures from the same run beside them. Timings are medians of --repeat runs after one warm-up.
HEARTH_GPU_ADAPTER picks the adapter by name.
"""

from __future__ import annotations

import argparse
import resource
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))


def med(f, repeat):
    vals = [f() for _ in range(repeat)]
    return statistics.median(vals), min(vals), max(vals)


def sync(be):
    if be.name == "gpu":
        be.dev.read([(be.amax, 0, 4)])


def prefill_tps(be, ids, repeat):
    def once():
        be.kv.clear()      # a recurrent state (qwen35) starts from zeros at position 0
        t = time.perf_counter()
        be.forward(np.asarray(ids, np.int32), 0)
        return len(ids) / (time.perf_counter() - t)
    once()  # warm-up (pipelines, caches)
    return med(once, repeat)


def decode_tps(be, ids, n, repeat, argmax=True, pipelined=False):
    def once():
        be.kv.clear()
        be.forward(np.asarray(ids, np.int32), 0)
        tok = 1
        pos = len(ids)
        t = time.perf_counter()
        if pipelined:
            for tok in be.greedy_steps(tok, pos, n):
                pass
            return n / (time.perf_counter() - t)
        for i in range(n):
            if argmax and hasattr(be, "forward_argmax"):
                tok = be.forward_argmax(np.array([tok], np.int32), pos + i)
            else:
                tok = int(be.forward(np.array([tok], np.int32), pos + i).argmax())
        return n / (time.perf_counter() - t)
    return med(once, repeat)


def prefix_times(be, n, repeat):
    be.kv.clear()
    be.forward(np.arange(n, dtype=np.int32) % 1000 + 100, 0)
    kv = be.kv

    def save():
        t = time.perf_counter()
        tensors = [kv.read_prefix(i, n) for i in range(getattr(kv, "image_layers", kv.n_layers))]  # a SplitKV: its first cache
        dt = time.perf_counter() - t
        save.tensors = [(np.array(k), np.array(v)) for k, v in tensors]
        return dt * 1e3

    def restore():
        t = time.perf_counter()
        for i, (k, v) in enumerate(save.tensors):
            kv.write_prefix(i, n, k, v)
        sync(be)
        return (time.perf_counter() - t) * 1e3
    s = med(save, repeat)
    r = med(restore, repeat)
    # the round trip is exact
    k0, v0 = save.tensors[0]
    k1, v1 = kv.read_prefix(0, n)
    assert np.array_equal(k0, k1) and np.array_equal(v0, v1)
    nbytes = sum(k.nbytes + v.nbytes for k, v in save.tensors)
    return s, r, nbytes


def run(kind, cfg, g, ids512, ids2000, a):
    nl = len(ids2000)
    t = time.perf_counter()
    if kind == "gpu":
        from hearth.engine.gpu import backend_class  # noqa: PLC0415
        be = backend_class(cfg)(cfg, g, a.n_ctx, kv_dtype=a.kv_dtype)
    else:
        from hearth.engine.cpu_backend import CpuBackend  # noqa: PLC0415
        be = CpuBackend(cfg, g, a.n_ctx)
    r = {"load s": time.perf_counter() - t}
    # memory: what the backend holds against the file's size (MoE experts stay in their GGUF types),
    # and this process's peak RSS after the load
    r["weights / file size"] = be.describe().get("weights_bytes", 0) / max(1, g.path.stat().st_size)
    r["peak RSS after load GiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    rep = a.repeat if kind == "gpu" else 1
    if a.decode16_only:
        r["decode after 16 tok/s"] = decode_tps(be, ids512[:16], a.decode_tokens, rep)
        r["decode after 16 tok/s (pipelined)"] = decode_tps(be, ids512[:16], a.decode_tokens, rep, pipelined=True)
        if kind == "gpu":
            be.forward_argmax(np.array([1], np.int32), 20)
            r["dispatches per token"] = be.last_dispatches
        r["describe"] = be.describe()
        be.close()
        return r
    r["prefill 512 tok/s"] = prefill_tps(be, ids512, rep)
    r[f"prefill {nl} tok/s"] = prefill_tps(be, ids2000, rep)
    if a.prefill_only:
        r["describe"] = be.describe()
        be.close()
        return r
    nd = a.decode_tokens if kind == "gpu" else max(8, a.decode_tokens // 8)
    r["decode after 16 tok/s"] = decode_tps(be, ids512[:16], nd, rep)
    if kind == "gpu":
        r["decode after 16 tok/s (pipelined)"] = decode_tps(be, ids512[:16], nd, rep, pipelined=True)
        r["decode after 16 tok/s (full logits)"] = decode_tps(be, ids512[:16], nd, rep, argmax=False)
    r[f"decode after {nl} tok/s"] = decode_tps(be, ids2000, nd, rep)
    if kind == "gpu":
        r[f"decode after {nl} tok/s (pipelined)"] = decode_tps(be, ids2000, nd, rep, pipelined=True)
    if kind == "gpu":
        be.forward_argmax(np.array([1], np.int32), 20)
        r["dispatches per token"] = be.last_dispatches
        # a full chunk's: the plan also holds each product's ops for shorter calls (ops.tiles_by_n)
        r["prefill dispatches (chunk)"] = sum(1 for op in be.prefill_plan.ops if not callable(op["groups"])
                                              or op["groups"](be.chunk, be.chunk)[0])
    s, rr, nbytes = prefix_times(be, len(ids2000), rep)
    r[f"prefix save {nl} ms"] = s
    r[f"prefix restore {nl} ms"] = rr
    r["prefix bytes"] = nbytes
    r["describe"] = be.describe()
    be.close()
    return r


def fmt(v):
    if isinstance(v, tuple):
        m, lo, hi = v
        return f"{m:,.1f} ({lo:,.1f}-{hi:,.1f})" if hi != lo else f"{m:,.1f}"
    if isinstance(v, float):
        return f"{v:,.2f}"
    return str(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run on a software adapter)")
    ap.add_argument("--no-numpy", action="store_true")
    ap.add_argument("--kv-dtype", default="f32", help="the GPU backend's KV cache: f32 or f16")
    ap.add_argument("--decode16-only", action="store_true", help="only decode after 16 tokens (a step at a time, pipelined)")
    ap.add_argument("--prefill-only", action="store_true", help="load and prefill figures only (no decode, no prefix)")
    ap.add_argument("--long", type=int, default=2000, help="tokens of the long prompt (the 2,000-token one, repeated)")
    a = ap.parse_args(argv)
    from hearth.engine.gpu import probe  # noqa: PLC0415
    p = probe()
    if p is None or (not p["real_gpu"] and not a.quick and not os.environ.get("HEARTH_GPU_ADAPTER")):
        # lavapipe runs the model at seconds a token: the full benchmark would take hours there
        print(f"bench.gpu: no real GPU adapter ({p['device'] if p else 'none'}); skipped. "
              "HEARTH_GPU_ADAPTER=<name> forces one; --quick is a smoke run.")
        return 0
    from hearth.engine.config import ModelConfig  # noqa: PLC0415
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415
    prompts = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())
    ids512, ids2000 = prompts["512"]["ids"], prompts["2000"]["ids"]
    if a.quick:
        ids512, ids2000, a.decode_tokens, a.repeat, a.n_ctx = ids512[:24], ids2000[:40], 3, 1, 128
    g = GGUFFile.open(a.model or default_model_path())
    cfg = ModelConfig.from_gguf(g)
    ids512 = [i % cfg.n_vocab for i in ids512]
    ids2000 = [i % cfg.n_vocab for i in ids2000]
    if a.long != 2000 and not a.quick:
        ids2000 = (ids2000 * (a.long // len(ids2000) + 1))[:a.long]
        a.n_ctx = max(a.n_ctx, a.long + a.decode_tokens + 64)
    kinds = ["gpu"] + ([] if a.no_numpy else ["cpu"])
    res = {}
    for k in kinds:
        res[k] = run(k, cfg, g, ids512, ids2000, a)
        print(f"{k}: done", flush=True)
    d = res["gpu"].pop("describe")
    for k in kinds[1:]:
        res[k].pop("describe")
    print(f"\nmodel {g.path.name}; GPU {d.get('device')} ({d.get('vendor')}, {d.get('driver')}, {d.get('backend_type')})")
    print(f"prompts {len(ids512)} / {len(ids2000)} tokens, {a.decode_tokens} decoded tokens, median of {a.repeat}\n")
    keys = list(res["gpu"])
    print("| figure | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for key in keys:
        print(f"| {key} | " + " | ".join(fmt(res[k].get(key, "")) for k in kinds) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
