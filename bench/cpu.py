"""CPU engine benchmark: `python -m bench.cpu [--repeat N] [--chunk C] [--model PATH]`.

The exact prompts of ../shared/reference/smollm2/bench_prompts.json on the default model (n_ctx
4096): load time, prefill tokens/s at 512 and 2,000 tokens, decode tokens/s after a 16-token and
after the 2,000-token prompt, peak RSS. Medians of --repeat runs; the spread is printed too,
because the machine is shared and timings move.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))


class Timer:
    """Wall time and this process's CPU time (all threads) of a block."""

    def __enter__(self):
        self.t, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.t, time.process_time() - self.c


def decode(eng, logits, n):
    with Timer() as t:
        for _ in range(n):
            logits = eng.feed([int(logits.argmax())])
    return n / t.wall, n / t.cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--decode-tokens", type=int, default=48)
    a = ap.parse_args(argv)
    prompts = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())
    from engine import Engine  # noqa: PLC0415

    t = time.perf_counter()
    eng = Engine.load(a.model, backend="cpu", n_ctx=4096)
    load_s = time.perf_counter() - t
    if a.chunk:
        eng.backend.chunk = a.chunk
    ids512, ids2000 = prompts["512"]["ids"], prompts["2000"]["ids"]
    assert eng.tokenize(prompts["2000"]["text"], special=False) == ids2000, "tokenizer disagrees with the bench ids"
    rows = {"prefill 512": [], "prefill 2000": [], "decode after 16": [], "decode after 2000": []}
    cpu = {k: [] for k in rows}
    threads = set()

    def prefill(ids, key):
        eng.reset()
        with Timer() as t:
            out = eng.feed(ids)
        rows[key].append(len(ids) / t.wall)
        cpu[key].append(len(ids) / t.cpu)
        threads.add(eng.backend.threads)
        return out

    for _ in range(a.repeat):
        prefill(ids512, "prefill 512")
        eng.reset()
        w, c = decode(eng, eng.feed(ids512[:16]), a.decode_tokens)
        rows["decode after 16"].append(w)
        cpu["decode after 16"].append(c)
        logits = prefill(ids2000, "prefill 2000")
        w, c = decode(eng, logits, a.decode_tokens)
        rows["decode after 2000"].append(w)
        cpu["decode after 2000"].append(c)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    goals = {"prefill 512": None, "prefill 2000": 300, "decode after 16": 35, "decode after 2000": 25}
    print(f"model {eng.gguf.path.name}, chunk {eng.backend.chunk}, {a.repeat} runs, threads used {sorted(threads)}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')!r}, load avg {os.getloadavg()[0]:.1f}")
    print("| measure | median | min..max | per CPU-second (all threads) | goal |")
    print("|---|---|---|---|---|")
    print(f"| load | {load_s:.2f} s | | | <= 1.5 s |")
    for k, v in rows.items():
        g = goals[k]
        print(f"| {k} (tok/s) | {statistics.median(v):.1f} | {min(v):.1f}..{max(v):.1f} | "
              f"{statistics.median(cpu[k]):.1f} | {'>= ' + str(g) if g else ''} |")
    print(f"| peak RSS | {rss:.0f} MiB | | | <= 1229 MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
