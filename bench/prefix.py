"""Prefix-image benchmark: `python -m bench.prefix [--sizes 500,2000,4000] [--repeat N] [--model PATH]`.

For prefixes of 500, 2,000 and 4,000 tokens on the default model (n_ctx 4096), a system turn made
of the Python LICENSE text of ../shared/reference/smollm2/bench_prompts.json:
  - write: save_prefix to a file in a temporary folder, fsync included;
  - restore: restore_prefix from that file into a reset engine, the file in the page cache (warm);
    median of --repeat runs, plus the first restore into a freshly loaded engine (its cache pages
    not yet touched);
  - recompute: prefill of the prefix from an empty cache (one run: it is the slow side);
  - time to first token of a ~20-token user message: after a restore (restore + the message's
    prefill + the first sample) versus after recomputing (prefix prefill + the same);
  - image size.
Goals (standard 2-core machine): restoring 2,000 tokens >= 100x faster than recomputing and
<= 60 ms warm; first token after a restore <= 250 ms. Wall and CPU times are both printed
because the machine is shared and wall times move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))
USER_MESSAGE = "Summarize the license above in one short sentence."


def prefix_ids(eng, n: int) -> list[int]:
    """A whole system turn of exactly n tokens: the license text, repeated as needed, cut to fit."""
    text = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())["2000"]["text"]
    head, tail = eng.tokenize("<|im_start|>system\n"), eng.tokenize("<|im_end|>\n")
    body = eng.tokenize(text, special=False)
    ids = list(head)
    while len(ids) < n:
        ids += body
    return ids[:n - len(tail)] + tail


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def bench_size(eng, fresh_engine, n: int, repeat: int, tmp: Path) -> dict:
    from hearth.engine import Sampling  # noqa: PLC0415
    ids = prefix_ids(eng, n)
    msg = eng.tokenize(f"<|im_start|>user\n{USER_MESSAGE}<|im_end|>\n<|im_start|>assistant\n")
    greedy = Sampling.greedy()
    r: dict = {"n": n, "msg": len(msg)}

    eng.reset()
    _, r["recompute_s"], r["recompute_cpu"] = timed(lambda: eng.prefill(ids))
    # First token after recomputing: the prefix (just measured) + the message + the first sample.
    ev = list(eng.generate(ids + msg, max_tokens=1, sampling=greedy))
    r["ttft_recompute_s"] = r["recompute_s"] + ev[-1].stats.ttft_s
    assert ev[-1].stats.computed_tokens == len(msg)

    path = tmp / f"prefix{n}.hpx"
    eng.truncate(n)
    eng.prefill(ids)  # the prefix alone resident again, with its logits

    def write():
        with open(path, "wb", buffering=0) as f:
            eng.save_prefix(ids, f)
            os.fsync(f.fileno())
    writes = []
    for _ in range(repeat):
        writes.append(timed(write)[1:])
    r["write_s"] = statistics.median(w for w, _ in writes)
    r["size"] = path.stat().st_size

    def restore(e):
        with open(path, "rb", buffering=0) as f:
            return e.restore_prefix(ids, f)
    _, r["restore_first_s"], _ = timed(lambda: restore(fresh_engine))  # cache pages never touched
    fresh_engine.reset()
    runs, ttfts = [], []
    for _ in range(repeat):
        eng.reset()
        runs.append(timed(lambda: restore(eng))[1:])
        eng.reset()
        t = time.perf_counter()
        restore(eng)
        ev = list(eng.generate(ids + msg, max_tokens=1, sampling=greedy))
        ttfts.append(time.perf_counter() - t)
        assert (ev[-1].stats.reused_tokens, ev[-1].stats.computed_tokens) == (n, len(msg))
    r["restore_s"] = statistics.median(w for w, _ in runs)
    r["restore_min_s"] = min(w for w, _ in runs)
    r["restore_cpu"] = statistics.median(c for _, c in runs)
    r["ttft_restore_s"] = statistics.median(ttfts)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="500,2000,4000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", default=None)
    a = ap.parse_args(argv)
    from hearth.engine import Engine  # noqa: PLC0415
    sizes = [int(s) for s in a.sizes.split(",")]
    eng = Engine.load(a.model, backend="cpu", n_ctx=4096)
    fresh = Engine.load(a.model, backend="cpu", n_ctx=4096)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hearth-bench-prefix-") as tmp:
        for n in sizes:
            rows.append(bench_size(eng, fresh, n, a.repeat, Path(tmp)))
            fresh.reset()
    print(f"model {eng.gguf.path.name}, backend cpu, {a.repeat} runs (medians), "
          f"load avg {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    print("| prefix tokens | image | write | restore (warm) | restore, fresh engine | recompute "
          "| recompute / restore | first token after restore | first token after recompute | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:,} | {r['size'] / 1e6:.1f} MB | {r['write_s'] * 1e3:.0f} ms "
              f"| {r['restore_s'] * 1e3:.1f} ms (min {r['restore_min_s'] * 1e3:.1f}, CPU {r['restore_cpu'] * 1e3:.0f}) "
              f"| {r['restore_first_s'] * 1e3:.0f} ms "
              f"| {r['recompute_s']:.2f} s (CPU {r['recompute_cpu']:.2f}) | {r['recompute_s'] / r['restore_s']:.0f}x "
              f"| {r['ttft_restore_s'] * 1e3:.0f} ms | {r['ttft_recompute_s']:.2f} s "
              f"| {r['ttft_recompute_s'] / r['ttft_restore_s']:.0f}x |")
    print(f"(user message: {rows[0]['msg']} tokens after the prefix)")
    by_n = {r["n"]: r for r in rows}
    if 2000 in by_n:
        r = by_n[2000]
        print(f"goals at 2,000 tokens: restore {r['restore_s'] * 1e3:.1f} ms (<= 60), "
              f"{r['recompute_s'] / r['restore_s']:.0f}x faster than recompute (>= 100), "
              f"first token after restore {r['ttft_restore_s'] * 1e3:.0f} ms (<= 250)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
