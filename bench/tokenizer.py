"""Tokenizer benchmark: `python -m bench.tokenizer [--repeat N]`.

Construction time of the default model's tokenizer from its open GGUF (the budget is 300 ms),
encode and decode throughput on the 2,000-token bench prompt of
../shared/reference/smollm2/bench_prompts.json (checked against llama.cpp's ids first), and, for
scale, construction of larger vocabularies (Llama 3's 128k BPE, Gemma 3's 262k SentencePiece).
Medians of --repeat runs with min and max, because the machine is shared and timings move; the
construction is also given in CPU time, which other processes on the machine do not inflate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))


def _times(fn, repeat: int, clock=time.perf_counter) -> list[float]:
    out = []
    for _ in range(repeat):
        t = clock()
        fn()
        out.append(clock() - t)
    return out


def _row(name: str, times: list[float], unit: str, scale: float | None = None) -> dict:
    """A row in ms (scale None) or in units per second (scale = work per run)."""
    if scale is None:
        vals = [t * 1000 for t in times]
    else:
        vals = [scale / t for t in times]
    return {"name": name, "unit": unit, "median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "runs": len(vals)}


def run(repeat: int = 7) -> list[dict]:
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415
    from tests.model_paths import gemma3_model_path  # noqa: PLC0415
    from hearth.engine.tokenizer import Tokenizer  # noqa: PLC0415

    g = GGUFFile.open(default_model_path())
    build = lambda: Tokenizer.from_gguf(g)  # noqa: E731
    rows = [_row("construct default (SmolLM2, 49k BPE)", _times(build, repeat), "ms"),
            _row("  the same, CPU time of this process", _times(build, repeat, time.process_time), "ms")]
    tok = Tokenizer.from_gguf(g)

    prompt = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())["2000"]
    text, ids = prompt["text"], prompt["ids"]
    got = tok.encode(text, add_special=False, parse_special=False)
    if got != ids:
        raise SystemExit("bench.tokenizer: the tokenizer disagrees with llama.cpp's ids for the bench prompt")
    tok.decode(ids)  # builds the byte table once
    rows.append(_row(f"encode {len(ids)}-token prompt", _times(lambda: tok.encode(text), repeat), "tokens/s",
                     len(ids)))
    rows.append(_row(f"encode {len(text.encode())} bytes", _times(lambda: tok.encode(text), repeat), "MB/s",
                     len(text.encode()) / 1e6))
    rows.append(_row("decode", _times(lambda: tok.decode(ids), repeat), "tokens/s", len(ids)))

    def stream():
        dec = tok.stream_decoder()
        for i in ids:
            dec.feed(i)
        dec.flush()
    rows.append(_row("stream decode (one id at a time)", _times(stream, repeat), "tokens/s", len(ids)))

    others = [("construct Llama 3 (128k BPE)", REF / "vocab" / "ggml-vocab-llama-bpe.gguf"),
              ("construct Gemma 3 (262k SentencePiece)", gemma3_model_path())]
    for name, path in others:
        if path is not None and Path(path).exists():
            og = GGUFFile.open(path, check_types=False)
            rows.append(_row(name, _times(lambda: Tokenizer.from_gguf(og), max(1, repeat // 3)), "ms"))
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'benchmark':<42} {'median':>12} {'min':>12} {'max':>12}  unit")
    for r in rows:
        print(f"{r['name']:<42} {r['median']:>12,.1f} {r['min']:>12,.1f} {r['max']:>12,.1f}  {r['unit']}"
              f"  ({r['runs']} runs)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    print_table(run(a.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
