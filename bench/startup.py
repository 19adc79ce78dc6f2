"""Startup benchmark: `python -m bench.startup [--repeat N] [--only bundle|venv]`.

How long Hearth takes from launching the process to a usable window (goal <= 2 s) and to the first
token of a reply on the default model (goal <= 4 s), for the PyInstaller bundle (dist/hearth/hearth,
built by packaging/build) and for `python -m hearth` from this virtual environment.

Each run starts the real app offscreen with the smoke driver (packaging/hearth_smoke.py,
HEARTH_SMOKE_TEST=1), which sends "Hi" as soon as the window is shown and exposed - what a user
typing at once would get - presses Stop at the first token, quits, and reports:
  window        the main window is shown, exposed and its event loop runs
  model         the model finished loading (the window's modelReady)
  first token   the reply's first text is in the message view
all from the moment before the process is spawned. Beside the wall-clock times, the process's CPU
seconds (all threads, /proc/<pid>/stat) at the moment each event line is read: on a shared, loaded
machine wall time swells while CPU time stays put.

Two starts per repeat and app: *first* with empty data and cache folders (a new user: the preset's
prompt prefix is computed and written to the prefix store), *next* with those folders again (the
prefix image is restored). Apps and starts are interleaved; medians with min-max. The page cache is
warm after the first run, as on a machine where Hearth was started before.

`--first-ever` (venv only): a fresh clone's first start, the compile cache empty too (numba's cache
lives in the cache folder; NUMBA_CACHE_DIR is taken out of the environment). Side by side per
repeat: *unprepared* (the kernels compile while the window waits) and *prepared* (the set-up ran
`python -m hearth.engine.prepare` first, as `./dev run` does; its seconds are reported apart),
then *next* on the prepared folders.
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
BUNDLE = ROOT / "dist" / "hearth" / "hearth"
GOALS = {"window": 2.0, "first_token": 4.0}
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK  # utime, stime
    except (OSError, IndexError, ValueError):
        return float("nan")


def targets() -> dict[str, tuple[list[str], dict]]:
    out = {}
    if BUNDLE.is_file():
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        out["bundle"] = ([str(BUNDLE)], env)
    smoke = str(ROOT / "packaging" / "smoke")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([smoke, str(ROOT)])}
    out["venv"] = ([sys.executable, "-m", "hearth.app"], env)
    return out


def run_once(cmd: list[str], env: dict, dirs: Path, timeout: float = 300) -> dict:
    env = {**env, "HEARTH_SMOKE_TEST": "1", "QT_QPA_PLATFORM": "offscreen", "HEARTH_SMOKE_MESSAGE": "Hi", "HEARTH_SMOKE_STOP": "1",
           "HEARTH_SMOKE_TIMEOUT": str(timeout - 20),
           "HEARTH_DATA_DIR": str(dirs / "data"), "HEARTH_CACHE_DIR": str(dirs / "cache")}
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, cwd=dirs, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    res: dict = {}
    for line in p.stdout:
        if not line.startswith("HEARTH_SMOKE "):
            continue
        cpu = _cpu_s(p.pid)
        _, name, payload = line.split(" ", 2)
        d = json.loads(payload)
        res[name] = d["t"] - t0
        res[name + "_cpu"] = cpu
        if name == "reply":
            res["error"] = d["error"]
        if name == "model_ready":
            res["adapter"] = d.get("adapter", "")
    rc = p.wait(timeout)
    res["total"] = time.time() - t0
    if rc != 0 or "first_token" not in res:
        raise RuntimeError(f"{cmd[0]}: exit status {rc}, events {sorted(res)}")
    return res


def _fmt(vals: list[float]) -> str:
    vals = [v for v in vals if v == v]
    if not vals:
        return "n/a"
    m = statistics.median(vals)
    return f"{m:.2f}" if len(vals) == 1 else f"{m:.2f} ({min(vals):.2f}-{max(vals):.2f})"


def first_ever(repeat: int) -> int:
    cmd, env = targets()["venv"]
    env = {k: v for k, v in env.items() if k != "NUMBA_CACHE_DIR"}
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="hearth-first-") as tmp:
        for i in range(repeat):
            for kind in ("unprepared", "prepared"):
                dirs = Path(tmp) / f"{kind}-{i}"
                dirs.mkdir()
                prep = float("nan")
                if kind == "prepared":
                    t = time.time()
                    subprocess.run([sys.executable, "-m", "hearth.engine.prepare"], check=True, stdout=subprocess.DEVNULL,
                                   env={**env, "HEARTH_CACHE_DIR": str(dirs / "cache")})
                    prep = time.time() - t
                for start in ("first", "next") if kind == "prepared" else ("first",):
                    r = run_once(cmd, env, dirs)
                    r["prepare"] = prep if start == "first" else float("nan")
                    rows.setdefault(f"{kind} {start}", []).append(r)
                    print(f"  {kind} {start}: prepare {r['prepare']:.1f} s, window {r['window']:.2f} s, "
                          f"model {r.get('model_ready', float('nan')):.2f} s, first token {r['first_token']:.2f} s",
                          file=sys.stderr, flush=True)
    print(f"\nFirst-ever start (fresh compile cache), {repeat} runs; median (min-max); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    cols = [("prepare", "set-up prepare (s)"), ("window", "to window (s)"), ("model_ready", "model loaded (s)"),
            ("first_token", "to first token (s)")]
    print("| start | " + " | ".join(c[1] for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, rs in rows.items():
        print(f"| {name} | " + " | ".join(_fmt([r.get(k, float('nan')) for r in rs]) for k, _ in cols) + " |")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["bundle", "venv"])
    ap.add_argument("--first-ever", action="store_true", help="fresh compile cache: unprepared vs prepared")
    a = ap.parse_args(argv)
    if a.first_ever:
        return first_ever(a.repeat)
    tg = targets()
    if "bundle" not in tg:
        print(f"(no bundle at {BUNDLE.relative_to(ROOT)}: run packaging/build to include it)")
    if a.only:
        if a.only not in tg:
            return 1
        tg = {a.only: tg[a.only]}
    results: dict[tuple[str, str], list[dict]] = {}
    adapter = ""
    with tempfile.TemporaryDirectory(prefix="hearth-startup-") as tmp:
        for i in range(a.repeat):
            for name, (cmd, env) in tg.items():
                dirs = Path(tmp) / f"{name}-{i}"
                dirs.mkdir()
                for start in ("first", "next"):
                    r = run_once(cmd, env, dirs)
                    adapter = r.get("adapter", adapter)
                    results.setdefault((name, start), []).append(r)
                    print(f"  {name:6} {start:5} window {r['window']:.2f} s, model {r.get('model_ready', float('nan')):.2f} s, "
                          f"first token {r['first_token']:.2f} s", file=sys.stderr, flush=True)
    print(f"\nStartup, {a.repeat} runs each; median (min-max); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores; model on: {adapter}\n")
    cols = [("window", "to window (s)"), ("model_ready", "model loaded (s)"), ("first_token", "to first token (s)"),
            ("window_cpu", "CPU s at window"), ("first_token_cpu", "CPU s at first token")]
    print("| app | start | " + " | ".join(c[1] for c in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    label = {"bundle": "bundle (dist/hearth/hearth)", "venv": "`python -m hearth` (venv)"}
    for (name, start), rs in results.items():
        print(f"| {label[name]} | {start} | " + " | ".join(_fmt([r.get(k, float('nan')) for r in rs]) for k, _ in cols) + " |")
    print(f"\ngoals: window <= {GOALS['window']:.0f} s, first token <= {GOALS['first_token']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
