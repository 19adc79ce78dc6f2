"""The app's local chat source forwards the engine's load progress as percentages, and a model that
does not fit is refused with the engine's message (no traceback, the previous model kept)."""

from __future__ import annotations

import pytest

from hearth.app.chat_source import LocalBackend
from hearth.engine import memory


def test_load_reports_percentages(tmp_path):
    seen = []
    src = LocalBackend(tmp_path / "cache", 1 << 30)
    src.load(None, "cpu", 256, lambda what, done, total: seen.append((what, done, total)))
    pct = [d for w, d, t in seen if t == 100]
    assert pct and pct == sorted(pct) and pct[-1] == 100 and len(set(pct)) == len(pct)
    assert all(w.startswith("Loading ") for w, _, t in seen if t == 100)


def test_a_model_that_does_not_fit_is_refused_and_the_old_one_kept(tmp_path, monkeypatch):
    src = LocalBackend(tmp_path / "cache", 1 << 30)
    src.load(None, "cpu", 256, lambda *a: None)
    old = src.engine
    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * 2**20)
    with pytest.raises(memory.NotEnoughMemoryError, match=r"GB available: pick a smaller"):
        src.load(None, "cpu", 256, lambda *a: None)
    assert src.engine is old


def test_a_first_start_without_prepared_kernels_says_so_once(tmp_path, monkeypatch):
    """No set-up compiled the kernels (a fresh compile cache): computing the first prefix says it
    is preparing the CPU engine, then marks the cache, and the next start says the usual words."""
    from hearth.engine import prepare
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "compiled"))   # only where the marker is looked for
    (tmp_path / "compiled").mkdir()
    assert not prepare.prepared()
    words = []
    for run in range(2):
        src = LocalBackend(tmp_path / f"cache{run}", 1 << 30)
        src.load(None, "cpu", 256, lambda *a: None)
        src.prepare_prefix("You are terse.", [], lambda what, done, total: words.append((run, what)))
        src.engine.close()
    first = {w for r, w in words if r == 0}
    assert first == {"Preparing the CPU engine (first start only)… computing the preset prefix"}
    assert prepare.prepared()
    assert {w for r, w in words if r == 1} == {"Computing the preset prefix"}
