"""A hybrid (recurrent) model in the Engine: truncate gives the state after n tokens (a snapshot
restored and the rest recomputed), a failed pass leaves the resident tokens' state, chat
segments are skipped (never restored into a recurrent model), metadata errors name the key."""

from __future__ import annotations

import io
import types

import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.config import ModelConfig
from hearth.engine.errors import EngineError, PrefixImageError, UnsupportedModelError
from hearth.engine.gguf import GGUFFile
from hearth.engine.library.support import verdict_for_gguf
from hearth.engine.prefix.chat_images import ChatImages, Root
from hearth.engine.prefix.store import PrefixStore
from tests.gguf_patch import patch_metadata

IDS = list(range(1000, 1040))


@pytest.fixture(scope="module")
def path(reference_dir):
    return reference_dir / "tiny-next" / "qwen35" / "tiny-qwen35.gguf"


@pytest.fixture(scope="module")
def engine(path):
    e = Engine.load(path, n_ctx=128)
    e._prefault.join()
    yield e
    e.close()


def fresh_logits(engine, ids):
    engine.reset()
    out = engine.feed(ids)
    engine.reset()
    return out


@pytest.mark.parametrize("n", [0, 5, 20, 39])
def test_truncate_gives_the_state_after_n_tokens(engine, n):
    want = fresh_logits(engine, IDS[:n + 1]) if n else None
    engine.reset()
    engine.feed(IDS[:30])
    engine.feed(IDS[30:])
    engine.truncate(n)
    assert engine.tokens == IDS[:n]
    if n:
        got = engine.feed(IDS[n:n + 1])
        # the same state up to float rounding: the recompute splits the tokens into other chunks
        assert np.abs(got - want).max() < 1e-3


def test_truncate_uses_the_nearest_snapshot(engine, monkeypatch):
    engine.reset()
    engine.feed(IDS[:30])        # snapshot at 30
    engine.feed(IDS[30:])        # snapshot at 40
    seen = []
    real = engine.backend.forward
    monkeypatch.setattr(engine.backend, "forward", lambda ids, pos, **kw: (seen.append((pos, len(ids))), real(ids, pos, **kw))[1])
    engine.truncate(33)
    assert seen == [(30, 3)]     # from the snapshot at 30, not from 0


def test_a_failed_pass_rewinds_to_the_resident_tokens(engine, monkeypatch):
    want = fresh_logits(engine, IDS[:21])
    engine.feed(IDS[:20])
    real = engine.backend.forward
    calls = []

    def broken(ids, pos, **kw):
        calls.append(pos)
        if len(calls) == 1:
            real(ids[:3], pos)  # the recurrent state moves, then the pass fails
            raise RuntimeError("boom")
        return real(ids, pos, **kw)
    monkeypatch.setattr(engine.backend, "forward", broken)
    with pytest.raises(RuntimeError):
        engine.feed(IDS[20:30])
    monkeypatch.setattr(engine.backend, "forward", real)
    assert engine.tokens == IDS[:20]
    assert np.abs(engine.feed(IDS[20:21]) - want).max() < 1e-3


def test_state_cannot_be_sliced_back(engine):
    engine.reset()
    engine.feed(IDS[:10])
    with pytest.raises(EngineError, match="snapshot"):
        engine.kv.truncate(5)


def test_chat_segments_hold_the_state_at_their_end(engine, tmp_path):
    """A segment holds the attention K/V of its positions and the recurrent state at its end, so a
    restore of it needs no recompute (bit-identity and refusals: tests/test_warm_segments.py)."""
    engine.reset()
    store = PrefixStore(tmp_path / "prefixes")
    store.ensure(engine, IDS[:12])
    chats = ChatImages(store)
    engine.feed(IDS[12:20])
    root = Root(bytes.fromhex(engine.prefix_key(IDS[:12])), 12)
    assert chats.save(engine, root).bytes_written > 0
    engine.reset()
    store.ensure(engine, IDS[:12])
    got = chats.restore(engine, IDS[:25], root)
    assert got.n_tokens == 20 and got.restored == 8


def without(g, key):
    md = dict(g.metadata)
    del md[key]
    return types.SimpleNamespace(path=g.path, architecture=g.architecture, metadata=md, tensors=g.tensors,
                                 get=md.get)


@pytest.mark.parametrize("key", ["qwen35.ssm.conv_kernel", "qwen35.ssm.state_size", "qwen35.ssm.group_count",
                                 "qwen35.ssm.time_step_rank", "qwen35.ssm.inner_size"])
