"""Prefix images carry a model's whole state (#29): a hybrid model's image holds its attention
layers' K/V and the recurrent state after its last token, restored to exactly the state of a fresh
computation; every refusal rule holds for the snapshot (cut short, damaged, other layout), and a
refused image leaves the resident state as it was. MoE images hold only K/V."""

from __future__ import annotations

import io

import numpy as np
import pytest

from hearth.engine import Engine
from hearth.engine.errors import PrefixImageError
from hearth.engine.prefix.format import FLAG_STATE, HEADER_SIZE, ImageHeader
from hearth.engine.prefix.key import key_digest
from hearth.engine.prefix.store import PrefixStore

IDS = list(range(1000, 1040))
N = 24   # the prefix


def _load(reference_dir, name):
    e = Engine.load(reference_dir / "tiny-next" / name / f"tiny-{name}.gguf", n_ctx=64)
    e._prefault.join()
    return e


@pytest.fixture(scope="module")
def hybrid(reference_dir):
    e = _load(reference_dir, "qwen35")
    yield e
    e.close()


def fresh(engine, n_prefix, nxt):
    """Logits after the prefix (one chunk) and after the next tokens, computed from nothing."""
    engine.reset()
    a = engine.feed(IDS[:n_prefix]).copy()
    b = engine.feed(nxt).copy()
    engine.reset()
    return a, b


def image_of(engine, n=N) -> bytes:
    engine.reset()
    buf = io.BytesIO()
    engine.save_prefix(IDS[:n], buf)
    engine.reset()
    return buf.getvalue()


def test_hybrid_image_holds_the_state_and_restores_it_bit_identically(hybrid):
    want_prefix, want_next = fresh(hybrid, N, IDS[N:N + 3])
    raw = image_of(hybrid)
    h = ImageHeader.unpack(raw[:HEADER_SIZE])
    assert h.has_state and h.n_state == hybrid.kv.state_size(N) > 0
    assert h.n_layers == hybrid.kv.image_layers < hybrid.kv.n_layers   # K/V of the attention layers only
    hybrid.feed(IDS[5:9])                          # something else resident, then the image
    hybrid.restore_prefix(IDS[:N], io.BytesIO(raw))
    assert hybrid.tokens == IDS[:N]
    np.testing.assert_array_equal(hybrid.last_logits, want_prefix)
    np.testing.assert_array_equal(hybrid.feed(IDS[N:N + 3]), want_next)


def test_hybrid_branch_inside_a_restored_prefix_matches_a_fresh_computation(hybrid):
    """An edit inside the restored prefix: the engine goes back to zeros (no snapshot before the
    image's end), recomputes the 10 kept tokens in one chunk, then the edit: the same chunks as a
    fresh computation of the kept text and then the edit, so the same bits."""
    raw = image_of(hybrid)
    want = fresh(hybrid, 10, [7])[1]
    hybrid.restore_prefix(IDS[:N], io.BytesIO(raw))
    hybrid.truncate(10)
    np.testing.assert_array_equal(hybrid.feed([7]), want)


