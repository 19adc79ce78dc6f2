"""CPU engine benchmark, Hearth beside llama.cpp: `python -m bench.cpu [--model PATH] [--repeat N]
[--llama-python PY] [--threads T] [--no-long] [--long N] [--warm] [--before CHECKOUT]`.

For one GGUF file (default: the default model), n_ctx 4096: load time, prefill tokens/s at 512 and
2,000 tokens (`--long N`: N tokens, the prompts' ids repeated), decode tokens/s after a 16-token and
after the long prompt, peak RSS. `--warm` reads the file through before each child (its pages in the
page cache, so load times compare engines, not the disk or the VM's first touch). Every
measurement runs in a fresh process (so peak RSS is that engine's alone), Hearth and llama.cpp
alternating, `--repeat` times; the table gives medians, the ratio Hearth / llama.cpp and the
spread, with the load average, because the machine is shared and timings move.

The prompts are ../shared/reference/smollm2/bench_prompts.json's texts, tokenized by Hearth; both
engines are fed the same ids. llama.cpp runs through llama-cpp-python from `--llama-python` (an
interpreter where it is installed; the env var HEARTH_LLAMA_PYTHON works too), with n_threads and
n_threads_batch = --threads (default: all cores), n_batch 512, its default f16 KV cache.
`--threads T` also holds Hearth to T threads (HEARTH_THREADS=T in its process), so both engines run on
the same count; without it llama.cpp runs on all cores and Hearth makes its own choice (what the app
does). `--before CHECKOUT` adds the Hearth of another checkout (for example the main branch) to the
same alternation: before and after a change, measured side by side.
Each Hearth checkout's modules are byte-compiled first (`compileall`), as an installed package's are:
with PYTHONDONTWRITEBYTECODE set, every child would otherwise compile Hearth's sources again (~0.1 s
of its load).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))
MEASURES = ["load s", "prefill 512", "prefill long", "decode after 16", "decode after long", "peak RSS MiB"]

# Run by the child interpreter (Hearth's or llama.cpp's): prints one JSON line of measurements.
CHILD = r"""
import json, os, resource, sys, time
engine_kind, model, ids_file, n_dec, threads, long_, kv_dtype = sys.argv[1:8]
n_dec, threads, long_ = int(n_dec), int(threads), long_ == "1"
ids = json.load(open(ids_file))
n_ctx = max(4096, len(ids["long"]) + n_dec + 16)
t0 = time.perf_counter()
if engine_kind == "hearth":
    sys.path.insert(0, os.environ["HEARTH_ROOT"])
    from hearth.engine import Engine
    eng = Engine.load(model, backend="cpu", n_ctx=n_ctx, kv_dtype=kv_dtype)
    load = time.perf_counter() - t0
    def reset(): eng.reset()
    def feed(toks): return eng.feed(toks)
else:
    import numpy as np
    from llama_cpp import Llama
    ggml_type = {"f32": 0, "f16": 1}[kv_dtype]   # GGML_TYPE_F32, GGML_TYPE_F16 (llama.cpp's default)
    llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
                type_k=ggml_type, type_v=ggml_type, verbose=False)
    load = time.perf_counter() - t0
    def reset(): llm.reset()
    def feed(toks):
        llm.eval(toks)  # the last position's logits, as llama.cpp left them
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
def prefill(toks):
    reset()
    t = time.perf_counter(); out = feed(toks); return len(toks) / (time.perf_counter() - t), out
def decode(logits):
    t = time.perf_counter()
    for _ in range(n_dec):
        logits = feed([int(logits.argmax())])
    return n_dec / (time.perf_counter() - t)
res = {"load s": load}
res["prefill 512"], _ = prefill(ids["512"])
reset(); res["decode after 16"] = decode(feed(ids["512"][:16]))
if long_:
    res["prefill long"], logits = prefill(ids["long"])
    res["decode after long"] = decode(logits)
