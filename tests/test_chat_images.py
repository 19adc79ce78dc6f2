"""engine/prefix/segments.py and chat_images.py: a chat's context as a chain of segments hanging
from its preset's prefix image; keys, incremental saves, branching, refusals, damage, owners, cap.

The real default model on short chats (tens of tokens), one writer engine and one fresh reader
engine per module."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hearth.engine.prefix import PrefixStore
from hearth.engine.prefix.chat_images import ChatImages, Root
from hearth.engine.prefix.key import model_digest, segment_digest
from hearth.engine.prefix.segments import NO_PARENT, SegmentHeader

PRESET = "<|im_start|>system\nYou are a helpful assistant. Answer briefly.<|im_end|>\n"


def turn(user: str, reply: str) -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{reply}<|im_end|>\n"


@pytest.fixture(scope="module")
def engines():
    from hearth.engine import Engine
    a, b = Engine.load(n_ctx=1024), Engine.load(n_ctx=1024)
    yield a, b
    a.close()
    b.close()


def ids_of(eng, *turns: str) -> list[int]:
    """The preset prefix's ids followed by the turns' (one tokenization of the whole text)."""
    return eng.tokenize(PRESET + "".join(turns))


def grow(eng, store, chats, ids, owner="1", title="chat"):
    """Make `ids` resident after the preset prefix (ensured) and save the chat."""
    store.ensure(eng, PRESET)
    root = Root.of_prefix(eng, eng.prefix_ids(PRESET))
    eng.prefill(ids)
    return root, chats.save(eng, root, owner=owner, title=title)


def kv_state(eng, n):
    return [(eng.kv.k[i][:, :n].copy(), eng.kv.v[i][:, :n].copy()) for i in range(eng.kv.n_layers)]


def same_kv(eng, state, n) -> bool:
    return all(np.array_equal(eng.kv.k[i][:, :n], k) and np.array_equal(eng.kv.v[i][:, :n], v)
               for i, (k, v) in enumerate(state))


def fresh_reader(b, store):
    b.reset()
    store.ensure(b, PRESET)


@pytest.fixture
def setup(engines, tmp_path):
    a, b = engines
    a.reset()
    store = PrefixStore(tmp_path)
    return a, b, store, ChatImages(store)


def test_segment_key_covers_parent_start_tokens_and_engine(engines):
    a, _ = engines
    kw = dict(backend=a.backend.describe(), model=model_digest(a.gguf))
    base = segment_digest(parent=NO_PARENT, start=0, ids=[1, 2, 3], **kw)
    assert base == segment_digest(parent=NO_PARENT, start=0, ids=[1, 2, 3], **kw)
    assert base != segment_digest(parent=b"\x01" * 32, start=0, ids=[1, 2, 3], **kw)
    assert base != segment_digest(parent=NO_PARENT, start=1, ids=[1, 2, 3], **kw)
    assert base != segment_digest(parent=NO_PARENT, start=0, ids=[1, 2, 4], **kw)
    assert base != segment_digest(parent=NO_PARENT, start=0, ids=[1, 2, 3], backend={"backend": "gpu"},
                                  model=kw["model"])
    assert base != segment_digest(parent=NO_PARENT, start=0, ids=[1, 2, 3], backend=kw["backend"],
                                  model=b"\0" * 32)


def test_segment_header_round_trip_and_damage():
    h = SegmentHeader(30, 3, 64, 17, 40, 49152, b"k" * 32, b"p" * 32)
    raw = h.pack()
    assert len(raw) == 128 and SegmentHeader.unpack(raw) == h
    bad = bytearray(raw)
    bad[40] ^= 1
    from hearth.engine.errors import PrefixImageError
    with pytest.raises(PrefixImageError) as ei:
        SegmentHeader.unpack(bytes(bad))
    assert ei.value.reason == "header"


def test_restore_in_a_fresh_engine_is_bit_identical_and_generates_the_same(setup):
    a, b, store, chats = setup
    ids = ids_of(a, turn("What is the capital of France?", "Paris."), "<|im_start|>user\nAnd of Italy?<|im_end|>\n"
                 "<|im_start|>assistant\n")
    root, saved = grow(a, store, chats, ids)
    assert saved.error is None and saved.bytes_written > 0
    state, logits = kv_state(a, len(ids)), a._last_logits.copy()
    fresh_reader(b, store)
    got = chats.restore(b, ids, root)
    assert (got.n_tokens, got.restored, got.refused) == (len(ids), len(ids) - root.n, 0)
    assert b.tokens == ids and same_kv(b, state, len(ids)) and np.array_equal(b._last_logits, logits)
    from hearth.engine import Sampling
    reply = lambda e: "".join(ev.text for ev in e.generate(ids, max_tokens=8, sampling=Sampling(temperature=0)))  # noqa: E731
    after_restore = reply(b)
    b.reset()
    assert after_restore == reply(b)  # the same reply as a full recompute


def test_one_more_exchange_writes_only_its_positions(setup):
    a, b, store, chats = setup
    first = ids_of(a, turn("Hi", "Hello! How can I help?"))
    root, s1 = grow(a, store, chats, first)
    again = chats.save(a, root, owner="1")
    assert again.bytes_written == 0  # nothing new resident
    second = ids_of(a, turn("Hi", "Hello! How can I help?"), turn("Tell me a joke", "Why not."))
    assert second[:len(first)] == first
    _, s2 = grow(a, store, chats, second)
    per_token = 2 * a.kv.n_layers * a.kv.n_kv_heads * a.kv.head_dim * 4
    new = len(second) - len(first)
    assert s2.bytes_written == 128 + 4 * new + new * per_token + 4 * a.config.n_vocab + 4
    fresh_reader(b, store)
    assert chats.restore(b, second, root).n_tokens == len(second)
    assert b.tokens == second


def test_edit_branches_at_the_common_prefix(setup):
    a, b, store, chats = setup
    t1, t2 = turn("Name a colour", "Blue."), turn("Name a fruit", "An apple, which is red or green.")
    old = ids_of(a, t1, t2)
    root, _ = grow(a, store, chats, ids_of(a, t1))
    grow(a, store, chats, old)
    edited = ids_of(a, t1, turn("Name a vegetable", "A carrot."))
    common = next(i for i, (x, y) in enumerate(zip(old, edited)) if x != y)
    state = kv_state(a, common)
    fresh_reader(b, store)
    got = chats.restore(b, edited, root)
    assert got.n_tokens == common and b.tokens == edited[:common] and same_kv(b, state, common)
    # the branch is saved as its own segment after the first turn's; the old branch stays
    a.reset()
    _, s = grow(a, store, chats, edited)
    assert s.bytes_written > 0
    fresh_reader(b, store)
    assert chats.restore(b, edited, root).n_tokens == len(edited)
    fresh_reader(b, store)
    assert chats.restore(b, old, root).n_tokens == len(old)


def test_damaged_middle_segment_restores_up_to_it(setup):
    a, b, store, chats = setup
    turns = [turn(f"Question {i}?", f"Answer {i}.") for i in range(3)]
    root = None
    ends, keys = [], []
    for i in range(1, 4):
        ids = ids_of(a, *turns[:i])
        root, s = grow(a, store, chats, ids)
        ends.append(len(ids))
        keys.append(s.key)
    middle = chats.segment_path(keys[1])
    raw = bytearray(middle.read_bytes())
    raw[len(raw) // 2] ^= 0x10  # inside a K/V tensor: found only by the checksum at the end
    middle.write_bytes(bytes(raw))
    fresh_reader(b, store)
    got = chats.restore(b, ids, root)
    assert got.n_tokens == ends[0] and got.refused == 1 and b.tokens == ids[:ends[0]]
    assert not middle.exists()  # removed: the next save writes it again
    from hearth.engine import Sampling
    list(b.generate(ids, max_tokens=1, sampling=Sampling(temperature=0)))  # computes the rest
    assert b.tokens[:len(ids)] == ids


@pytest.mark.parametrize("damage", ["truncate", "header", "tokens"])
def test_refused_segments_are_recomputed_silently(setup, damage):
    a, b, store, chats = setup
    ids = ids_of(a, turn("Count to three", "One, two, three."))
    root, s = grow(a, store, chats, ids)
    p = chats.segment_path(s.key)
    raw = bytearray(p.read_bytes())
    if damage == "truncate":
        raw = raw[:-100]
    elif damage == "header":
        raw[36] ^= 1
    else:
        raw[128] ^= 1  # the first token id
    p.write_bytes(bytes(raw))
    os.utime(store.root, None)
    chats2 = ChatImages(store)  # as after a restart
    fresh_reader(b, store)
    got = chats2.restore(b, ids, root)
    assert got.n_tokens == root.n and b.tokens == ids[:root.n]


def test_another_backend_or_model_never_finds_the_segments(setup, monkeypatch):
    a, b, store, chats = setup
    ids = ids_of(a, turn("Say yes", "Yes."))
    root, _ = grow(a, store, chats, ids)
    fresh_reader(b, store)
    monkeypatch.setattr(b.backend, "describe", lambda: {"backend": "gpu", "device": "other"})
    assert chats.saved_prefix(b, ids, root) == root.n
    assert chats.restore(b, ids, root).n_tokens == root.n


def test_delete_a_chat_keeps_shared_segments_and_the_preset(setup):
    a, _, store, chats = setup
    t1 = turn("Shared opening", "Indeed.")
    root, s_shared = grow(a, store, chats, ids_of(a, t1), owner="1")
    grow(a, store, chats, ids_of(a, t1, turn("Only chat one", "Yes.")), owner="1")
    a.reset()
    _, s_two = grow(a, store, chats, ids_of(a, t1, turn("Only chat two", "No.")), owner="2")
    mine = {r["owner"]: r for r in chats.chats()}
    assert set(mine) == {"1", "2"}
    assert chats.remove_owner("1") == 1  # its own second segment; the opening is chat 2's too
    assert chats.segment_path(s_shared.key).exists() and chats.segment_path(s_two.key).exists()
    assert store.image_path(root.key.hex()).exists()
    assert chats.remove_owner("2") == 2
    assert [e.kind for e in store.entries()] == ["preset"]


def test_one_lru_cap_for_segments_and_preset_images(setup):
    a, _, store, chats = setup
    root, s1 = grow(a, store, chats, ids_of(a, turn("First chat", "One.")), owner="1")
    sizes = {e.key: e.size for e in store.entries()}
    old = chats.segment_path(s1.key)
    os.utime(old, (1, 1))  # the least recently used
    store.cap_bytes = sum(sizes.values()) + 10
    a.reset()
    _, s2 = grow(a, store, chats, ids_of(a, turn("Second chat", "Two.")), owner="2")
    assert not old.exists() and chats.segment_path(s2.key).exists()
    assert store.total_bytes() <= store.cap_bytes


def test_a_partial_file_of_a_killed_writer_is_ignored(setup):
    a, b, store, chats = setup
    ids = ids_of(a, turn("Write", "Done."))
    root = Root.of_prefix(a, a.prefix_ids(PRESET))
    store.ensure(a, PRESET)
    a.prefill(ids)
    half = store.root / f".{'0' * 64}.hps.abc.tmp"
    half.write_bytes(b"\x89HPS\r\n\x1a\n" + b"\0" * 500)
    fresh_reader(b, store)
    assert chats.restore(b, ids, root).n_tokens == root.n
    assert chats.save(a, root).bytes_written > 0
    assert all(not e.path.name.startswith(".") for e in store.entries())


def test_kill_9_during_a_save_leaves_only_a_temporary_file_the_next_start_ignores(setup, tmp_path):
    import signal
    import subprocess
    import sys
    import textwrap
    a, b, store, chats = setup
    ids = ids_of(a, turn("Write slowly", "I will."))
    child = textwrap.dedent(f"""
        import sys, time
        from hearth.engine import Engine
        from hearth.engine.prefix import PrefixStore
        from hearth.engine.prefix import chat_images
        from hearth.engine.prefix.chat_images import ChatImages, Root
        real = chat_images.write_segment
        def slow(f, h, ids, kv, logits):
            f.write(h.pack())
            f.flush()
            print("WRITING", flush=True)
            time.sleep(60)
        chat_images.write_segment = slow
        e = Engine.load(n_ctx=1024)
        store = PrefixStore({str(store.root)!r})
        store.ensure(e, {PRESET!r})
        e.prefill({ids!r})
        ChatImages(store).save(e, Root.of_prefix(e, e.prefix_ids({PRESET!r})), owner="9")
    """)
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert p.stdout.readline().strip() == "WRITING"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    leftovers = [q for q in store.root.iterdir() if q.name.endswith(".tmp")]
    assert leftovers and not list(store.root.glob("*.hps"))
    restarted = ChatImages(PrefixStore(store.root))
    root = Root.of_prefix(a, a.prefix_ids(PRESET))
    fresh_reader(b, store)
    assert restarted.restore(b, ids, root).n_tokens == root.n  # nothing half written is believed
    b.prefill(ids)
    assert restarted.save(b, root, owner="9").bytes_written > 0
    fresh_reader(b, store)
    assert ChatImages(store).restore(b, ids, root).n_tokens == len(ids)


class DeviceLikeCache:
    """The host cache seen only through the Backend interface (no numpy `k`/`v`), as the GPU cache is:
    the restore takes its device path (each part's positions read into its scratch, then write_at)."""

    def __init__(self, kv):
        self._kv = kv

    def __getattr__(self, name):
        if name in ("k", "v"):
            raise AttributeError(name)
        return getattr(self._kv, name)

    def __setattr__(self, name, value):
        if name == "_kv":
            object.__setattr__(self, name, value)
        else:
            setattr(self._kv, name, value)


def test_a_cache_without_host_arrays_restores_through_write_at(setup, monkeypatch):
    a, b, store, chats = setup
    t1, t2 = turn("One", "Uno."), turn("Two", "Dos.")
    root, _ = grow(a, store, chats, ids_of(a, t1))
    ids = ids_of(a, t1, t2)
    grow(a, store, chats, ids)
    state = kv_state(a, len(ids))
    fresh_reader(b, store)
    real = b.backend.kv
    monkeypatch.setattr(b.backend, "kv", DeviceLikeCache(real))
    got = chats.restore(b, ids, root)
    monkeypatch.setattr(b.backend, "kv", real)
    assert got.n_tokens == len(ids) and b.tokens == ids and same_kv(b, state, len(ids))


def test_a_fifo_named_like_a_segment_never_hangs_the_restore(setup):
    """A FIFO `*.hps` (unrelated to the chat) in the folder: the lookup opens every segment's
    header, and a plain open() of a FIFO waits for a writer for ever, under the engine lock."""
    import threading
    a, b, store, chats = setup
    ids = ids_of(a, turn("Name a colour.", "Blue."))
    root, saved = grow(a, store, chats, ids)
    assert saved.error is None
    fifo = store.root / f"{'f' * 64}.hps"
    os.mkfifo(fifo)
    fresh_reader(b, store)
    got = []
    t = threading.Thread(target=lambda: got.append(chats.restore(b, ids, root)), daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():                       # free the stuck open() so the test run goes on
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail("the restore hung on the FIFO")
    assert got[0].n_tokens == len(ids) and b.tokens == ids
    assert fifo.exists()                   # not ours to remove: it names no segment


def test_fifos_named_like_owner_files_or_sidecars_never_hang_a_save_or_the_listing(setup):
    """The owners folder and the sidecars are JSON files read with a plain open() too."""
    import threading
    a, b, store, chats = setup
    ids = ids_of(a, turn("Name a fruit.", "Apple."))
    (store.root / "chats").mkdir(parents=True, exist_ok=True)
    fifos = [store.root / "chats" / "7.json", store.root / "chats" / "other.json"]
    for f in fifos:
        os.mkfifo(f)
    done = []

    def work():
        root, saved = grow(a, store, chats, ids, owner="7")
        done.append(saved)
        done.append(chats.chats())
    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():
        for f in fifos:
            os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK)) if f.exists() else None
        t.join(5)
        pytest.fail("a save or the listing hung on a FIFO")
    assert done[0].error is None or "7.json" in str(done[0].error)