def _flip(raw: bytes, at: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= 0x40
    return bytes(b)


@pytest.mark.parametrize("damage", ["state_byte", "cut_in_state", "no_state_flag"])
def test_a_refused_snapshot_leaves_the_resident_state(hybrid, damage):
    raw = image_of(hybrid)
    h = ImageHeader.unpack(raw[:HEADER_SIZE])
    state_at = len(raw) - 4 - 4 * h.n_vocab - 4 * h.n_state
    if damage == "state_byte":
        bad, reason = _flip(raw, state_at + 4 * h.n_state // 2), "checksum"
    elif damage == "cut_in_state":
        bad, reason = raw[:state_at + 8], "truncated"
    else:   # an image of this prefix without a snapshot: refused on its header, never K/V-only restored
        nostate = ImageHeader(h.n_layers, h.n_kv_heads, h.head_dim, h.n_tokens, h.n_vocab, h.key,
                              dtype=h.dtype)
        bad, reason = nostate.pack() + raw[HEADER_SIZE:state_at] + raw[-4 - 4 * h.n_vocab:], "shape"
    hybrid.reset()
    hybrid.feed(IDS[:8])
    want = fresh(hybrid, 8, [IDS[8]])[1]
    hybrid.feed(IDS[:8])
    with pytest.raises(PrefixImageError) as e:
        hybrid.restore_prefix(IDS[:N], io.BytesIO(bad))
    assert e.value.reason == reason
    assert hybrid.tokens == IDS[:8]
    np.testing.assert_array_equal(hybrid.feed([IDS[8]]), want)


def test_the_snapshot_layout_is_part_of_the_key(hybrid):
    describe, model = hybrid.backend.describe(), b"m" * 32
    plain = key_digest(backend=describe, model=model, ids=IDS[:4])
    with_state = key_digest(backend=describe, model=model, ids=IDS[:4], state=hybrid.kv.state_layout())
    other = key_digest(backend=describe, model=model, ids=IDS[:4], state=hybrid.kv.state_layout() + "x")
    assert len({plain, with_state, other}) == 3
    assert hybrid.prefix_key(IDS[:4]) != plain.hex()


def test_store_restores_a_hybrid_prefix_silently_recomputes_a_damaged_one(hybrid, tmp_path):
    want_prefix, want_next = fresh(hybrid, N, [IDS[N]])
    store = PrefixStore(tmp_path / "p")
    assert store.ensure(hybrid, IDS[:N]).action == "computed"
    hybrid.reset()
    r = store.ensure(hybrid, IDS[:N])
    assert r.action == "restored"
    np.testing.assert_array_equal(hybrid.feed([IDS[N]]), want_next)
    path = store.image_path(r.key)
    raw = path.read_bytes()
    path.write_bytes(_flip(raw, len(raw) - 4 - 4 * hybrid.config.n_vocab - 8))   # inside the state
    hybrid.reset()
    r = store.ensure(hybrid, IDS[:N])
    assert (r.action, r.reason) == ("recomputed", "checksum")   # refused: never a wrong state
    np.testing.assert_array_equal(hybrid.last_logits, want_prefix)


@pytest.mark.parametrize("name", ["qwen3moe", "gpt-oss"])
def test_moe_images_hold_only_kv_and_restore_bit_identically(reference_dir, name):
    e = _load(reference_dir, name)
    try:
        want_prefix, want_next = fresh(e, N, IDS[N:N + 2])
        raw = image_of(e)
        h = ImageHeader.unpack(raw[:HEADER_SIZE])
        assert not h.flags & FLAG_STATE and h.n_state == 0
        kv = e.backend.kv
        assert len(raw) == (HEADER_SIZE + 4 * N + 2 * kv.n_layers * kv.n_kv_heads * N * kv.head_dim
                            * np.dtype(kv.dtype).itemsize + 4 * e.config.n_vocab + 4)
        e.restore_prefix(IDS[:N], io.BytesIO(raw))
        np.testing.assert_array_equal(e.last_logits, want_prefix)
        np.testing.assert_array_equal(e.feed(IDS[N:N + 2]), want_next)
    finally:
        e.close()


def test_gemma4_split_kv_round_trips_past_the_window(reference_dir):
    """Gemma 4's K/V has one cache per head size: the first cache's layers are the image's K/V
    tensors, the others its state section. 24 positions, window 8; a damaged other-cache section
    is refused and leaves the resident K/V."""
    e = _load(reference_dir, "gemma4")
    try:
        assert len(e.kv.caches) > 1 and e.segments_cacheable   # segments: test_warm_segments.py
        want_prefix, want_next = fresh(e, N, IDS[N:N + 2])
        raw = image_of(e)
        h = ImageHeader.unpack(raw[:HEADER_SIZE])
        assert h.has_state and h.n_state == e.kv.state_size(N) > 0
        e.feed(IDS[:8])
        bad = _flip(raw, len(raw) - 4 - 4 * h.n_vocab - 4 * h.n_state + 4)
        with pytest.raises(PrefixImageError, match="checksum"):
            e.restore_prefix(IDS[:N], io.BytesIO(bad))
        assert e.tokens == IDS[:8]
        e.restore_prefix(IDS[:N], io.BytesIO(raw))
        np.testing.assert_array_equal(e.last_logits, want_prefix)
        np.testing.assert_array_equal(e.feed(IDS[N:N + 2]), want_next)
    finally:
        e.close()
