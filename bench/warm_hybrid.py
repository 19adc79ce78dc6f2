"""Reopen a 2,000-token context after a restart on a hybrid (Qwen3.5-shaped) model: restore its
prefix image (attention K/V and the recurrent state) in a fresh engine vs recompute it, then the
reply's own prompt (a short new message) either way. Random weights of the real widths, cut to
--layers N (bench/make_hybrid_gguf.py). Never run by the tests.

    python bench/warm_hybrid.py [--layers 4] [--tokens 2000] [--qtype Q8_0] [--shape qwen35-4b]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hearth.engine import Engine  # noqa: E402


def _load(path: Path, n_ctx: int) -> Engine:
    e = Engine.load(path, n_ctx=n_ctx, backend="cpu")
    e._prefault.join()
    return e


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--new", type=int, default=16, help="tokens of the next message")
    ap.add_argument("--qtype", default="Q8_0")
    ap.add_argument("--shape", default="qwen35-4b")
    a = ap.parse_args()
    work = Path(tempfile.gettempdir()) / "hearth-warm-hybrid"
    work.mkdir(exist_ok=True)
    model = work / f"{a.shape}-{a.qtype}-L{a.layers}.gguf"
    if not model.exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_hybrid_gguf.py"), a.shape, a.qtype,
                        str(model), "--layers", str(a.layers)], check=True)
    rng = np.random.default_rng(0)
    ids = [int(i) for i in rng.integers(1000, 20000, a.tokens)]
    new = [int(i) for i in rng.integers(1000, 20000, a.new)]
    n_ctx = a.tokens + a.new + 64
    image = work / "chat.hpx"

    e = _load(model, n_ctx)   # the chat as it was before the restart
    t = time.perf_counter()
    e.prefill(ids)
    t_first = time.perf_counter() - t
    with open(image, "wb") as f:
        size = e.save_prefix(ids, f)
    e.close()

    e = _load(model, n_ctx)   # after the restart: restore, then the new message
    t = time.perf_counter()
    with open(image, "rb") as f:
        e.restore_prefix(ids, f)
    t_restore = time.perf_counter() - t
    warm = e.feed(new)
    t_warm = time.perf_counter() - t
    e.close()

    e = _load(model, n_ctx)   # after the restart: recompute everything
    t = time.perf_counter()
    e.prefill(ids)
    cold = e.feed(new)
    t_cold = time.perf_counter() - t
    state = e.kv.state_size(a.tokens) * 4
    e.close()

    same = bool(np.array_equal(warm, cold))
    print(f"{a.shape} {a.qtype} --layers {a.layers}, {a.tokens} tokens + {a.new} new; load {os.getloadavg()[0]:.1f}")
    print(f"image {size / 1e6:.1f} MB ({state / 1e6:.2f} MB recurrent state); first compute {t_first:.2f} s")
    print(f"reopen: restore {t_restore * 1000:.0f} ms, restore + new message {t_warm * 1000:.0f} ms; "
          f"recompute + new message {t_cold * 1000:.0f} ms; ratio {t_cold / t_warm:.1f}x; "
          f"next-token logits identical: {same}")


if __name__ == "__main__":
    main()
