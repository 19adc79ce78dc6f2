"""Importing hearth.engine limits glibc's malloc arenas (engine/malloc_arenas.py): threads that
allocate at once share one arena instead of each keeping its own (and its freed scratch)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Six threads allocate and hold 8 MB (numpy) at the same time, then glibc's malloc_stats() prints
# one "Arena N:" block per arena to stderr.
CHILD = r"""
import ctypes, sys, threading
if sys.argv[1] == "1":
    import hearth.engine
import numpy as np
held, done = threading.Barrier(7), threading.Event()
def work():
    a = np.ones(2_000_000, np.float32)
    held.wait()
    done.wait()
ts = [threading.Thread(target=work) for _ in range(6)]
for t in ts: t.start()
held.wait()
ctypes.CDLL(None).malloc_stats()
done.set()
for t in ts: t.join()
"""

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="glibc only")


def arenas(import_engine: bool) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MALLOC_ARENA_MAX", None)
    r = subprocess.run([sys.executable, "-c", CHILD, "1" if import_engine else "0"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return sum(1 for line in r.stderr.splitlines() if line.startswith("Arena "))


@glibc
def test_engine_import_limits_malloc_arenas():
    assert arenas(False) > 2    # glibc's own choice: one per allocating thread here
    assert arenas(True) == 2