res["peak RSS MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
res["load avg"] = os.getloadavg()[0]
print("RESULT " + json.dumps(res))
"""


def run_child(kind: str, py: str, model: str, ids_file: str, n_dec: int, threads: int, long_: bool,
              kv_dtype: str = "f32", root: Path = ROOT, hold_threads: bool = False) -> dict:
    env = dict(os.environ, HEARTH_ROOT=str(root))
    if hold_threads and kind == "hearth":
        env["HEARTH_THREADS"] = str(threads)
    p = subprocess.run([py, "-c", CHILD, kind, model, ids_file, str(n_dec), str(threads), "1" if long_ else "0",
                        kv_dtype],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{kind} run failed:\n{p.stderr[-3000:]}")


def warm_pages(path: str, chunk: int = 64 << 20) -> float:
    """Reads the file once so its pages are in the page cache; returns the seconds it took."""
    t = time.perf_counter()
    buf = bytearray(chunk)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of both engines (default: all cores for llama.cpp, Hearth's own choice)")
    ap.add_argument("--llama-python", default=os.environ.get("HEARTH_LLAMA_PYTHON"))
    ap.add_argument("--no-long", action="store_true", help="skip the long prompt")
    ap.add_argument("--long", type=int, default=2000, help="tokens of the long prompt (default 2,000)")
    ap.add_argument("--warm", action="store_true", help="read the file through before each child")
    ap.add_argument("--kv-dtype", choices=["f32", "f16"], default="f32",
                    help="KV cache precision of both engines (llama.cpp's default is f16: like for like)")
    ap.add_argument("--before", type=Path, default=None,
                    help="another checkout's Hearth, measured in the same alternation (column 'before')")
    a = ap.parse_args(argv)
    held = a.threads is not None
    if not held:
        a.threads = os.cpu_count() or 1
    sys.path.insert(0, str(ROOT))
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415
    from hearth.engine.tokenizer import Tokenizer  # noqa: PLC0415
    model = str(a.model or default_model_path())
    prompts = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())
    tok = Tokenizer.from_gguf(GGUFFile.open(model))
    ids = {k: tok.encode(prompts[k]["text"], add_special=False, parse_special=False) for k in ("512", "2000")}
    long_ids = (ids["2000"][:2000] * (a.long // 2000 + 1))[:a.long]
    ids = {"512": ids["512"][:512], "long": long_ids}
    ids_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"hearth-bench-ids-{os.getpid()}.json"
    ids_file.write_text(json.dumps(ids))
    # (column, interpreter, Hearth checkout or None for llama.cpp)
    engines = ([("before", sys.executable, a.before.resolve())] if a.before else []) + [("hearth", sys.executable, ROOT)]
    engines += [("llama.cpp", a.llama_python, None)] if a.llama_python else []
    runs: dict[str, list[dict]] = {k: [] for k, _, _ in engines}
    for _, _, root in engines:
        if root is not None:
            compileall.compile_dir(str(root / "hearth"), quiet=1)
    try:
        for _ in range(a.repeat):
            for kind, py, root in engines:
                if a.warm:
                    warm_pages(model)
                runs[kind].append(run_child("llama" if root is None else "hearth", py, model, str(ids_file),
                                            a.decode_tokens, a.threads, not a.no_long, a.kv_dtype, root or ROOT, held))
                print(kind, json.dumps({k: round(v, 2) for k, v in runs[kind][-1].items()}), flush=True)
    finally:
        ids_file.unlink(missing_ok=True)
    loads = [r["load avg"] for rs in runs.values() for r in rs]
    print(f"model {Path(model).name} ({os.path.getsize(model) / 2**20:,.0f} MiB), long {a.long}, KV {a.kv_dtype}, "
          f"{a.repeat} runs each "
          f"alternating, {a.threads} threads for llama.cpp, "
          f"{f'{a.threads} for Hearth' if held else 'Hearth its own choice'}, load avg {min(loads):.1f}..{max(loads):.1f}, "
          f"{time.strftime('%H:%M')}")
    mine = [k for k, _, root in engines if root is not None]
    vs = "llama.cpp" in runs
    head = "| measure | " + " | ".join(k for k, _, _ in engines) + "".join(f" | {k} / llama.cpp" for k in mine if vs) + " |"
    print(head)
    print("|---" * (len(engines) + 1 + (len(mine) if vs else 0)) + "|")
    for m in MEASURES:
        label = m.replace("long", str(a.long))
        if not all(m in r for rs in runs.values() for r in rs):
            continue
        med = {k: statistics.median(r[m] for r in rs) for k, rs in runs.items()}
        cells = []
        for k, rs in runs.items():
            lo, hi = min(r[m] for r in rs), max(r[m] for r in rs)
            fmt = "{:.2f}" if m == "load s" else "{:.0f}" if m == "peak RSS MiB" else "{:.1f}"
            cells.append(fmt.format(med[k]) + (f" ({fmt.format(lo)}..{fmt.format(hi)})" if len(rs) > 1 else ""))
        ratio = "".join(f" | {med[k] / med['llama.cpp']:.2f}x" for k in mine) if vs and med["llama.cpp"] else ""
        print(f"| {label} | " + " | ".join(cells) + ratio + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
