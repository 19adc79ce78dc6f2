"""Two models side by side on ten everyday prompts: `python -m bench.model_compare [--out FILE]`.

SmolLM2-135M (the default) and Qwen2.5-Coder-0.5B (both from their PyPI packages). Each model runs
in a fresh process, one after the other (never at once: the figures are CPU time on a shared machine):
the start (imports, then Engine.load, then the first reply's first token: what a user waits for
before the first word, numba's kernel cache warm), then each prompt greedily with the model's own
chat template, at most --max-tokens tokens. Printed: the figures and every reply, for reading.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

T0 = time.perf_counter()

PROMPTS = [
    "Write a short, friendly email asking a colleague to move our meeting to Thursday.",
    "What is the capital of Australia?",
    "Give me three tips for sleeping better.",
    "Explain what a VPN is in two sentences.",
    "Translate 'Where is the train station?' into French and Spanish.",
    "I have eggs, spinach and cheese. Suggest a quick dinner.",
    "Write a Python function that checks if a string is a palindrome.",
    "What is 15% of 80?",
    "Summarize the plot of Romeo and Juliet in three sentences.",
    "My laptop is running slow. What should I check first?",
]
SYSTEM = "You are a helpful assistant."


def one(key: str, max_tokens: int) -> dict:
    """Runs in the child process: the start, then every prompt."""
    from hearth.engine import Engine, Sampling  # noqa: PLC0415
    from hearth.engine.library.packaged import by_key, model_path  # noqa: PLC0415
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from model_paths import test_models_cache  # noqa: PLC0415
    t_import = time.perf_counter() - T0
    model = by_key(key)
    path = model_path(model, test_models_cache())
    t = time.perf_counter()
    eng = Engine.load(path)
    t_load = time.perf_counter() - t
    rows, first_token = [], None
    for q in PROMPTS:
        prompt = eng.render_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
        text, stats = "", None
        for ev in eng.generate(prompt, max_tokens=max_tokens, sampling=Sampling(temperature=0)):
            text += ev.text
            if first_token is None and ev.token_id is not None:
                first_token = time.perf_counter() - T0
            stats = ev.stats or stats
        rows.append({"prompt": q, "reply": text, "tokens": stats.generated_tokens,
                     "prefill_tps": round(stats.prefill_tps, 1), "decode_tps": round(stats.decode_tps, 1),
                     "ttft_s": round(stats.ttft_s, 2)})
    return {"key": key, "name": model.name, "download_bytes": model.size, "import_s": round(t_import, 2),
            "load_s": round(t_load, 2), "first_token_s": round(first_token, 2), "rows": rows}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.max_tokens)))
        return 0
    results = []
    for key in ("smollm2-135m", "qwen2.5-coder-0.5b"):
        r = subprocess.run([sys.executable, "-m", "bench.model_compare", "--one", key,
                            "--max-tokens", str(args.max_tokens)], capture_output=True, text=True, check=True)
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
    a, b = results
    med = lambda r, k: sorted(x[k] for x in r["rows"])[len(r["rows"]) // 2]  # noqa: E731
    print(f"| | {a['name']} | {b['name']} |\n|---|---|---|")
    print(f"| download | {a['download_bytes'] / 1e6:.0f} MB | {b['download_bytes'] / 1e6:.0f} MB |")
    for label, k in (("imports", "import_s"), ("Engine.load", "load_s"), ("start to first token", "first_token_s")):
        print(f"| {label} | {a[k]} s | {b[k]} s |")
    for label, k in (("prefill tokens/s (median)", "prefill_tps"), ("decode tokens/s (median)", "decode_tps")):
        print(f"| {label} | {med(a, k)} | {med(b, k)} |")
    for ra, rb in zip(a["rows"], b["rows"]):
        print(f"\n### {ra['prompt']}\n-- {a['name']} ({ra['tokens']} tokens):\n{ra['reply']}\n"
              f"-- {b['name']} ({rb['tokens']} tokens):\n{rb['reply']}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
