"""Load benchmark: `python -m bench.load [--repeat N]`.

How long the default model takes to become usable: opening it with metadata and tensor index
ready (the budget is 100 ms), dequantizing every tensor to float32 (what the CPU engine does at
load; the budget is well under 1 s), and building its tokenizer (measured in full by
bench.tokenizer; here for the total). Medians of --repeat runs with min and max beside them,
because the machine is shared and single timings move. The page cache is warm after the first
run, as it is for a user who has opened the model before.

`run()` returns rows `(name, value, unit)`; a value is "n/a" where the piece does not exist yet.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

Row = tuple[str, object, str]


class _Timed(list):
    """Wall-clock seconds of each run, with `.cpu`: the process's CPU seconds of each run (all
    threads). On a busy shared machine wall time swells while CPU time stays put; both are shown."""
    cpu: list[float]


def _times(fn, repeat: int) -> _Timed:
    out = _Timed()
    out.cpu = []
    for _ in range(repeat):
        gc.collect()
        c, t = time.process_time(), time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
        out.cpu.append(time.process_time() - c)
    return out


def _ms(times: list[float]) -> str:
    """'median (min..max)' in ms, with the median CPU time when known."""
    ms = sorted(t * 1000 for t in times)
    text = f"{statistics.median(ms):.1f} ({ms[0]:.1f}..{ms[-1]:.1f})"
    cpu = getattr(times, "cpu", None)
    return text + (f", cpu {statistics.median(cpu) * 1000:.1f}" if cpu else "")


def open_default(repeat: int) -> list[Row]:
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415

    path = default_model_path()
    GGUFFile.open(path)  # warm the page cache
    g = GGUFFile.open(path)
    return [
        ("open default model (metadata + tensor index), median (min..max), cpu",
         _ms(_times(lambda: GGUFFile.open(path), repeat)), "ms"),
        ("  of which: metadata keys / tensors / header size",
         f"{len(g.metadata)} / {len(g.tensors)} / {g.data_offset / 1e6:.2f}", "- / - / MB"),
    ]


def dequantize_all(repeat: int) -> list[Row]:
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415
    from hearth.engine.quants import dequantize_tensor  # noqa: PLC0415

    g = GGUFFile.open(default_model_path())
    infos = list(g.tensors.values())
    n_weights = sum(t.n_elements for t in infos)
    types = sorted({t.type.name for t in infos})

    def all_tensors():
        for t in infos:
            dequantize_tensor(t)

    times = _times(all_tensors, repeat)
    return [
        (f"dequantize all tensors ({n_weights / 1e6:.1f}M weights, {'/'.join(types)}), median (min..max), cpu",
         _ms(times), "ms"),
        ("  throughput (median)", f"{n_weights / statistics.median(times) / 1e6:.0f}", "M weights/s"),
    ]


def tokenizer_construction(repeat: int) -> list[Row]:
    """Tokenizer.from_gguf on the default model, or n/a while engine.tokenizer cannot be used."""
    name = "tokenizer construction (Tokenizer.from_gguf), median (min..max), cpu"
    try:
        from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
        from hearth.engine.paths import default_model_path  # noqa: PLC0415
        from hearth.engine.tokenizer import Tokenizer  # noqa: PLC0415
        g = GGUFFile.open(default_model_path())
        Tokenizer.from_gguf(g)
    except Exception as e:  # noqa: BLE001  (another module's work in progress: report, don't fail)
        return [(name, "n/a", f"({type(e).__name__}: {str(e)[:60]})")]
    return [(name, _ms(_times(lambda: Tokenizer.from_gguf(g), repeat)), "ms")]


def run(repeat: int = 7) -> list[Row]:
    return [*open_default(repeat), *dequantize_all(max(3, repeat // 2)), *tokenizer_construction(repeat)]


def print_table(rows: list[Row]) -> None:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(str(r[1])) for r in rows)
    for name, value, unit in rows:
        print(f"{name:<{w0}}  {str(value):>{w1}}  {unit}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per figure (default 7)")
    args = ap.parse_args(argv)
    print_table(run(args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
