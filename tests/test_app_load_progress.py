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
