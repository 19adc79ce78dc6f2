"""The window's worst event-loop stall while a chat's context is saved: `python -m bench.warm_chat_stall`.

The real window (offscreen unless DISPLAY is set) on the default model, CPU backend, temporary
folders. A user message of ~--tokens tokens gets a one-token reply; the worker then saves the whole
chat as a segment (the largest save a chat makes: every position at once) while a 5 ms precise
QTimer on the GUI thread records how late each tick is, from the reply's end to the save's report.
The same probe runs one second idle first: the machine's own noise. Goal: <= 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench.window_session import isolated_folders, spin

TICK_MS = 5
ROOT = Path(__file__).resolve().parent.parent
REF = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    isolated_folders("cpu")

    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from hearth.app.main import create_window
    from hearth.engine.chat.preset_format import Preset, check_sampling

    app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841  (kept alive)

    w = create_window()
    w.show()
    ready = []
    w.modelReady.connect(ready.append)
    spin(lambda: ready)
    spin(lambda: not w.client.busy)
    p = w.presets.add(Preset("bench", "Bench", "You are terse.", [],
                             check_sampling({"temperature": 0.0, "max_tokens": 1})))
    w._fill_presets()
    w.select_preset(p.id)
    spin(lambda: not w.client.busy)
    words = json.loads((REF / "smollm2" / "bench_prompts.json").read_text())["2000"]["text"].split()
    eng = w.client.worker.backend.local.engine
    state = {"last": None, "rec": False, "late": []}

    def tick():
        now = time.perf_counter()
        if state["rec"] and state["last"] is not None:
            state["late"].append(max(0.0, now - state["last"] - TICK_MS / 1000))
        state["last"] = now

    probe = QTimer(timerType=Qt.TimerType.PreciseTimer, interval=TICK_MS)
    probe.timeout.connect(tick)
    probe.start()
    state["rec"], state["late"], state["last"] = True, [], None
    end = time.monotonic() + 1.0
    spin(lambda: time.monotonic() > end)
    idle = max(state["late"] or [0.0])
    rows = []
    for i in range(args.repeat):
        w.new_chat()
        text = " ".join(words[i * 50:] + words)
        while len(eng.tokenize(text)) > args.tokens:
            text = text[:int(len(text) * 0.9)]
        saves, done = [], []
        w.client.worker.chatContext.connect(lambda r: saves.append(r) if r.get("action") == "saved" else None)
        conn = w.conversation.replyFinished.connect(done.append)
        w.messageInput.setPlainText(text)
        w.send()
        spin(lambda: done)
        state["rec"], state["late"], state["last"] = True, [], None
        t0 = time.perf_counter()
        spin(lambda: saves)
        state["rec"] = False
        w.conversation.replyFinished.disconnect(conn)
        spin(lambda: not w.client.busy)
        rows.append((saves[0]["tokens"], saves[0]["bytes"], saves[0]["ms"], time.perf_counter() - t0,
                     max(state["late"] or [0.0])))
    probe.stop()
    w.close()
    print(f"idle probe, worst tick late: {idle * 1000:.1f} ms\n")
    print("| save | tokens | bytes | save ms (worker) | worst tick late (GUI) |")
    print("|---|---:|---:|---:|---:|")
    for i, (n, b, ms, _, late) in enumerate(rows):
        print(f"| {i + 1} | {n:,} | {b:,} | {ms:.0f} | {late * 1000:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
