"""The first restore after a start vs the next ones: `python -m bench.first_restore [--tokens 1700] [--repeat 3]`.

A preset prefix of ~--tokens tokens is saved once; then, each in a new process, the default model is
loaded (n_ctx 4096) and the image restored twice (reset between): once with the KV cache's pages made
resident by the background thread `Engine.load` starts (waited for, as a user's first click comes
seconds after the window opens), once with that thread disabled (first touches inside the restore).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def text_of(n: int) -> str:
    return "<|im_start|>system\n" + "You are a careful assistant who answers every question. " * (n // 11) + "<|im_end|>\n"


def child(cache: str, tokens: int, prefault: bool) -> dict:
    from hearth.engine import Engine
    from hearth.engine.prefix import PrefixStore
    if not prefault:
        Engine._start_prefault = lambda self: None
    eng = Engine.load(n_ctx=4096)
    if prefault:
        eng._prefault.join()
    store = PrefixStore(cache)
    out = []
    for _ in range(3):
        eng.reset()
        t = time.perf_counter()
        r = store.ensure(eng, text_of(tokens))
        out.append((time.perf_counter() - t, r.action, r.n_tokens))
    return {"first": out[0][0], "next": statistics.median(x[0] for x in out[1:]), "action": out[0][1],
            "tokens": out[0][2]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1700)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=("on", "off"))
    ap.add_argument("--cache")
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.cache, args.tokens, args.child == "on")))
        return 0
    with tempfile.TemporaryDirectory() as d:
        from hearth.engine import Engine
        from hearth.engine.prefix import PrefixStore
        eng = Engine.load(n_ctx=4096)
        PrefixStore(d).ensure(eng, text_of(args.tokens))
        eng.close()
        runs = {"on": [], "off": []}
        for _ in range(args.repeat):
            for mode in ("on", "off"):  # alternated: both see the same load
                r = subprocess.run([sys.executable, "-m", "bench.first_restore", "--child", mode, "--cache", d,
                                    "--tokens", str(args.tokens)], cwd=ROOT, capture_output=True, text=True)
                line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
                if not line:
                    print(r.stderr[-2000:])
                    return 1
                runs[mode].append(json.loads(line[0][7:]))
    n = runs["on"][0]["tokens"]
    print(f"prefix image of {n:,} tokens, n_ctx 4096, {args.repeat} processes each (medians; runs in brackets)\n")
    print("| KV pages | first restore after load | next restores |")
    print("|---|---:|---:|")
    for mode, label in (("on", "made resident in the background after load"), ("off", "background thread off: pages first touched and key fields first computed by the restore")):
        f = [r["first"] * 1000 for r in runs[mode]]
        x = [r["next"] * 1000 for r in runs[mode]]
        print(f"| {label} | {statistics.median(f):.0f} ms ({', '.join(f'{v:.0f}' for v in f)}) | "
              f"{statistics.median(x):.0f} ms ({', '.join(f'{v:.0f}' for v in x)}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
