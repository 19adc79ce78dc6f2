"""Restores, branches and truncations give exactly the state of a fresh computation, on every
architecture (#29): next-token logits bit for bit after a chain of chat segments is read by a fresh
engine, after an edit inside the chat (read from disk, and in memory: a truncate), at positions past
the sliding window of Gemma 3/4 and gpt-oss (window 8 in their tiny models and in Gemma 3 270M with
its window cut to 8; chats of 28 tokens).
A hybrid model's snapshots at every turn end make an edit recompute at most the edited turn. MoE
segments hold only the K/V (and a hybrid's recurrent state): never an expert's weights."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.prefix import PrefixStore
from hearth.engine.prefix.chat_images import ChatImages, Root
from hearth.engine.prefix.format import HEADER_SIZE
from hearth.engine.prefix.segments import SegmentHeader
from tests.tiny_archs import ALL, WINDOWED, tiny_path

TURNS = [list(range(1000, 1012)), list(range(2000, 2009)), list(range(3000, 3007))]
EDIT = [11, 12, 13]


@pytest.fixture(scope="module", params=(*ALL, "gemma3-w8"))
def pair(request, reference_dir, tmp_path_factory):
    path = tiny_path(request.param, reference_dir, tmp_path_factory)
    a, b = Engine.load(path, n_ctx=64), Engine.load(path, n_ctx=64)
    yield request.param, a, b
    a.close()
    b.close()


def fresh(engine, *chunks):
    """Logits after the last chunk, from nothing, in these chunks (one per turn, as a chat)."""
    engine.reset()
    for c in chunks:
        out = engine.feed(c).copy()
    engine.reset()
    return out


def branched(engine, cut):
    """Logits after EDIT at `cut` (4 tokens into turn 2), from nothing, as the engine under test
    computed the positions before it: a plain model's K/V of turn 2 in one chunk of 9 (then a
    slice; some architectures round a chunk of 9 and one of 4 differently), a hybrid model's turn
    2 recomputed as 4 tokens from turn 1's snapshot."""
    engine.reset()
    if getattr(engine.kv, "recurrent", False):
        return fresh(engine, TURNS[0], TURNS[1][:4], EDIT)
    engine.feed(TURNS[0])
    engine.feed(TURNS[1])
    engine.truncate(cut)
    out = engine.feed(EDIT).copy()
    engine.reset()
    return out


def chat(engine, chats):
    engine.reset()
    ids = []
    for t in TURNS:
        ids = ids + t
        engine.prefill(ids)
        assert not chats.save(engine, Root.none(), owner="c").error
    return ids


def test_restore_branch_and_truncate_match_a_fresh_computation(pair, tmp_path):
    name, a, b = pair
    chats = ChatImages(PrefixStore(tmp_path))
    ids = chat(a, chats)
    window = getattr(a.config, "sliding_window", 0) or 0
    assert not window or window < len(ids)       # the last positions attend past the window
    assert bool(window) == (name in WINDOWED), (name, window)
    # restore: a fresh engine reads the chain, then the next message
    want = fresh(b, *TURNS, [5, 6])
    b.reset()
    assert chats.restore(b, ids + [5, 6], Root.none()).n_tokens == len(ids)
    np.testing.assert_array_equal(b.feed([5, 6]), want, err_msg=f"{name}: restore")
    # branch from disk: an edit 4 tokens into turn 2
    cut = len(TURNS[0]) + 4
    edited = ids[:cut] + EDIT
    b.reset()
    got = chats.restore(b, edited, Root.none())
    kept = len(b.tokens)
    assert got.n_tokens == kept == (len(TURNS[0]) if getattr(b.kv, "recurrent", False) else cut)   # a hybrid: turn 1's end
    want = branched(b, cut)
    b.reset()
    chats.restore(b, edited, Root.none())
    np.testing.assert_array_equal(b.feed(edited[kept:]), want, err_msg=f"{name}: branch")
    # truncate in memory: the chat resident, then the same edit
    a.reset()
    chat(a, chats)
    a.truncate(cut)
    np.testing.assert_array_equal(a.feed(EDIT), want, err_msg=f"{name}: truncate")


@pytest.mark.parametrize("name", ["qwen35", "qwen35moe"])
def test_an_edit_on_a_hybrid_model_recomputes_at_most_its_turn(name, reference_dir, tmp_path_factory):
    """Ten turns resident: an edit inside turn 3 goes back to turn 2's end (a snapshot kept in
    memory), never to the start of the chat. (On the other architectures a truncate is a slice.)"""
    a = Engine.load(tiny_path(name, reference_dir, tmp_path_factory), n_ctx=64)
    try:
        _edit_turn_3(a)
    finally:
        a.close()


def _edit_turn_3(a):
    ids = []
    for t in range(10):
        ids = ids + [1000 + 10 * t + j for j in range(5)]
        a.prefill(ids)
    calls = []
    forward = a.backend.forward
    a.backend.forward = lambda x, pos, **kw: calls.append((pos, len(x))) or forward(x, pos, **kw)
    try:
        a.truncate(13)
    finally:
        del a.backend.forward
    assert calls == [(10, 3)]


def test_segments_hold_only_the_cache_never_weights(pair, tmp_path):
    """A segment's size is its K/V (attention layers), its state section (a hybrid's recurrent state
    or Gemma 4's other caches: sizes of the cache, not of any weight) and its logits: on a MoE
    model nothing of the experts."""
    name, a, _ = pair
    store = PrefixStore(tmp_path)
    chat(a, ChatImages(store))
    kv = a.kv
    for p in store.root.glob("*.hps"):
        h = SegmentHeader.unpack(p.read_bytes()[:HEADER_SIZE])
        n = h.n_tokens
        state = kv.segment_state_size(h.start, n) if hasattr(kv, "segment_state_size") else 0
        layers = getattr(kv, "image_layers", kv.n_layers)
        kv_bytes = 2 * layers * kv.n_kv_heads * n * kv.head_dim * np.dtype(kv.dtype).itemsize
        assert p.stat().st_size == HEADER_SIZE + 4 * n + kv_bytes + 4 * state + 4 * h.n_vocab + 4, name
