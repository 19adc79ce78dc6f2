"""CpuBackend: threaded row ranges give the serial result; splits balance attention work;
BLAS thread choice; forward's argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import hearth.engine.cpu_backend as cb
from hearth.engine.config import ModelConfig
from hearth.engine.cpu.linear import vnni_tiles
from hearth.engine.errors import ContextFullError
from hearth.engine.gguf import GGUFFile

BATCH_X = "int8-vnni" if vnni_tiles() else "int8"   # the batch path describe() names


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


def test_prefill_is_bit_identical_on_one_or_all_threads(backend, smollm2_reference, monkeypatch):
    """The thread count a chunk runs on follows the machine's load; its bits must not."""
    if cb._BLAS.cores < 2 or not cb._BLAS.can_set:
        pytest.skip("needs two cores and a settable BLAS thread count")
    ids = next(p for p in smollm2_reference["prompts"] if p["name"] == "english")["ids"]
    runs = []
    for n in (1, cb._BLAS.cores, 1):
        monkeypatch.setattr(cb._BLAS, "fixed", n)
        backend.kv.clear()
        logits = backend.forward(ids, 0, all_logits=True)
        assert backend.threads == n
        runs.append((logits, backend.kv.read_prefix(3, len(ids))[0].copy()))
    for logits, k in runs[1:]:
        assert np.array_equal(logits, runs[0][0]) and np.array_equal(k, runs[0][1])


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
    assert backend.describe() == {"backend": "cpu", "decode_x": "int8", "batch_x": BATCH_X}   # 8-bit x, the default


def test_decode_threads_prefer_the_faster_and_probe_the_other():
    d = cb.DecodeThreads(cores=2, probe_every=8, max_interval=32)
    assert d.pick() == 2  # untimed options are tried first
    d.record(2, 0.180)    # two spinning threads with another process on a core
    assert d.pick() == 1
    d.record(1, 0.030)
    picks = []
    for _ in range(100):
        n = d.pick()
        picks.append(n)
        d.record(n, 0.180 if n == 2 else 0.030)
    probes = [i for i, n in enumerate(picks) if n == 2]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert probes and probes[0] < 8  # the slow count is tried again ...
    assert gaps == sorted(gaps) and gaps[-1] == 32  # ... less often while it stays slow, up to the cap
    for _ in range(200):  # the machine got quiet: two threads are now faster
        n = d.pick()
        d.record(n, 0.020 if n == 2 else 0.030)
    assert d.best() == 2 and d.pick() == 2
    d.forget()  # a prefill moved the context: both counts are timed again
    assert not d.cost
    assert d.pick() == 2
    d.record(2, 0.400)  # the first token after a prefill is not timed (cold caches)
    assert not d.cost and d.pick() == 2
    d.record(2, 0.040)
    assert d.pick() == 1
    assert cb.DecodeThreads(cores=1).pick() == 1


def test_one_token_passes_are_bit_identical_on_one_or_all_threads(backend, monkeypatch):
    """Switching the decode thread count must never change a result (it happens mid-reply)."""
    if not cb._BLAS.can_set or cb._BLAS.cores < 2:
        pytest.skip("needs numpy's OpenBLAS and two cores to compare thread counts")
    ids = list(range(100, 140))
    results = {}
    for n in (1, cb._BLAS.cores):
        monkeypatch.setattr(cb._BLAS, "fixed", 1)  # the same prefill (row threads round differently)
        backend.kv.clear()
        backend.forward(ids, 0)
        monkeypatch.setattr(cb._BLAS, "fixed", n)
        logits = [backend.forward([t], len(ids) + i).copy() for i, t in enumerate((7, 8, 9))]
        results[n] = logits, [x.copy() for x in backend.kv.read_prefix(5, len(ids) + 3)]
    (l1, kv1), (l2, kv2) = results.values()
    for a, b in zip(l1, l2):
        assert np.array_equal(a, b)
    for a, b in zip(kv1, kv2):
        assert np.array_equal(a, b)