def test_missing_recurrent_metadata_names_the_key(path, key):
    g = GGUFFile.open(path)
    with pytest.raises(UnsupportedModelError, match=key.replace(".", r"\.")):
        ModelConfig.from_gguf(without(g, key))


@pytest.mark.parametrize("key, value, named", [
    ("qwen35.ssm.inner_size", 65, "inner_size"),
    ("qwen35.ssm.group_count", 3, "group_count"),
    ("qwen35.ssm.conv_kernel", 0, "conv_kernel"),
])
def test_inconsistent_recurrent_metadata_is_refused_before_loading(path, tmp_path, key, value, named):
    bad = patch_metadata(path, tmp_path / "bad.gguf", key, value)
    g = GGUFFile.open(bad, check_types=False)
    v = verdict_for_gguf(g)
    assert v.refused and named in v.reason
    with pytest.raises(UnsupportedModelError, match=named):
        Engine.load(bad, n_ctx=16)


def test_layer_pattern_from_the_interval(path):
    g = GGUFFile.open(path)
    md = dict(g.metadata)
    md["qwen35.full_attention_interval"] = 2
    fake = types.SimpleNamespace(path=g.path, architecture=g.architecture, metadata=md, tensors=g.tensors)
    assert ModelConfig.from_gguf(fake).hybrid.recurrent_layers == (True, False, True, False)
    md["qwen35.attention.recurrent_layers"] = np.array([1, 0, 2, 1])
    with pytest.raises(UnsupportedModelError, match="recurrent_layers"):
        ModelConfig.from_gguf(fake)


def test_a_second_turn_that_rewrites_the_reply_continues_exactly(engine, path):
    """A chat's next prompt often re-renders the last reply differently (a template that drops its
    thinking): the engine goes back to the common prefix through a snapshot, and the next reply is
    the one a fresh engine gives for that prompt."""
    from hearth.engine.sampling import Sampling
    engine.reset()
    first = IDS[:12]
    reply = [e.token_id for e in engine.generate(first, max_tokens=6, sampling=Sampling.greedy()) if not e.final]
    assert engine.tokens == first + reply[:-1] or engine.tokens == first + reply
    second = first + [7, 8, 9] + IDS[20:26]          # diverges right after the first prompt
    got = [e.token_id for e in engine.generate(second, max_tokens=4, sampling=Sampling.greedy()) if not e.final]
    fresh = Engine.load(path, n_ctx=128)
    try:
        fresh._prefault.join()
        want = [e.token_id for e in fresh.generate(second, max_tokens=4, sampling=Sampling.greedy()) if not e.final]
    finally:
        fresh.close()
    assert got == want


def test_a_prompt_ending_at_a_snapshot_costs_no_recompute(engine, monkeypatch):
    engine.reset()
    want = engine.feed(IDS[:25])       # snapshot at 25, with its logits
    engine.feed(IDS[25:35])
    calls = []
    real = engine.backend.forward
    monkeypatch.setattr(engine.backend, "forward", lambda ids, pos, **kw: (calls.append(pos), real(ids, pos, **kw))[1])
    reused, computed, logits = engine._sync(IDS[:25])
    assert (reused, computed, calls) == (25, 0, [])
    assert engine.tokens == IDS[:25] and np.array_equal(logits, want)
    # and the state is the one after 25 tokens
    assert np.abs(engine.feed(IDS[25:26]) - fresh_logits_after(engine, IDS[:26])).max() < 1e-3


def fresh_logits_after(engine, ids):
    e2 = Engine.load(engine.gguf.path, n_ctx=128)
    try:
        e2._prefault.join()
        return e2.feed(ids)
    finally:
        e2.close()


def test_the_first_snapshot_is_kept_for_a_new_chat(engine, monkeypatch):
    engine.reset()
    engine.feed(IDS[:8])                       # a preset's prefix
    for k in range(8, 36, 4):                  # seven more turns
        engine.feed(IDS[k:k + 4])
    kept = [s.n_tokens for s in engine._snapshots.items]
    assert kept == list(range(8, 37, 4))       # every turn's end, within the memory budget
    monkeypatch.setattr(engine._snapshots, "budget", 0)
    engine.feed(IDS[36:40])                    # over the budget: the oldest and the newest stay
    kept = [s.n_tokens for s in engine._snapshots.items]
    assert kept[0] == 8 and len(kept) == engine._snapshots.keep and kept[-1] == 40
    calls = []
    real = engine.backend.forward
    monkeypatch.setattr(engine.backend, "forward", lambda ids, pos, **kw: (calls.append(pos), real(ids, pos, **kw))[1])
    engine.truncate(8)
    assert calls == []
