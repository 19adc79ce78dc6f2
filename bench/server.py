"""Server overhead benchmark: `python -m bench.server [--repeat N] [--tokens A B] [--model PATH]`.

The same chat, the same greedy decoding, the same max_tokens, once through `Engine.generate` called
directly and once through Hearth's server on 127.0.0.1 (in-process, its own worker thread, real HTTP):
streamed with engine.remote (SSE), streamed with the official `openai` client, and not streamed
(one JSON body, httpx). Every call finds the same prompt resident (the previous call's, plus
at least one reply token), so each computes the prompt's last token and then decodes: the differences
are the server's own cost. (At max_tokens 1 the reply token is never fed, so the next identical call
would compute nothing at all: hence A >= 2.)

Per request overhead = median time at A tokens through the server - the same directly.
Per token overhead   = the slope between A and B tokens, server minus direct.
Runs are interleaved (direct, server paths, direct ...) so the shared machine's drift hits all alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Write a short poem about the sea."}]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tokens", type=int, nargs=2, default=[2, 34], metavar=("A", "B"))
    ap.add_argument("--model", default=None)
    a = ap.parse_args(argv)
    if min(a.tokens) < 2 or a.tokens[0] >= a.tokens[1]:
        ap.error("--tokens A B needs 2 <= A < B (see the module docstring)")

    import httpx  # noqa: PLC0415
    import openai  # noqa: PLC0415

    from hearth.engine import Engine, Sampling  # noqa: PLC0415
    from hearth.engine.remote import RemoteClient  # noqa: PLC0415
    from hearth.engine.server import ChatService, HearthServer  # noqa: PLC0415

    eng = Engine.load(a.model, n_ctx=1024)
    service = ChatService(eng)
    server = HearthServer(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    remote = RemoteClient(server.url)
    oai = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    http = httpx.Client(timeout=300)
    prompt = eng.render_chat(MESSAGES)
    model = service.model_id

    def direct(n):
        evs = list(eng.generate(prompt, max_tokens=n, sampling=Sampling.greedy()))
        return evs[-1].stats.generated_tokens

    def sse_remote(n):
        evs = list(remote.chat(MESSAGES, model, sampling=Sampling.greedy(), max_tokens=n))
        return evs[-1].stats.completion_tokens

    def sse_openai(n):
        chunks = list(oai.chat.completions.create(model=model, messages=MESSAGES, max_tokens=n, temperature=0,
                                                  stream=True, stream_options={"include_usage": True}))
        return chunks[-1].usage.completion_tokens

    def json_httpx(n):
        r = http.post(f"{server.url}/chat/completions", json={"model": model, "messages": MESSAGES,
                                                              "max_tokens": n, "temperature": 0})
        return r.json()["usage"]["completion_tokens"]

    paths = {"hearth.engine.generate, direct": direct, "server, stream, engine.remote": sse_remote,
             "server, stream, openai client": sse_openai, "server, JSON body, httpx": json_httpx}
    direct(1)  # warm up: the prompt resident, numpy's first calls done
    # Where a server request's time goes, from the server's own record of it (same request, so the
    # machine's noise largely cancels): outside the worker = HTTP, JSON and the client; worker but not
    # engine = template, tokenizer, tool-call parser, queue hand-offs.
    split: dict[tuple[str, int], list[tuple[float, float]]] = {(p, n): [] for p in paths for n in a.tokens}
    wall: dict[tuple[str, int], list[float]] = {(p, n): [] for p in paths for n in a.tokens}
    cpu: dict[tuple[str, int], list[float]] = {(p, n): [] for p in paths for n in a.tokens}
    for _ in range(a.repeat):
        for n in a.tokens:
            for name, fn in paths.items():
                t, c = time.perf_counter(), time.process_time()
                got = fn(n)
                wall[(name, n)].append(time.perf_counter() - t)
                cpu[(name, n)].append(time.process_time() - c)
                if fn is not direct:
                    run = service.history[-1]
                    split[(name, n)].append((wall[(name, n)][-1] - run["total_s"], run["total_s"] - run["engine_s"]))
                assert got == n, f"{name}: {got} tokens, not {n} (an early end-of-generation?)"
    print(f"model {Path(eng.gguf.path).name}, CPU, greedy; median of {a.repeat} runs each, interleaved")
    print("wall: elapsed time; cpu: this process's CPU time (client and server both run here), which the")
    print("other processes on a shared machine disturb less than the wall clock; 'best': the minimum")
    for label, times, stat in (("wall", wall, statistics.median), ("cpu", cpu, statistics.median),
                               ("cpu, best", cpu, min)):
        table(label, times, paths, a.tokens, stat)
    print(f"\nwhere a server request's time goes (medians, ms)\n{'path':30} {'tokens':>6} "
          f"{'outside the worker':>19} {'worker, not engine':>19}")
    for p in list(paths)[1:]:
        for n in a.tokens:
            out = statistics.median(o for o, _ in split[(p, n)]) * 1000
            inside = statistics.median(i for _, i in split[(p, n)]) * 1000
            print(f"{p:30} {n:6d} {out:19.1f} {inside:19.1f}")
    spread = max(statistics.pstdev(v) / statistics.mean(v) for v in wall.values()) * 100
    print(f"largest run-to-run spread of the wall times (stdev/mean): {spread:.0f}%")
    http.close()
    oai.close()
    remote.close()
    server.shutdown()
    server.server_close()
    service.close()
    return 0


def table(label: str, times: dict, paths, tokens, stat) -> None:
    """One row per path: `stat` (median, or min: the run least disturbed) of its times."""
    lo, hi = tokens
    med = {k: stat(v) for k, v in times.items()}
    base = next(iter(paths))
    slope = {p: (med[(p, hi)] - med[(p, lo)]) / (hi - lo) for p in paths}
    print(f"\n{label:9} {'path':30} {f'{lo} tok ms':>10} {f'{hi} tok ms':>10} {'ms/token':>9} "
          f"{'overhead/request ms':>20} {'overhead/token ms':>18}")
    for p in paths:
        over_req = (med[(p, lo)] - med[(base, lo)]) * 1000
        over_tok = (slope[p] - slope[base]) * 1000
        print(f"{label:9} {p:30} {med[(p, lo)] * 1000:10.1f} {med[(p, hi)] * 1000:10.1f} {slope[p] * 1000:9.2f} "
              f"{'-' if p == base else f'{over_req:+.1f}':>20} {'-' if p == base else f'{over_tok:+.2f}':>18}")


if __name__ == "__main__":
    sys.exit(main())
