"""Chats kept warm: `python -m bench.warm_chat [--tokens 4000] [--repeat 3] [--backend cpu] [--kv-dtype f32] [--baseline DIR]`.

A chat of ~4,000 tokens on the default model (n_ctx 4096): a preset prefix (the system prompt, kept
as a prefix image) and exchanges of ~400 tokens (text of ../shared/reference/smollm2/bench_prompts.json),
saved as chat segments after each exchange as the app does. Then, each in a new process (Hearth
restarted: the model loaded, the KV cache's pages made resident in the background, the folder's
files in the page cache):
  - Send -> first token of the next reply with the chat's images: preset prefix restored, segments
    restored, the new user message (~20 tokens) read, the first token sampled;
  - the same with the backend's warm-up passes left out (what the first passes of a fresh process cost);
  - the same from `--baseline DIR`, another checkout (before/after side by side), from its own images;
  - the same with the cache emptied: everything computed;
  - bytes written by one more exchange (the last save), against the whole chain's bytes;
  - image bytes per token, of the KV cache's dtype (`--kv-dtype f32` or `f16`; bench.kv_dtype puts the
    two side by side).
The window's worst event-loop stall while a chat is saved is measured by bench.app_responsive-style
probing in `--stall` (the real window, a long message, its save after the reply).
Goals: first token <= 300 ms with images and >= 20x faster than the recompute; one exchange's bytes
proportional to the exchange; stall <= 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))
PRESET = "<|im_start|>system\nYou are a careful assistant. Answer questions about the text the user quotes.<|im_end|>\n"
NEXT = "<|im_start|>user\nSummarize what we discussed in one short sentence.<|im_end|>\n<|im_start|>assistant\n"


def chat_text(eng, n_tokens: int) -> list[str]:
    """Exchanges of ~400 tokens until the chat (preset included) has about n_tokens."""
    words = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())["2000"]["text"].split()
    turns, total, i = [], len(eng.tokenize(PRESET)), 0
    while True:
        chunk = " ".join(words[(i * 300) % len(words):][:150])
        reply = " ".join(words[(i * 300 + 150) % len(words):][:140])
        t = f"<|im_start|>user\nWhat does this say? {chunk}<|im_end|>\n<|im_start|>assistant\n{reply}<|im_end|>\n"
        n = len(eng.tokenize(t, special=True)) - 1
        if total + n > n_tokens:
            if total + 60 > n_tokens:
                return turns
            words_left = max(5, int(150 * (n_tokens - total - 40) / n))
            t = f"<|im_start|>user\nAnd this? {' '.join(words[:words_left])}<|im_end|>\n"
            n = len(eng.tokenize(t, special=True)) - 1
            return turns + [t] if total + n <= n_tokens else turns
        turns.append(t)
        total += n
        i += 1


def build(cache: Path, n_tokens: int, backend: str, kv_dtype: str) -> dict:
    from hearth.engine import Engine
    from hearth.engine.prefix import PrefixStore
    from hearth.engine.prefix.chat_images import ChatImages, Root
    eng = Engine.load(n_ctx=4096, backend=backend, kv_dtype=kv_dtype)
    store = PrefixStore(cache, cap_bytes=8 << 30)
    chats = ChatImages(store)
    store.ensure(eng, PRESET)
    root = Root.of_prefix(eng, eng.prefix_ids(PRESET))
    text, saves = PRESET, []
    for t in chat_text(eng, n_tokens):
        text += t
        eng.prefill(eng.tokenize(text))
        s = chats.save(eng, root, owner="bench", title="bench")
        saves.append({"tokens": s.n_tokens, "bytes": s.bytes_written, "s": s.seconds, "error": s.error})
    total = sum(p.stat().st_size for p in cache.glob("*.hp?"))
    return {"saves": saves, "chain_bytes": total, "tokens": len(eng.tokenize(text)), "text": text}


def send(cache: Path, text: str, backend: str, kv_dtype: str, warm_up: bool = True) -> dict:
    """A restarted Hearth: load, let the background warm-up finish (KV pages made resident, the
    backend's first passes run; `warm_up=False`: the passes left out), then Send -> first token."""
    from hearth.engine import Engine, Sampling
    from hearth.engine.prefix import PrefixStore
    from hearth.engine.prefix.chat_images import ChatImages, Root
    if not warm_up:
        from hearth.engine.cpu_backend import CpuBackend
        CpuBackend.warm_up = None   # Engine's background thread then skips the passes
        if backend == "gpu":
            from hearth.engine.gpu import GpuBackend
            GpuBackend.warm_up = None
    eng = Engine.load(n_ctx=4096, backend=backend, kv_dtype=kv_dtype)
    t_loaded = time.perf_counter()
    if getattr(eng, "_prefault", None) is not None:
        eng._prefault.join()
    t_warm = time.perf_counter() - t_loaded
    store = PrefixStore(cache, cap_bytes=8 << 30)
    chats = ChatImages(store)
    ids = eng.tokenize(text + NEXT)
    t0 = time.perf_counter()
    pre = store.ensure(eng, PRESET)
    t_prefix = time.perf_counter() - t0
    root = Root.of_prefix(eng, eng.prefix_ids(PRESET))
    got = chats.restore(eng, ids, root)
    t_restore = time.perf_counter() - t0
    ev = next(iter(eng.generate(ids, max_tokens=1, sampling=Sampling(temperature=0))))
    ttft = time.perf_counter() - t0
    return {"ttft_s": ttft, "restore_s": t_restore, "prefix_s": t_prefix, "prefix": pre.action, "warm_s": t_warm,
            "restored": got.restored, "prefix_n": root.n, "prompt": len(ids), "first": ev.token_id}


def child(args) -> int:
    cache = Path(args.cache)
    if args.child == "build":
        out = build(cache, args.tokens, args.backend, args.kv_dtype)
    else:
        out = send(cache, Path(args.text).read_text(), args.backend, args.kv_dtype, not args.no_warm_up)
    print("RESULT " + json.dumps(out))
    return 0


def run_child(*argv, root: Path = ROOT) -> dict:
    """A child of this checkout's bench.warm_chat, or of another checkout's (`root`: a baseline)."""
    # this checkout first, then what the caller's PYTHONPATH had (wheels put aside on a GPU machine)
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, HEARTH_REFERENCE=str(REF))
    r = subprocess.run([sys.executable, "-m", "bench.warm_chat", *argv], cwd=root, capture_output=True, text=True,
                       env=env)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"child failed: {r.stderr[-2000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--kv-dtype", default="f32", choices=("f32", "f16"))
    ap.add_argument("--no-warm-up", action="store_true", help="(child) the backend's warm-up passes left out")
    ap.add_argument("--baseline", type=Path, help="another checkout of Hearth (e.g. a worktree of main) whose "
                    "Send -> first token is measured in turn with this one's, from its own images")
    ap.add_argument("--child", choices=("build", "send"))
    ap.add_argument("--cache")
    ap.add_argument("--text")
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    with tempfile.TemporaryDirectory(prefix="hearth-warm-") as d:
        cache, empty = Path(d) / "cache", Path(d) / "empty"
        cache.mkdir()
        kv = ("--kv-dtype", args.kv_dtype)
        b = run_child("--child", "build", "--cache", str(cache), "--tokens", str(args.tokens),
                      "--backend", args.backend, *kv)
        text = Path(d) / "chat.txt"
        text.write_text(b["text"])
        base_cache, base = Path(d) / "baseline", []
        if args.baseline:
            base_cache.mkdir()
            run_child("--child", "build", "--cache", str(base_cache), "--tokens", str(args.tokens),
                      "--backend", args.backend, *kv, root=args.baseline.resolve())
        warm, unwarmed, cold = [], [], []
        for _ in range(args.repeat):  # alternated, so all see the same machine load
            if args.baseline:
                base.append(run_child("--child", "send", "--cache", str(base_cache), "--text", str(text),
                                      "--backend", args.backend, *kv, root=args.baseline.resolve()))
            warm.append(run_child("--child", "send", "--cache", str(cache), "--text", str(text),
                                  "--backend", args.backend, *kv))
            unwarmed.append(run_child("--child", "send", "--cache", str(cache), "--text", str(text),
                                      "--backend", args.backend, "--no-warm-up", *kv))
            empty.mkdir(exist_ok=True)
            for p in empty.iterdir():
                p.unlink() if p.is_file() else None
            cold.append(run_child("--child", "send", "--cache", str(empty), "--text", str(text),
                                  "--backend", args.backend, *kv))
    assert all(w["first"] == u["first"] == c["first"] for w, u, c in zip(warm, unwarmed, cold)), \
        "restored and recomputed differ"
    assert all(r["first"] == warm[0]["first"] for r in base), "the baseline sampled another first token"
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    last, first = b["saves"][-1], b["saves"][0]
    new_tokens = last["tokens"] - b["saves"][-2]["tokens"]
    print(f"chat: {b['tokens']:,} tokens in {len(b['saves'])} exchanges, backend {args.backend}, "
          f"KV {args.kv_dtype}, "
          f"{args.repeat} restarts each way (medians)\n")
    print("| Send -> first token after a restart | median | runs |")
    print("|---|---:|---|")
    print(f"| with the chat's images (restored {warm[0]['restored']:,} + prefix) | {med(warm, 'ttft_s') * 1000:.0f} ms | "
          + ", ".join(f"{w['ttft_s'] * 1000:.0f}" for w in warm) + " |")
    print(f"| of which restoring (preset image {med(warm, 'prefix_s') * 1000:.0f} ms, then the segments) | "
          f"{med(warm, 'restore_s') * 1000:.0f} ms | " + ", ".join(f"{w['restore_s'] * 1000:.0f}" for w in warm) + " |")
    print(f"| then computing the {warm[0]['prompt'] - warm[0]['restored'] - warm[0]['prefix_n']:,} new tokens"
          f" and sampling | {statistics.median(w['ttft_s'] - w['restore_s'] for w in warm) * 1000:.0f} ms | |")
    if base:
        print(f"| the baseline checkout ({args.baseline}), with its images | {med(base, 'ttft_s') * 1000:.0f} ms | "
              + ", ".join(f"{r['ttft_s'] * 1000:.0f}" for r in base) + " |")
        print(f"| of which restoring, then computing and sampling | {med(base, 'restore_s') * 1000:.0f} ms, "
              f"{statistics.median(r['ttft_s'] - r['restore_s'] for r in base) * 1000:.0f} ms | |")
    print(f"| with the images, the backend's warm-up passes left out | {med(unwarmed, 'ttft_s') * 1000:.0f} ms | "
          + ", ".join(f"{u['ttft_s'] * 1000:.0f}" for u in unwarmed) + " |")
    print(f"| of which computing the new tokens and sampling | "
          f"{statistics.median(u['ttft_s'] - u['restore_s'] for u in unwarmed) * 1000:.0f} ms | |")
    print(f"| cache emptied (all {cold[0]['prompt']:,} tokens computed) | {med(cold, 'ttft_s') * 1000:.0f} ms | "
          + ", ".join(f"{c['ttft_s'] * 1000:.0f}" for c in cold) + " |")
    print(f"| speed-up | {med(cold, 'ttft_s') / med(warm, 'ttft_s'):.1f}x | |")
    print(f"| background warm-up after load (not waited for by Send) | {med(warm, 'warm_s') * 1000:.0f} ms | "
          + ", ".join(f"{w['warm_s'] * 1000:.0f}" for w in warm) + " |\n")
    per_token = (last["bytes"]) / max(1, new_tokens)
    print("| bytes written | bytes | tokens | per token |")
    print("|---|---:|---:|---:|")
    print(f"| first exchange (with the chat's start) | {first['bytes']:,} | {first['tokens']:,} | |")
    print(f"| one more exchange (the last) | {last['bytes']:,} | {new_tokens:,} new | {per_token:,.0f} |")
    print(f"| the whole chain on disk (prefix image included) | {b['chain_bytes']:,} | {b['tokens']:,} | "
          f"{b['chain_bytes'] / b['tokens']:,.0f} |")
    print(f"| save of the last exchange | {last['s'] * 1000:.0f} ms | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
