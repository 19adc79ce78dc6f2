"""Chat segments carry the whole state (#29): a hybrid model's segment holds its attention layers'
K/V and the recurrent state at its end, a SplitKV's (Gemma 4) its other caches' K/V; a chain read
by a fresh engine gives the next-token logits of a fresh computation bit for bit, and every refusal
(cut short, damaged state, other dtype, other layout) is a silent recompute to the same bits."""

from __future__ import annotations


import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.prefix import PrefixStore
from hearth.engine.prefix.chat_images import ChatImages, Root
from hearth.engine.prefix.format import FLAG_STATE, HEADER_SIZE, ImageHeader
from hearth.engine.prefix.segments import SegmentHeader
from tests.tiny_archs import STATEFUL, tiny_path

TURNS = [list(range(1000, 1012)), list(range(2000, 2009)), list(range(3000, 3007))]


@pytest.fixture(scope="module", params=STATEFUL)
def pair(request, reference_dir, tmp_path_factory):
    path = tiny_path(request.param, reference_dir, tmp_path_factory)
    a, b = Engine.load(path, n_ctx=64), Engine.load(path, n_ctx=64)
    yield a, b
    a.close()
    b.close()


def fresh(engine, *chunks):
    """Logits after the last chunk, computed from nothing in the same chunks (a hybrid model's
    delta rule over a chunk of 12 tokens and over 12 single ones rounds differently)."""
    engine.reset()
    for c in chunks:
        out = engine.feed(c).copy()
    engine.reset()
    return out


def chat(engine, chats, n_turns=3):
    """Grow a chat turn by turn from nothing, saving a segment after each; returns its ids."""
    engine.reset()
    ids = []
    for t in TURNS[:n_turns]:
        ids = ids + t
        engine.prefill(ids)
        assert not chats.save(engine, Root.none(), owner="c").error
    return ids


def segment_files(store):
    return sorted(store.root.glob("*.hps"), key=lambda p: SegmentHeader.unpack(p.read_bytes()[:HEADER_SIZE]).start)


def test_segments_hold_the_state_and_a_fresh_engine_restores_it(pair, tmp_path):
    a, b = pair
    store = PrefixStore(tmp_path)
    chats = ChatImages(store)
    ids = chat(a, chats)
    files = segment_files(store)
    assert len(files) == 3                        # one per turn: a state at every turn's end
    for p in files:
        h = SegmentHeader.unpack(p.read_bytes()[:HEADER_SIZE])
        assert h.flags & FLAG_STATE and h.n_state == a.kv.segment_state_size(h.start, h.n_tokens) > 0
        assert h.n_layers == a.kv.image_layers
    nxt = [7, 8]
    want = fresh(b, *TURNS, nxt)
    b.reset()
    got = chats.restore(b, ids + nxt, Root.none())
    assert got.restored == len(ids) and b.tokens == ids and not got.refused
    np.testing.assert_array_equal(b.feed(nxt), want)


def test_a_branch_restores_the_last_whole_turn_and_matches_a_fresh_computation(pair, tmp_path):
    """An edit inside turn 3: a hybrid model's chain ends at turn 2's end (its snapshot) and only
    the edited turn is computed; a SplitKV's chain branches inside the segment."""
    a, b = pair
    store = PrefixStore(tmp_path)
    chats = ChatImages(store)
    ids = chat(a, chats)
    edited = ids[:len(TURNS[0]) + len(TURNS[1]) + 3] + [11, 12]
    whole = len(TURNS[0]) + len(TURNS[1])
    keep = whole if getattr(b.kv, "recurrent", False) else whole + 3
    want = fresh(b, TURNS[0], TURNS[1], *([TURNS[2][:3]] if keep > whole else []), edited[keep:])
    b.reset()
    got = chats.restore(b, edited, Root.none())
    assert got.n_tokens == keep
    np.testing.assert_array_equal(b.feed(edited[len(b.tokens):]), want)