def test_decode_times_both_thread_counts(backend, monkeypatch):
    monkeypatch.setattr(cb._BLAS, "fixed", None)
    backend.kv.clear()
    backend._decode = cb.DecodeThreads(cb._BLAS.cores)
    backend.forward(list(range(100, 120)), 0)
    for i in range(4):
        backend.forward([7], 20 + i)
    if cb._BLAS.can_set and cb._BLAS.cores > 1:
        assert set(backend._decode.cost) == {1, cb._BLAS.cores}


def test_a_slow_pass_drops_to_one_thread():
    """A one-token pass past its deadline (a descheduled worker) finishes on one thread."""
    import numba  # noqa: PLC0415
    from hearth.engine.cpu.linear import set_threads  # noqa: PLC0415
    set_threads(2)
    runner = cb.DeadlineRunner()
    calls = []
    runner.run(lambda r0, r1: calls.append((r0, r1)), [(0, 1)])
    assert not runner.dropped and numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
    runner.deadline = 0.0  # long past
    runner.run(lambda r0, r1: calls.append((r0, r1)), [(0, 1)])
    assert runner.dropped and numba.get_num_threads() == 1 and calls == [(0, 1), (0, 1)]


def test_float_x_switch(backend):
    """8-bit x in one-token passes by default; the float-x path (the consistency tests' reference)
    keys prefix images apart, since a decoded token's K/V differ a little between the two."""
    assert backend.int8 and backend.describe() == {"backend": "cpu", "decode_x": "int8", "batch_x": BATCH_X}   # the default
    backend.kv.clear()
    backend.forward(list(range(100, 110)), 0)
    eight = backend.forward([7], 10).copy()
    assert backend.describe() != {"backend": "cpu"}
    with backend.float_activations():
        assert not backend.int8 and backend.describe() == {"backend": "cpu"}
        flt = backend.forward([7], 10).copy()
    assert backend.int8
    d = np.abs(eight - flt)
    assert 0 < d.max() < 2.0       # the two paths ran, and agree as 8-bit activations do


def test_logits_after_a_prompt_equal_a_recomputed_last_token(backend):
    """The engine recomputes only a prompt's last token when it reuses the prompt's cache (the same
    request again): those logits must be the bits the whole prompt gave, or a greedy reply could
    change (one-token passes use 8-bit x, batches float32)."""
    backend.set_int8(True)
    ids = list(range(100, 140))
    backend.kv.clear()
    whole = backend.forward(ids, 0).copy()
    backend.kv.truncate(len(ids) - 1)
    again = backend.forward(ids[-1:], len(ids) - 1)
    assert np.array_equal(whole, again)
    with backend.float_activations():  # the float path: one pass, any split gives float rounding
        backend.kv.clear()
        flt = backend.forward(ids, 0)
    assert 0 < np.abs(flt - whole).max() < 2.0


def _sequence(backend):
    """A chunk for the row threads (40 ids), a short input (20 ids), three one-token passes: the
    logits of each and the K/V they left, as bits."""
    backend.kv.clear()
    out = [backend.forward(list(range(100, 140)), 0).copy(), backend.forward(list(range(300, 320)), 40).copy()]
    out += [backend.forward([t], 60 + i).copy() for i, t in enumerate((7, 8, 9))]
    n = backend.kv.n_tokens
    return out, [x.copy() for layer in (0, 11, 29) for x in backend.kv.read_prefix(layer, n)]


def _set_openblas_threads(n: int) -> None:
    for fn in cb._BLAS._setters:
        fn(n)


