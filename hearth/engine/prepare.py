"""Compile the CPU kernels ahead of the first start: `python -m hearth.engine.prepare`.

numba compiles each kernel the first time a process calls it and caches the machine code
(engine.cpu: under the cache folder, keyed by the kernels' sources). A first start would pay that
(~30 s on 2 cores) while the window waits on "Computing the preset prefix"; the set-up (`./dev run`,
`./dev test`, the desktop installer) runs this instead, once, with a progress line per step. It
loads the default model (or --model) on the CPU and runs what a first start runs: the warm-up's
chunk, short input and one-token pass, then a short chat reply. When every step is done it writes
`prepared` into the compile cache's folder, so a later set-up skips it at once (a kernel source
edit changes the folder, and the set-up prepares again).

    python -m hearth.engine.prepare            # prints "Preparing the CPU engine (first start only)… n of m"
    python -m hearth.engine.prepare --check    # exit 0 when prepared already, 1 when not
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import cpu  # noqa: F401  (sets numba's cache folder before numba is imported)

SAY = "Preparing the CPU engine (first start only)…"


def marker() -> Path | None:
    """The file that says this compile cache holds the kernels; None when numba caches nowhere."""
    d = os.environ.get("NUMBA_CACHE_DIR")
    return Path(d) / "prepared" if d else None


def prepared() -> bool:
    m = marker()
    return m is not None and m.is_file()


def prepare(model: str | None = None, say=print) -> float:
    """Run the first start's kernels once (compiling them into the cache); seconds taken."""
    from . import Engine, Sampling  # noqa: PLC0415

    t0 = time.perf_counter()
    steps = ["loading the model", "the warm-up (a chunk, a short input, one token)", "a short reply"]

    def step(i: int) -> None:
        say(f"{SAY} {i + 1} of {len(steps)}: {steps[i]}")

    step(0)
    eng = Engine.load(model, backend="cpu", n_ctx=512)
    try:
        step(1)
        eng.wait_warm()
        step(2)
        prompt = eng.render_chat([{"role": "system", "content": "You are a helpful assistant."},
                                  {"role": "user", "content": "Hi"}], add_generation_prompt=True)
        for _ in eng.generate(prompt, max_tokens=4, sampling=Sampling(temperature=0.0)):
            pass
    finally:
        eng.close()
    mark_prepared()
    return time.perf_counter() - t0


def mark_prepared() -> None:
    """Say in the compile cache that a first start's kernels are compiled there (the app does too,
    once it has compiled them itself)."""
    m = marker()
    if m is not None:
        try:
            m.write_text("the kernels of a first start are compiled in this folder\n", encoding="utf-8")
        except OSError:
            pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hearth.engine.prepare", description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="GGUF file (default: the bundled default model)")
    ap.add_argument("--check", action="store_true", help="exit 0 when prepared already, 1 when not")
    a = ap.parse_args(argv)
    if a.check:
        return 0 if prepared() else 1
    if prepared() and a.model is None:
        return 0
    took = prepare(a.model, say=lambda s: print(s, flush=True))
    print(f"Prepared the CPU engine in {took:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
