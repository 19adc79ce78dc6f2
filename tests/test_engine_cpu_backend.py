"""CpuBackend: threaded row ranges give the serial result; splits balance attention work;
BLAS thread choice; forward's argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import engine.cpu_backend as cb
from engine.config import ModelConfig
from engine.errors import ContextFullError
from engine.gguf import GGUFFile


@pytest.fixture(scope="module")
def backend(default_model_path):
    g = GGUFFile.open(default_model_path)
    return cb.CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=256)


def test_threaded_rows_equal_serial(backend, smollm2_reference, monkeypatch):
    ids = next(p for p in smollm2_reference["prompts"] if p["name"] == "english")["ids"]
    assert len(ids) >= cb.MIN_PARALLEL_ROWS
    monkeypatch.setattr(cb._BLAS, "fixed", 1)
    backend.kv.clear()
    serial = backend.forward(ids, 0, all_logits=True)
    k_serial = backend.kv.read_prefix(7, len(ids))[0].copy()
    monkeypatch.setattr(cb._BLAS, "fixed", 2)
    backend.kv.clear()
    threaded = backend.forward(ids, 0, all_logits=True)
    assert backend.threads == 2 and backend._rows is not None
    np.testing.assert_allclose(threaded, serial, atol=2e-3)
    np.testing.assert_allclose(backend.kv.read_prefix(7, len(ids))[0], k_serial, atol=1e-4)


def test_split_balances_attention_work():
    rows = cb.ThreadedRows(2)
    try:
        assert rows.split(10) == [(0, 10)]  # too small to split
        (a0, a1), (b0, b1) = rows.split(512, pos=0, fixed=0)
        assert a0 == 0 and a1 == b0 and b1 == 512
        # pure attention cost grows with the row: the first range holds more rows (~362 of 512)
        assert 340 < a1 < 380
        # with a large fixed cost per row the split tends to the middle
        assert abs(rows.split(512, pos=0, fixed=10**7)[0][1] - 256) <= 1
        # a sliding window caps the attention cost
        assert abs(rows.split(512, pos=5000, fixed=0, window=64)[0][1] - 256) <= 1
    finally:
        rows.close()


def test_blas_threads_choice(monkeypatch):
    monkeypatch.setattr(cb._BLAS, "fixed", None)
    monkeypatch.setattr(cb.os, "getloadavg", lambda: (cb._BLAS.cores + 5.0, 0.0, 0.0))
    assert cb._BLAS.choose() == 1  # oversubscribed: one thread
    monkeypatch.setattr(cb.os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert cb._BLAS.choose() == cb._BLAS.cores


def test_forward_checks(backend):
    backend.kv.clear()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        backend.forward([49152], 0)
    with pytest.raises(ContextFullError):
        backend.forward([1] * 10, 250)
    with pytest.raises(ValueError):
        backend.forward([], 0)
    assert backend.describe() == {"backend": "cpu"}
