"""qwen35 through the Engine on the GPU backend: truncate(n) restores the newest snapshot at or
before n (read back from the GPU, written again) and recomputes the rest, giving the next logits of
a fresh computation of n tokens; a failed pass rewinds; a prefix image holds the attention layers'
K/V and the recurrent state and restores it bit for bit; Engine picks GpuHybridBackend."""

from __future__ import annotations

import io

import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.prefix.format import HEADER_SIZE, ImageHeader
from hearth.engine.sampling import Sampling

IDS = list(range(1000, 1040))


@pytest.fixture(scope="module")
def engine(reference_dir):
    from tests.gpu_fixtures import float_path_env, make_test_device
    make_test_device().destroy()          # skips where there is no adapter
    with float_path_env():                # truncate is held to a fresh computation at 1e-3
        e = Engine.load(reference_dir / "tiny-next" / "qwen35" / "tiny-qwen35.gguf", backend="gpu", n_ctx=96)
        e._prefault.join()
        yield e
        e.close()


def fresh(engine, ids):
    engine.reset()
    out = engine.feed(ids).copy()
    engine.reset()
    return out


def test_engine_runs_qwen35_on_the_gpu(engine):
    from hearth.engine.gpu.hybrid import GpuHybridBackend
    assert isinstance(engine.backend, GpuHybridBackend) and engine.backend.name == "gpu"
    assert engine.kv.recurrent
    assert not (engine.backend.int8 or engine.backend.f16 or engine.backend.mm8)   # the pinned float path


@pytest.mark.parametrize("n", [0, 5, 20, 33, 39])
def test_truncate_gives_the_state_after_n_tokens(engine, n):
    want = fresh(engine, IDS[:n + 1]) if n else None
    engine.reset()
    engine.feed(IDS[:30])            # snapshot at 30
    engine.feed(IDS[30:])            # snapshot at 40
    engine.truncate(n)
    assert engine.tokens == IDS[:n]
    if n:
        got = engine.feed(IDS[n:n + 1])
        assert np.abs(got - want).max() < 1e-3


def test_truncate_recomputes_from_the_nearest_snapshot(engine, monkeypatch):
    engine.reset()
    engine.feed(IDS[:30])
    engine.feed(IDS[30:])
    seen = []
    real = engine.backend.forward
    monkeypatch.setattr(engine.backend, "forward",
                        lambda ids, pos, **kw: (seen.append((pos, len(ids))), real(ids, pos, **kw))[1])
    engine.truncate(33)
    assert seen == [(30, 3)]


def test_a_failed_pass_rewinds_to_the_resident_tokens(engine, monkeypatch):
    want = fresh(engine, IDS[:21])
    engine.feed(IDS[:20])
    real = engine.backend.forward
    calls = []

    def broken(ids, pos, **kw):
        calls.append(pos)
        if len(calls) == 1:
            real(ids[:3], pos)          # the recurrent state moves on the GPU, then the pass fails
            raise RuntimeError("boom")
        return real(ids, pos, **kw)
    monkeypatch.setattr(engine.backend, "forward", broken)
    with pytest.raises(RuntimeError):
        engine.feed(IDS[20:30])
    monkeypatch.setattr(engine.backend, "forward", real)
    assert engine.tokens == IDS[:20]
    assert np.abs(engine.feed(IDS[20:21]) - want).max() < 1e-3


def test_greedy_generation_matches_the_cpu(engine, reference_dir):
    cpu = Engine.load(reference_dir / "tiny-next" / "qwen35" / "tiny-qwen35.gguf", backend="cpu", n_ctx=96)
    try:
        cpu._prefault.join()
        want = [e.token_id for e in cpu.generate(IDS[:12], max_tokens=6, sampling=Sampling.greedy()) if not e.final]
    finally:
        cpu.close()
    engine.reset()
    got = [e.token_id for e in engine.generate(IDS[:12], max_tokens=6, sampling=Sampling.greedy()) if not e.final]
    assert got == want


def test_prefix_image_holds_the_state_and_restores_it_bit_identically(engine):
    n = 24
    want_prefix = fresh(engine, IDS[:n])
    engine.reset()
    engine.feed(IDS[:n])
    want_next = engine.feed(IDS[n:n + 3]).copy()
    engine.reset()
    buf = io.BytesIO()
    engine.save_prefix(IDS[:n], buf)
    raw = buf.getvalue()
    h = ImageHeader.unpack(raw[:HEADER_SIZE])
    assert h.has_state and h.n_state == engine.kv.state_size(n) > 0
    assert h.n_layers == engine.kv.image_layers == 1
    engine.reset()
    engine.feed(IDS[5:9])                       # something else resident, then the image
    engine.restore_prefix(IDS[:n], io.BytesIO(raw))
    assert engine.tokens == IDS[:n]
    np.testing.assert_array_equal(engine.last_logits, want_prefix)
    np.testing.assert_array_equal(engine.feed(IDS[n:n + 3]), want_next)