def test_results_depend_only_on_the_ids_not_on_what_ran_before(backend, monkeypatch):
    """Deterministic by construction: a warm-up run on another thread, OpenBLAS set to all cores by
    other code, a busy or a quiet machine, one or all threads: the same ids give the same bits.
    (OpenBLAS's thread count is process-wide and its sgemm's bits follow it: unpinned, a warm-up's
    one-token pass on the background thread left it at two and changed every later chunk.)"""
    import threading  # noqa: PLC0415
    if cb._BLAS.cores < 2 or not cb._BLAS.can_set:
        pytest.skip("needs two cores and numpy's OpenBLAS")
    monkeypatch.setattr(cb._BLAS, "fixed", None)
    monkeypatch.setattr(cb.os, "getloadavg", lambda: (0.1, 0.0, 0.0))   # quiet: all cores
    ref_logits, ref_kv = _sequence(backend)

    def perturbed(setup):
        setup()
        logits, kv = _sequence(backend)
        return all(np.array_equal(a, b) for a, b in zip(logits + kv, ref_logits + ref_kv))

    def warm_elsewhere():
        t = threading.Thread(target=backend.warm_up)
        t.start()
        t.join()
        assert backend.kv.n_tokens == 0
    assert perturbed(warm_elsewhere), "a warm-up on another thread changed later results"

    def other_code_sets_blas():
        t = threading.Thread(target=_set_openblas_threads, args=(cb._BLAS.cores,))
        t.start()
        t.join()
    assert perturbed(other_code_sets_blas), "OpenBLAS threads set by other code changed the results"
    monkeypatch.setattr(cb.os, "getloadavg", lambda: (cb._BLAS.cores + 5.0, 0.0, 0.0))
    assert perturbed(lambda: None), "a busy machine (one thread) computed other bits than a quiet one"
    monkeypatch.setattr(cb._BLAS, "fixed", cb._BLAS.cores)
    assert perturbed(lambda: None)



def test_threaded_map_runs_every_piece_once_and_raises_what_a_piece_raised():
    rows = cb.ThreadedRows(2)
    try:
        seen = []
        rows.map(seen.append, range(50))
        assert sorted(seen) == list(range(50))
        rows.map(seen.append, [])

        def piece(i):
            if i == 7:
                raise ValueError("piece 7")
        with pytest.raises(ValueError, match="piece 7"):
            rows.map(piece, range(20))
    finally:
        rows.close()


def test_a_short_input_spreads_its_pieces_over_the_threads(backend, monkeypatch):
    """A 20-row input on two threads: rows together, tiles and heads spread (SpreadPieces)."""
    if cb._BLAS.cores < 2 or not cb._BLAS.can_set:
        pytest.skip("needs two cores and numpy's OpenBLAS")
    backend.threads = 2
    runner = backend._runner(20)
    assert isinstance(runner, cb.SpreadPieces) and runner.work is backend._rows
    assert runner.split(20) == [(0, 20)]
    backend.threads = 1
    assert backend._runner(20) is cb.SERIAL


@pytest.mark.parametrize("threads", [1, 2])
def test_a_short_input_s_last_token_block_by_block_equals_a_separate_one_token_pass(default_model_path, threads,
                                                                                     monkeypatch):
    """A short input's last token runs as a one-token pass interleaved with the input, block by block
    (Decoder.forward's `tail`): its logits and every position's K/V are the bits of the batch
    followed by a separate one-token pass, in float32 and float16 caches."""
    monkeypatch.setattr(cb._BLAS, "fixed", threads)
    g = GGUFFile.open(default_model_path)
    for dtype in ("f32", "f16"):
        be = cb.CpuBackend(ModelConfig.from_gguf(g), g, n_ctx=128, kv_dtype=dtype)
        ids = np.arange(500, 560)
        be.forward(ids[:40], 0)
        calls = []
        real = be.model.forward
        monkeypatch.setattr(be.model, "forward", lambda *a, **k: calls.append(k.get("tail")) or real(*a, **k))
        fused = be.forward(ids[40:60], 40)
        assert calls == [int(ids[59])] and be.kv.n_tokens == 60
        kv = [x.copy() for layer in range(be.cfg.n_layer) for x in be.kv.read_prefix(layer, 60)]
        be._forward(ids[40:59], 40, False, logits=False)
        separate = be._forward(ids[59:60], 59, False)
        assert np.array_equal(fused, separate), dtype
        assert all(np.array_equal(a, b) for a, b in
                   zip(kv, [x for layer in range(be.cfg.n_layer) for x in be.kv.read_prefix(layer, 60)])), dtype
        be.close()
