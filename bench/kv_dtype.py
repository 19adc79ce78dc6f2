"""KV cache precision, float32 vs float16, side by side: `python -m bench.kv_dtype [--repeat 5] [--backend cpu]`.

One process, two engines of the default model (n_ctx 4096), one with each dtype, measured in turns
(so both see the same machine load): decode ms per token after 16 and after 2,000 tokens of context,
prefill of 512 tokens, the KV cache's memory, and the bytes per token of a prefix image (the same
layout as a chat segment). Medians of `--repeat` rounds.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))
DTYPES = ("f32", "f16")


def decode_ms(eng, ctx_ids: list[int], n: int) -> float:
    """ms per token of n greedy-free decode steps (fixed ids) after ctx_ids are resident."""
    eng.prefill(ctx_ids)
    eng.feed([13])                    # the first step after a prefill pays for cold caches: not timed
    t = time.perf_counter()
    for i in range(n):
        eng.feed([100 + i])
    ms = (time.perf_counter() - t) / n * 1000
    eng.truncate(len(ctx_ids))
    return ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    a = ap.parse_args(argv)
    from hearth.engine import Engine  # noqa: PLC0415
    engs = {dt: Engine.load(n_ctx=4096, backend=a.backend, kv_dtype=dt) for dt in DTYPES}
    words = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())["2000"]["text"]
    long_ids = engs["f32"].tokenize(words * 2)[:2000]
    short_ids, pre_ids = long_ids[:16], long_ids[:512]
    res = {dt: {"decode after 16": [], "decode after 2000": [], "prefill 512": []} for dt in DTYPES}
    for _ in range(a.repeat):
        for dt, e in engs.items():
            e.reset()
            t = time.perf_counter()
            e.prefill(pre_ids)
            res[dt]["prefill 512"].append(len(pre_ids) / (time.perf_counter() - t))
            e.reset()
            res[dt]["decode after 16"].append(decode_ms(e, short_ids, a.decode_tokens))
            res[dt]["decode after 2000"].append(decode_ms(e, long_ids, a.decode_tokens))
    image = {}
    for dt, e in engs.items():
        ids = long_ids[:1000]
        size = e.save_prefix(ids, io.BytesIO())
        image[dt] = (size, e.prefix_header(ids).tensor_bytes * 2 * e.kv.n_layers / len(ids))
    print(f"default model, backend {a.backend}, n_ctx 4096, {a.repeat} rounds alternating (medians, range), "
          f"load avg {os.getloadavg()[0]:.1f}, {time.strftime('%H:%M')}\n")
    print("| measure | float32 | float16 | f16 / f32 |")
    print("|---|---:|---:|---:|")
    for m, unit in (("decode after 16", "ms/token"), ("decode after 2000", "ms/token"), ("prefill 512", "tok/s")):
        med = {dt: statistics.median(res[dt][m]) for dt in DTYPES}
        cells = [f"{med[dt]:.1f} ({min(res[dt][m]):.1f}..{max(res[dt][m]):.1f})" for dt in DTYPES]
        print(f"| {m} ({unit}) | " + " | ".join(cells) + f" | {med['f16'] / med['f32']:.2f} |")
    kv = {dt: e.kv.nbytes for dt, e in engs.items()}
    print(f"| KV cache at n_ctx 4096 | {kv['f32'] / 2**20:.0f} MiB | {kv['f16'] / 2**20:.0f} MiB | "
          f"{kv['f16'] / kv['f32']:.2f} |")
    print(f"| image K/V bytes per token | {image['f32'][1]:,.0f} | {image['f16'][1]:,.0f} | "
          f"{image['f16'][1] / image['f32'][1]:.2f} |")
    print(f"| image of 1,000 tokens (with ids, logits) | {image['f32'][0]:,} | {image['f16'][0]:,} | "
          f"{image['f16'][0] / image['f32'][0]:.2f} |")
    for e in engs.values():
        e.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
