"""The command-line chat: `python -m hearth.engine`.

    python -m hearth.engine                      interactive chat with the default model (/reset, /quit)
    python -m hearth.engine -p "Hello"           one-shot: stream one reply and exit
    python -m hearth.engine --info               the model's metadata and a sample tokenization
    python -m hearth.engine serve ...            the OpenAI-compatible server (engine/server/cli.py)

The reply streams to stdout; the statistics line (prefill and decode tokens/s) goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import Engine, EngineError, Sampling

SAMPLE_TEXT = "Hello, world! Hearth runs GGUF models: 1234 ünïcode 🙂"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m hearth.engine", description="Chat with a GGUF model in the terminal.")
    ap.add_argument("--model", "-m", help="GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    ap.add_argument("--backend", choices=["cpu", "gpu", "auto"], default="cpu")
    ap.add_argument("--ctx", type=int, default=4096, help="context size in tokens (default 4096)")
    ap.add_argument("--kv-dtype", choices=["f32", "f16"], default="f32",
                    help="KV cache precision: f32 (default) or f16 (half the memory and image bytes)")
    ap.add_argument("--prompt", "-p", help="one-shot: answer this and exit")
    ap.add_argument("--system", "-s", help="system prompt")
    ap.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    ap.add_argument("--info", action="store_true", help="print the model's metadata and a sample tokenization")
    ap.add_argument("--max-tokens", "-n", type=int, default=512)
    ap.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    d = Sampling()
    ap.add_argument("--temp", type=float, default=d.temperature, help="temperature; 0 = greedy")
    ap.add_argument("--top-k", type=int, default=d.top_k)
    ap.add_argument("--top-p", type=float, default=d.top_p)
    ap.add_argument("--min-p", type=float, default=d.min_p)
    ap.add_argument("--repeat-penalty", type=float, default=d.repeat_penalty)
    ap.add_argument("--presence-penalty", type=float, default=d.presence_penalty)
    ap.add_argument("--frequency-penalty", type=float, default=d.frequency_penalty)
    ap.add_argument("--repeat-last-n", type=int, default=d.repeat_last_n)
    ap.add_argument("--seed", type=int, default=None)
    return ap.parse_args(argv)


def sampling_from(a) -> Sampling:
    return Sampling(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                    repeat_penalty=a.repeat_penalty, presence_penalty=a.presence_penalty,
                    frequency_penalty=a.frequency_penalty, repeat_last_n=a.repeat_last_n, seed=a.seed)


def print_info(eng: Engine, load_s: float) -> None:
    g, c = eng.gguf, eng.config
    print(f"model: {g.path}  ({g.file_size:,} bytes, GGUF v{g.version}, loaded in {load_s:.2f} s)")
    print(f"backend: {eng.backend_info}")
    print(f"architecture: {c.arch}  layers {c.n_layer}  width {c.n_embd}  heads {c.n_head}/{c.n_head_kv} kv  "
          f"head dim {c.head_dim}  ffn {c.n_ff}  vocab {c.n_vocab}")
    print(f"rope: base {c.rope_base:g} ({'neox' if c.rope_neox else 'normal'}, {c.n_rot} dims, "
          f"scaling {c.rope_scaling.kind})" + (f"  sliding window {c.sliding_window}" if c.sliding_window else ""))
    print(f"context: trained {c.context_length}, this engine {eng.n_ctx}; KV cache {eng.kv.nbytes / 2**20:.1f} MiB ({eng.kv_dtype})")
    print("metadata:")
    for k, v in g.metadata.items():
        if hasattr(v, "__len__") and not isinstance(v, str):
            v = f"[{len(v)} items]"
        elif isinstance(v, str) and len(v) > 80:
            v = v[:77].replace("\n", "\\n") + "..."
        print(f"  {k} = {v}")
    t = eng.tokenizer
    ids = eng.tokenize(SAMPLE_TEXT)
    print(f"tokenizer: {t!r}")
    print(f"sample: {SAMPLE_TEXT!r} -> {len(ids)} tokens")
    print("  " + " ".join(f"{i}:{t.token_bytes(i).decode('utf-8', 'replace')!r}" for i in ids))
    print(f"round trip: {eng.detokenize(ids) == SAMPLE_TEXT or eng.detokenize(ids)}")


def render(eng: Engine, messages, raw: bool) -> str:
    if raw:
        return messages[-1]["content"]
    return eng.render_chat(messages, add_generation_prompt=True)


def reply(eng: Engine, prompt: str, a, out=sys.stdout) -> str:
    parts = []
    for ev in eng.generate(prompt, max_tokens=a.max_tokens, sampling=sampling_from(a), stop=a.stop):
        if ev.text:
            out.write(ev.text)
            out.flush()
            parts.append(ev.text)
        if ev.final:
            s = ev.stats
            out.write("\n")
            print(f"[{ev.stop_reason}] prefill {s.computed_tokens} tokens at {s.prefill_tps:.1f} tok/s "
                  f"(reused {s.reused_tokens}), decode {s.generated_tokens} tokens at {s.decode_tps:.1f} tok/s, "
                  f"first token after {s.ttft_s * 1000:.0f} ms", file=sys.stderr, flush=True)
    return "".join(parts)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # the server has its own options: engine/server/cli.py
        from .server.cli import main as serve_main  # noqa: PLC0415
        return serve_main(argv[1:])
    a = parse_args(argv)
    try:
        t = time.perf_counter()
        eng = Engine.load(a.model, backend=a.backend, n_ctx=a.ctx, kv_dtype=a.kv_dtype)
        load_s = time.perf_counter() - t
        if a.info:
            print_info(eng, load_s)
            return 0
        system = [{"role": "system", "content": a.system}] if a.system else []
        if a.prompt is not None:
            reply(eng, render(eng, system + [{"role": "user", "content": a.prompt}], a.raw), a)
            return 0
        print(f"{eng.gguf.path.name} on {eng.backend_info['backend']} ({load_s:.1f} s). "
              f"/reset starts over, /quit or Ctrl-D ends.", file=sys.stderr)
        messages = list(system)
        while True:
            try:
                line = input("> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            if line.strip() in ("/quit", "/exit"):
                return 0
            if line.strip() == "/reset":
                messages = list(system)
                eng.reset()
                continue
            if not line.strip():
                continue
            messages.append({"role": "user", "content": line})
            try:
                text = reply(eng, render(eng, messages, a.raw), a)
            except KeyboardInterrupt:
                print("\n[interrupted]", file=sys.stderr)
                messages.pop()
                continue
            messages.append({"role": "assistant", "content": text})
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