@pytest.mark.parametrize("damage", ["cut", "state", "dtype", "layout"])
def test_a_refused_segment_is_a_silent_recompute_to_the_same_bits(pair, tmp_path, damage):
    a, b = pair
    store = PrefixStore(tmp_path)
    chats = ChatImages(store)
    ids = chat(a, chats)
    last = segment_files(store)[-1]
    raw = bytearray(last.read_bytes())
    h = SegmentHeader.unpack(bytes(raw[:HEADER_SIZE]))
    state_at = len(raw) - 4 - (4 * h.n_vocab if h.has_logits else 0) - 4 * h.n_state
    if damage == "cut":                       # the file ends inside the state section
        last.write_bytes(bytes(raw[:state_at + 8]))
    elif damage == "state":                   # one bit of the snapshot: the checksum refuses it
        raw[state_at + 4 * (h.n_state // 2)] ^= 0x10
        last.write_bytes(bytes(raw))
    want = fresh(b, TURNS[0], TURNS[1], TURNS[2] + [5])
    reader = b
    if damage in ("dtype", "layout"):
        reader = Engine.load(b.gguf.path, n_ctx=64, kv_dtype="f16") if damage == "dtype" else b
        want = fresh(reader, ids + [5])
    layout = b.kv.state_layout
    if damage == "layout":                    # another snapshot layout: another key, never found
        b.kv.state_layout = lambda: layout() + ";another"
    try:
        reader.reset()
        got = chats.restore(reader, ids + [5], Root.none())
        if damage in ("cut", "state"):
            assert got.n_tokens == len(ids) - len(TURNS[2]) and got.refused == (damage == "state")
            assert not last.exists()          # removed: the next save writes it again
        if damage in ("dtype", "layout"):
            assert got.n_tokens == 0
        np.testing.assert_array_equal(reader.feed(ids[len(reader.tokens):] + [5]), want)
    finally:
        if reader is not b:
            reader.close()
        if damage == "layout":
            del b.kv.state_layout


def test_the_state_size_fields_cannot_wrap(pair, tmp_path, monkeypatch):
    """A u32 header field that cannot hold its value (a SplitKV's state section grows with the
    tokens) is refused before a byte is written: the save reports why, and no file is left."""
    a, _ = pair
    for h in (SegmentHeader(1, 1, 1, 0, 1, 1, bytes(32), bytes(32), flags=FLAG_STATE, n_state=1 << 32),
              ImageHeader(1, 1, 1, 1, 1, bytes(32), flags=FLAG_STATE, n_state=1 << 32)):
        with pytest.raises(ValueError, match="n_state"):
            h.pack()
    store = PrefixStore(tmp_path)
    chats = ChatImages(store)
    a.reset()
    a.prefill(TURNS[0])
    monkeypatch.setattr(type(a.kv), "segment_state_size", lambda self, start, n: 1 << 32)
    saved = chats.save(a, Root.none(), owner="c")
    assert "n_state" in saved.error and "too long" in saved.error
    assert not list(store.root.glob("*.hps"))


@pytest.mark.parametrize("other", ["model", "build", "backend"])
def test_segments_of_another_model_build_or_backend_are_never_read(other, reference_dir, tmp_path,
                                                                    tmp_path_factory, monkeypatch):
    """qwen35 and qwen35moe share the tokenizer and the recurrent state's layout: only the model's
    digest tells their segments apart. A changed engine build or backend describes other keys too."""
    from hearth.engine.prefix import key as key_mod
    writer = Engine.load(tiny_path("qwen35", reference_dir, tmp_path_factory), n_ctx=64)
    chats = ChatImages(PrefixStore(tmp_path))
    try:
        ids = chat(writer, chats)
        if other == "model":
            reader = Engine.load(tiny_path("qwen35moe", reference_dir, tmp_path_factory), n_ctx=64)
            assert reader.kv.state_layout() == writer.kv.state_layout()
        else:
            reader = writer
            if other == "build":
                monkeypatch.setattr(key_mod.build_info, "engine_build_hash", lambda: "another build")
            else:
                describe = reader.backend.describe
                monkeypatch.setattr(reader.backend, "describe", lambda: {**describe(), "threads": -1})
        try:
            want = fresh(reader, ids + [5])
            reader.reset()
            got = chats.restore(reader, ids + [5], Root.none())
            assert got.n_tokens == 0 and got.restored == 0
            np.testing.assert_array_equal(reader.feed(ids + [5]), want)
        finally:
            if reader is not writer:
                reader.close()
    finally:
        writer.close()
