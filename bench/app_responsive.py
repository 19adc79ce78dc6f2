"""How responsive the window stays while the engine generates: `python -m bench.app_responsive`.

Opens the real window (offscreen unless DISPLAY is set) on the default model with the CPU backend,
in temporary data/cache folders, sends a first short message right after start (its own row: the
first message pays for anything left to start-up), then generates replies until 256 tokens were
streamed into the view.
A 5 ms precise QTimer on the GUI thread measures how late each of its ticks is: the worst lateness
is the longest the event loop was blocked (goal: <= 50 ms). For comparison the same probe runs for
one second with the engine idle, which shows the machine's own noise.

    python -m bench.app_responsive [--tokens 256] [--backend cpu]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench.window_session import isolated_folders, spin

TICK_MS = 5
FIRST_TOKENS = 24


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "gpu", "auto"))
    ap.add_argument("--switch-ms", type=float, default=None,
                    help="override the interpreter's thread switch interval the app sets (experiments)")
    args = ap.parse_args(argv)
    isolated_folders(args.backend)

    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from hearth.app.main import create_window
    from hearth.engine.chat.preset_format import Preset, check_sampling

    app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841  (kept alive)

    t0 = time.perf_counter()
    w = create_window()
    if args.switch_ms is not None:
        sys.setswitchinterval(args.switch_ms / 1000)
    w.show()
    ready = []
    w.modelReady.connect(ready.append)
    w.client.worker.modelFailed.connect(lambda m: ready.append(m))
    spin(lambda: ready)
    if not isinstance(ready[0], dict):
        print(f"model failed to load: {ready[0]}")
        return 1
    spin(lambda: not w.client.busy)
    load_s = time.perf_counter() - t0
    p = w.presets.add(Preset("bench", "Bench", "You are a storyteller. Tell long, detailed stories.", [],
                             check_sampling({"temperature": 0.8, "seed": 7, "max_tokens": FIRST_TOKENS})))
    w._fill_presets()
    w.select_preset(p.id)
    spin(lambda: not w.client.busy)

    # The probe: lateness of each 5 ms tick, recorded only while `recording`.
    state = {"last": None, "recording": False, "late": [], "where": [], "deltas": 0, "t0": 0.0}
    w.client.worker.delta.connect(lambda rid, t: state.__setitem__("deltas", state["deltas"] + 1))

    def tick():
        now = time.perf_counter()
        if state["recording"] and state["last"] is not None:
            late = max(0.0, now - state["last"] - TICK_MS / 1000)
            state["late"].append(late)
            state["where"].append((late, now - state["t0"], state["deltas"]))
        state["last"] = now

    probe = QTimer(timerType=Qt.TimerType.PreciseTimer, interval=TICK_MS)
    probe.timeout.connect(tick)
    probe.start()

    def measure(seconds=None, until=None):
        state["late"], state["last"], state["recording"] = [], None, True
        state["t0"], state["deltas"], state["where"] = time.perf_counter(), 0, []
        end = time.monotonic() + (seconds or 1e9)
        spin(lambda: time.monotonic() > end or (until is not None and until()))
        state["recording"] = False
        return list(state["late"])

    idle = measure(seconds=1.0)

    # The GUI thread's own work per streamed update: the model grows, the view re-renders the last
    # paragraph and re-measures its bubble (painting comes after, in the event loop).
    update_s = []
    model = w.conversation.model
    plain_append = model.append_text

    def timed_append(row, text):
        t = time.perf_counter()
        plain_append(row, text)
        update_s.append(time.perf_counter() - t)

    model.append_text = timed_append

    generated, decode, lates, first, replies = 0, [], [], [], 0
    prompts = ["Tell me a long story about a lighthouse keeper and a storm.",
               "Continue the story, with more detail about the village.",
               "Now tell another long story, about a clockmaker."]
    while generated < args.tokens + FIRST_TOKENS and replies < 10:
        done = []
        conn = w.conversation.replyFinished.connect(done.append)
        w.messageInput.setPlainText(prompts[replies % len(prompts)])
        w.send()
        (first if replies == 0 else lates).extend(measure(until=lambda: done))
        worst_ticks = sorted(state["where"], reverse=True)[:3]
        print("worst ticks of this reply (ms late, s into the reply, tokens streamed so far): "
              + ", ".join(f"{a * 1000:.0f} ms @ {b:.2f} s / {c}" for a, b, c in worst_ticks))
        w.conversation.replyFinished.disconnect(conn)
        st = done[0]
        generated += st.get("generated_tokens", 0)
        if st.get("decode_tps"):
            decode.append(st["decode_tps"])
        replies += 1
        p.sampling["max_tokens"] = max(16, args.tokens + FIRST_TOKENS - generated)
        w.presets.update(p)
    probe.stop()
    w.close()

    def row(name, xs):
        xs = sorted(xs)
        if not xs:
            return f"| {name} | 0 | - | - | - |"
        p50, p99 = xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        return f"| {name} | {len(xs)} | {p50 * 1000:.1f} | {p99 * 1000:.1f} | {xs[-1] * 1000:.1f} |"

    print(f"window + model load {load_s:.1f} s; backend {w.model_info.get('adapter')}; "
          f"thread switch interval {sys.getswitchinterval() * 1000:.1f} ms; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"generated {generated} tokens in {replies} replies, decode "
          f"{sum(decode) / max(1, len(decode)):.1f} tok/s (mean of replies)")
    print(f"\nGUI event loop lateness of a {TICK_MS} ms timer (ms):\n")
    print("| phase | ticks | p50 | p99 | worst |")
    print("|---|---|---|---|---|")
    print(row("idle", idle))
    print(row("first message after start", first))
    print(row(f"later replies, {generated} tokens in all", lates))
    print("\nGUI work per streamed update (model + view, before painting), ms:\n")
    print("| updates | p50 | p99 | worst |")
    print("|---|---|---|---|")
    print(row("", update_s).replace("|  | ", "| ", 1))
    worst = max(first + lates, default=0) * 1000
    print(f"\nworst delay while generating, first message included: {worst:.1f} ms (goal <= 50 ms): "
          f"{'OK' if worst <= 50 else 'OVER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
