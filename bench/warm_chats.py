"""Chats kept warm after a restart, per architecture (#29): a chat of --tokens tokens grown turn by
turn and saved after each turn as the app does (chat segments, engine/prefix/chat_images.py); then,
in a fresh engine (a restart), its chain restored from disk + the next message vs the whole chat
recomputed + the next message. With --regenerate: a --turns-turn chat grown with real greedy replies;
the tokens recomputed to regenerate the last reply (in the same session, and after a restart from
the segments) and to answer an edit in the middle turn. Random weights of real shapes (bench/
make_hybrid_gguf.py, make_moe_gguf.py) cut to --layers; never run by the tests.

    python -m bench.warm_chats --shape qwen35-4b --layers 4
    python -m bench.warm_chats --shape gemma4-e4b --layers 6
    python -m bench.warm_chats --model /path/to/gpt-oss-20b-shape-4layers.gguf
    python -m bench.warm_chats --shape qwen35-4b --layers 4 --regenerate --turns 20
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hearth.engine import Engine  # noqa: E402
from hearth.engine.prefix import PrefixStore  # noqa: E402
from hearth.engine.prefix.chat_images import ChatImages, Root  # noqa: E402
from hearth.engine.sampling import Sampling  # noqa: E402


def _load(path: Path, n_ctx: int) -> Engine:
    e = Engine.load(path, n_ctx=n_ctx, backend="cpu")
    e._prefault.join()
    return e


def model_of(a, work: Path) -> Path:
    if a.model:
        return Path(a.model)
    model = work / f"{a.shape}-{a.qtype}-L{a.layers}.gguf"
    if not model.exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_hybrid_gguf.py"), a.shape, a.qtype,
                        str(model), "--layers", str(a.layers)], check=True)
    return model


def sizes(e: Engine) -> str:
    """Bytes per token of a segment and of one snapshot (hybrid models), this (cut) model."""
    kv = e.kv
    per_token = 2 * getattr(kv, "image_layers", kv.n_layers) * kv.n_kv_heads * kv.head_dim * np.dtype(kv.dtype).itemsize
    snap = 0
    if hasattr(kv, "segment_state_size"):
        if getattr(kv, "recurrent", False):
            snap = 4 * kv.segment_state_size(0, 1)
        else:
            per_token += 4 * kv.segment_state_size(0, 1)
    return f"segment {per_token / 1024:.1f} KB per token" + (f", snapshot {snap / 1e6:.2f} MB" if snap else "")


def reopen(a, model: Path, store_dir: Path) -> None:
    rng = np.random.default_rng(0)
    per = a.tokens // a.turns
    turns = [[int(i) for i in rng.integers(1000, 20000, per)] for _ in range(a.turns)]
    ids = [i for t in turns for i in t]
    new = [int(i) for i in rng.integers(1000, 20000, a.new)]
    n_ctx = len(ids) + a.new + 64
    e = _load(model, n_ctx)   # the chat as it grew before the restart, saved after every turn
    chats = ChatImages(PrefixStore(store_dir, cap_bytes=1 << 40))
    t = time.perf_counter()
    grown = []
    for turn in turns:
        grown += turn
        e.prefill(grown)
        chats.save(e, Root.none(), owner="bench")
    t_first = time.perf_counter() - t
    disk = sum(p.stat().st_size for p in store_dir.glob("*.hps"))
    print(f"{model.name}: {len(ids)} tokens in {a.turns} turns + {a.new} new; {sizes(e)}; "
          f"{disk / 1e6:.1f} MB of segments; first compute {t_first:.1f} s")
    e.close()

    e = _load(model, n_ctx)   # after the restart: the chain from disk, then the new message
    t = time.perf_counter()
    got = chats.restore(e, ids + new, Root.none())
    t_restore = time.perf_counter() - t
    warm = e.feed(new)
    t_warm = time.perf_counter() - t
    e.close()
    e = _load(model, n_ctx)   # after the restart without segments: everything computed again
    t = time.perf_counter()
    grown = []
    for turn in turns:        # in the same chunks as it grew, so the logits can be compared bit for bit
        grown += turn
        e.prefill(grown)
    cold = e.feed(new)
    t_cold = time.perf_counter() - t
    e.close()
    diff = float(np.max(np.abs(warm - cold)))
    print(f"  restore {got.restored} tokens {t_restore * 1000:.0f} ms; restore + new message {t_warm * 1000:.0f} ms; "
          f"recompute + new message {t_cold * 1000:.0f} ms; ratio {t_cold / t_warm:.1f}x; "
          f"next-token logits bit-identical {diff == 0.0}; load {os.getloadavg()[0]:.1f}")


def computed(e, prompt, n=8) -> int:
    final = None
    for ev in e.generate(prompt, max_tokens=n, sampling=Sampling(temperature=0.0)):
        final = ev
    return final.stats.computed_tokens


def regenerate(a, model: Path, store_dir: Path) -> None:
    rng = np.random.default_rng(1)
    users = [[int(i) for i in rng.integers(1000, 20000, a.user)] for _ in range(a.turns)]
    n_ctx = a.turns * (a.user + a.reply + 4) + 64
    e = _load(model, n_ctx)
    chats = ChatImages(PrefixStore(store_dir, cap_bytes=1 << 40))
    prompts, history = [], []
    for u in users:
        prompt = history + u
        computed(e, prompt, a.reply)
        chats.save(e, Root.none(), owner="bench")
        prompts.append(prompt)
        history = e.tokens
    last, mid = prompts[-1], prompts[len(prompts) // 2]
    regen = computed(e, last, a.reply)
    edit = computed(e, mid[:-3] + [7, 8, 9], a.reply)
    print(f"{model.name}: {a.turns}-turn chat, {len(history)} tokens ({a.user} per message, {a.reply} per reply); "
          f"{sizes(e)}")
    print(f"  in the session: regenerate the last reply computes {regen} tokens; an edit 3 tokens before the end "
          f"of message {len(prompts) // 2 + 1} computes {edit} (the message is {a.user})")
    e.close()
    e = _load(model, n_ctx)   # after a restart: the segments, then the regenerate
    got = chats.restore(e, last, Root.none())
    regen2 = computed(e, last, a.reply)
    print(f"  after a restart: {got.restored} tokens restored, regenerate computes {regen2} (the last message "
          f"is {a.user}); load {os.getloadavg()[0]:.1f}")
    e.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen35-4b")
    ap.add_argument("--model", default="", help="a GGUF file instead of a made shape")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--qtype", default="Q8_0")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--new", type=int, default=16, help="tokens of the next message")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--user", type=int, default=24, help="--regenerate: tokens per message")
    ap.add_argument("--reply", type=int, default=8, help="--regenerate: tokens per reply")
    a = ap.parse_args()
    work = Path(tempfile.gettempdir()) / "hearth-warm-hybrid"
    work.mkdir(exist_ok=True)
    model = model_of(a, work)
    store_dir = Path(tempfile.mkdtemp(prefix="hearth-warm-chats-"))
    try:
        (regenerate if a.regenerate else reopen)(a, model, store_dir)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
