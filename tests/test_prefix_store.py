"""engine/prefix/store.py: images on disk keyed by prefix_key; ensure(); atomic writes; LRU cap;
sharing one cache between processes.

Runs the real default model on short prefixes (a few dozen tokens: ~1 MB images, computed in well
under a second), sharing one engine per module."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from hearth.engine.cpu.linear import vnni_tiles
from hearth.engine.errors import PrefixImageError
from hearth.engine.kv_cache import KVCache
from hearth.engine.prefix import PrefixStore
from hearth.engine.prefix import format as pf
from hearth.engine.prefix import io as pio

BATCH_X = "int8-vnni" if vnni_tiles() else "int8"   # the batch path describe() names

ROOT = Path(__file__).resolve().parent.parent


def chat_prefix(i: int) -> str:
    return (f"<|im_start|>system\nYou are assistant number {i}. Answer in one short sentence and "
            f"never use more than ten words.<|im_end|>\n")


@pytest.fixture(scope="module")
def eng():
    from hearth.engine import Engine
    e = Engine.load(n_ctx=1024)
    yield e
    e.close()


class Library:
    """Each prefix computed once per module: its image bytes and the engine state that wrote it.
    `install` puts an image into a store as if an earlier session had written it."""

    def __init__(self, eng, root: Path):
        self.eng, self.store, self.done = eng, PrefixStore(root), {}

    def get(self, i: int):
        if i not in self.done:
            self.eng.reset()
            r = self.store.ensure(self.eng, chat_prefix(i))
            self.done[i] = (r.path.read_bytes(), engine_state(self.eng), r.key)
        return self.done[i]

    def install(self, store: PrefixStore, i: int) -> Path:
        data, _, key = self.get(i)
        path = store.image_path(key)
        path.write_bytes(data)
        return path

    def make_resident(self, i: int) -> None:
        """Some other prefix resident, without computing it again."""
        self.get(i)
        self.eng.reset()
        assert self.store.ensure(self.eng, chat_prefix(i)).action == "restored"


@pytest.fixture(scope="module")
def lib(eng, tmp_path_factory):
    return Library(eng, tmp_path_factory.mktemp("library"))


def engine_state(e):
    n = len(e.tokens)
    return e.tokens, [tuple(np.array(t) for t in e.kv.read_prefix(layer, n)) for layer in range(e.kv.n_layers)]


def same_state(a, b) -> bool:
    return a[0] == b[0] and all(np.array_equal(x, y) for p, q in zip(a[1], b[1]) for x, y in zip(p, q))


def verify_image_file(path: Path) -> pf.ImageHeader:
    """Check an image's integrity on its own (its header's key and ids, its checksum)."""
    with open(path, "rb") as f:
        h, _ = pio.read_header(f)
        ids = np.frombuffer(f.read(4 * h.n_tokens), np.int32)
        f.seek(0)
        pio.read_image(f, h, ids, KVCache(h.n_layers, h.n_kv_heads, h.head_dim, h.n_tokens), 0)
    return h


# ----------------------------------------------------------------------------------- ensure

def test_ensure_computes_then_is_resident_then_restores_in_a_reset_engine(eng, lib, tmp_path):
    store = PrefixStore(tmp_path / "p")
    eng.reset()
    text = chat_prefix(1)
    r1 = store.ensure(eng, text, label="first")
    assert (r1.action, r1.saved, r1.reason) == ("computed", True, None)
    assert r1.path == store.image_path(eng.prefix_key(text)) and r1.path.is_file()
    assert eng.tokens == eng.tokenize(text)
    written = engine_state(eng)

    r2 = store.ensure(eng, text)
    assert r2.action == "resident" and r2.compute_seconds == 0

    lib.make_resident(2)  # something else resident: the restore replaces it
    r3 = store.ensure(eng, text)
    assert r3.action == "restored" and r3.restored and r3.n_tokens == len(eng.tokenize(text))
    assert same_state(engine_state(eng), written)

    (e,) = store.entries()
    # the CPU backend's description as the image records it: 8-bit x (one-token passes and batches) is its default
    assert (e.key, e.n_tokens, e.label, e.backend) == (r1.key, r1.n_tokens, "first", {"backend": "cpu", "decode_x": "int8", "batch_x": BATCH_X})
    assert e.size == r1.path.stat().st_size and Path(e.model_path) == Path(eng.gguf.path).resolve()
    assert json.loads(r1.path.with_suffix(".json").read_text())["model_size"] == eng.gguf.file_size


def test_a_prefix_resident_under_a_longer_chat_is_reused_not_restored(eng, lib, tmp_path):
    store = PrefixStore(tmp_path / "p")
    text = chat_prefix(2)
    lib.install(store, 2)
    eng.reset()
    assert store.ensure(eng, text).action == "restored"
    eng.feed(eng.tokenize("<|im_start|>user\nHi<|im_end|>\n", special=True))
    before = engine_state(eng)
    r = store.ensure(eng, text)
    assert r.action == "resident"
    assert same_state(engine_state(eng), before)  # the chat after the prefix is still there


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "other_image"])
def test_a_refused_image_is_recomputed_silently_and_replaced(eng, lib, tmp_path, damage):
    store = PrefixStore(tmp_path / "p")
    path = lib.install(store, 4)
    _, written, _ = lib.get(4)
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x08
    elif damage == "truncate":
        del raw[len(raw) * 2 // 3:]
    elif damage == "garbage":
        raw = bytearray(np.random.default_rng(0).bytes(5000))
    else:  # a valid image of another prefix under this key's name
        raw = bytearray(lib.get(2)[0])
    path.write_bytes(raw)

    lib.make_resident(2)
    r = store.ensure(eng, chat_prefix(4))
    expected = {"flip": "checksum", "truncate": "truncated", "garbage": "magic", "other_image": "key"}[damage]
    assert (r.action, r.reason, r.saved) == ("recomputed", expected, True), r
    assert same_state(engine_state(eng), written)
    verify_image_file(r.path)
    eng.reset()
    assert store.ensure(eng, chat_prefix(4)).action == "restored"


def test_an_image_of_another_engine_build_is_not_used(eng, lib, tmp_path, monkeypatch):
    from hearth.engine import build_info
    store = PrefixStore(tmp_path / "p")
    text = chat_prefix(2)
    first_path = lib.install(store, 2)
    saved = dict(build_info._cache)
    try:
        monkeypatch.setattr(build_info, "package_versions", lambda: {"numpy": "1.0-another-build"})
        build_info.clear_caches()
        eng.reset()
        r = store.ensure(eng, text)  # another build: another key, so another file; computed silently
        assert r.action == "computed" and r.path != first_path and r.saved
        eng_tokens = eng.tokens
        with open(first_path, "rb") as f, pytest.raises(PrefixImageError) as e:
            eng.restore_prefix(text, f)
        assert e.value.reason == "key" and eng.tokens == eng_tokens
    finally:
        monkeypatch.undo()
        build_info._cache.clear()
        build_info._cache.update(saved)


# ------------------------------------------------------------------------------- disk and cap

def test_lru_eviction_keeps_the_cap_and_the_most_recently_used(eng, lib, tmp_path):
    size = len(lib.get(2)[0])
    assert len(lib.get(4)[0]) == size
    store = PrefixStore(tmp_path / "p", cap_bytes=int(2.5 * size))
    now = time.time()
    for age, i in ((30, 2), (20, 4)):
        os.utime(lib.install(store, i), (now - age, now - age))
    assert [e.key for e in store.entries()] == [lib.get(4)[2], lib.get(2)[2]]  # most recent first
    eng.reset()
    assert store.ensure(eng, chat_prefix(2)).action == "restored"  # a use makes 2 the most recent
    assert store.entries()[0].key == lib.get(2)[2]
    eng.reset()
    new = store.ensure(eng, chat_prefix(9))  # a third image does not fit: 4, least recently used, goes
    assert new.saved and len(new.path.read_bytes()) == size
    assert [e.key for e in store.entries()] == [new.key, lib.get(2)[2]]
    assert store.total_bytes() <= store.cap_bytes
    assert store.clear() == 2 and store.entries() == [] and list(store.root.iterdir()) == []


def test_an_image_larger_than_the_cap_is_not_written(eng, lib, tmp_path):
    store = PrefixStore(tmp_path / "p", cap_bytes=1000)
    lib.make_resident(2)
    r = store.ensure(eng, chat_prefix(2))
    assert r.action == "resident" and not r.saved and "cap" in r.save_error
    assert list(store.root.iterdir()) == []


def test_images_of_models_no_longer_present_are_removed(eng, lib, tmp_path):
    store = PrefixStore(tmp_path / "p")
    keep, gone = lib.install(store, 2), lib.install(store, 4)
    for i in (2, 4):  # restored images get their metadata written
        eng.reset()
        assert store.ensure(eng, chat_prefix(i), label=f"preset {i}").action == "restored"
    assert {e.label for e in store.entries()} == {"preset 2", "preset 4"}
    meta_path = gone.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["model_path"] = str(tmp_path / "deleted.gguf")
    meta_path.write_text(json.dumps(meta))
    assert [e.path for e in store.missing_models()] == [gone] and gone.exists()
    removed = store.remove_missing_models()
    assert [e.path for e in removed] == [gone]
    assert [e.path for e in store.entries()] == [keep] and not gone.exists() and not meta_path.exists()


def test_a_failed_write_leaves_no_temporary_file_and_keeps_the_previous_image(lib, tmp_path):
    """Simulated with a writer that fails like a full disk half-way (the tmpfs test below does it
    for real where mounting is allowed)."""
    store = PrefixStore(tmp_path / "p")
    path = lib.install(store, 2)
    before = path.read_bytes()

    def half_then_enospc(f):
        f.write(before[:len(before) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        store._write_atomic(path, half_then_enospc)
    assert path.read_bytes() == before
    assert [p.name for p in store.root.iterdir()] == [path.name]


def test_a_full_disk_mid_write_keeps_the_good_image_and_the_engine(eng, lib, small_tmpfs, fill_disk):
    from hearth.engine import Sampling
    size = len(lib.get(2)[0])
    mnt = small_tmpfs(int(1.6 * size))  # room for one image, not two
    store = PrefixStore(mnt / "p")
    good = lib.install(store, 2)
    before = good.read_bytes()

    # Another prefix, resident: writing its image runs out of space half-way.
    lib.make_resident(4)
    r = store.ensure(eng, chat_prefix(4))
    assert r.action == "resident" and not r.saved and "No space" in r.save_error, r
    assert [p.name for p in store.root.iterdir()] == [good.name]  # no temporary file left
    assert good.read_bytes() == before
    reply = list(eng.generate(chat_prefix(4) + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                              max_tokens=2, sampling=Sampling.greedy()))
    assert reply[-1].final and reply[-1].stats.reused_tokens == len(eng.tokenize(chat_prefix(4)))

    # Rewriting the same key on a full disk: the old image survives whole.
    filler = fill_disk(mnt)
    lib.make_resident(2)
    with pytest.raises(OSError) as e:
        store.save(eng, chat_prefix(2))
    assert e.value.errno == errno.ENOSPC
    assert good.read_bytes() == before
    filler.unlink()
    eng.reset()
    assert store.ensure(eng, chat_prefix(2)).action == "restored"


# ------------------------------------------------------------------------------- two processes

WORKER = textwrap.dedent("""
    import sys, time, random
    sys.path.insert(0, {root!r})
    from hearth.engine import Engine
    from hearth.engine.prefix import PrefixStore
    store = PrefixStore({cache!r}, cap_bytes={cap})
    eng = Engine.load(n_ctx=256)
    texts = {texts!r}
    rnd = random.Random({seed})
    actions = []
    for step in range({steps}):
        t = rnd.choice(texts)
        if rnd.random() < 0.5:
            eng.reset()
        r = store.ensure(eng, t)
        assert eng.tokens == eng.tokenize(t), "wrong tokens resident"
        assert r.reason is None, f"an image was refused: {{r.reason}} {{r.message}}"
        actions.append(r.action)
    print(" ".join(actions))
""")


@pytest.mark.slow
def test_two_processes_share_one_cache_without_corrupting_it(eng, tmp_path):
    """Two real engines in two processes ensure the same few prefixes in one cache folder whose cap
    holds only two images, so they write, replace, evict and restore under each other's feet. No
    image may ever be refused (a refusal here would mean a torn or mixed file)."""
    cache = tmp_path / "shared"
    eng.reset()
    texts = [chat_prefix(30 + i) for i in range(3)]
    size = eng.prefix_header(eng.tokenize(texts[0])).image_size
    procs = []
    for seed in (1, 2):
        script = WORKER.format(root=str(ROOT), cache=str(cache), cap=int(2.2 * size), texts=texts,
                               seed=seed, steps=12)
        procs.append(subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    actions = " ".join(out for out, _ in outs).split()
    assert "restored" in actions and "computed" in actions
    store = PrefixStore(cache, cap_bytes=int(2.2 * size))
    assert 1 <= len(store.entries()) <= 2
    for e in store.entries():
        verify_image_file(e.path)
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []


# --- not regular files, temporary files -------------------------------------------------------------

def ensure_within(store, eng, text, seconds: float = 60.0):
    """store.ensure on a thread: its result, failing if it blocks (a FIFO opened for reading would)."""
    import threading
    out: list = []
    t = threading.Thread(target=lambda: out.append(store.ensure(eng, text)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "ensure blocked"
    return out[0]


def test_a_fifo_in_an_images_place_is_refused_without_blocking_and_replaced(eng, lib, tmp_path):
    store = PrefixStore(tmp_path / "p")
    _, state, key = lib.get(5)
    os.mkfifo(store.image_path(key))
    lib.make_resident(4)
    r = ensure_within(store, eng, chat_prefix(5))
    assert r.action == "recomputed" and r.reason == "io" and "FIFO" in r.message and r.saved
    assert store.image_path(key).is_file() and engine_state(eng)[0] == state[0]
    assert [e.key for e in store.entries()] == [key]


def test_a_directory_in_an_images_place_is_moved_aside_and_the_image_saved(eng, lib, tmp_path):
    store = PrefixStore(tmp_path / "p")
    _, _, key = lib.get(5)
    store.image_path(key).mkdir()
    (store.image_path(key) / "kept.txt").write_text("not ours to delete")
    lib.make_resident(4)
    r = ensure_within(store, eng, chat_prefix(5))
    assert r.saved and store.image_path(key).is_file(), r
    aside = [p for p in store.root.iterdir() if p.name.startswith(f".{key}.hpx.not-an-image-")]
    assert len(aside) == 1 and (aside[0] / "kept.txt").read_text() == "not ours to delete"
    assert [e.key for e in store.entries()] == [key]


def test_a_fifo_in_the_metadata_place_does_not_block_the_listing(lib, tmp_path):
    store = PrefixStore(tmp_path / "p")
    path = lib.install(store, 2)
    os.mkfifo(store.root / (path.name[:-len(".hpx")] + ".json"))
    import threading
    out: list = []
    t = threading.Thread(target=lambda: out.append(store.entries()), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive() and [e.path for e in out[0]] == [path]


def test_orphaned_temporary_files_go_at_start_and_live_ones_count_against_the_cap(lib, tmp_path):
    from hearth.engine.system.files import lock_while_writing
    root = tmp_path / "p"
    root.mkdir()
    orphan = root / ".abc.hpx.x1.tmp"
    orphan.write_bytes(b"\0" * 40_000)                  # left by a writer that died (a crash, a full disk)
    old = time.time() - 120
    os.utime(orphan, (old, old))
    store = PrefixStore(root, cap_bytes=10 << 20)
    assert not orphan.exists()
    image = lib.install(store, 2)
    live = root / ".def.hpx.x2.tmp"
    with open(live, "wb") as f:                          # another writer, still writing
        lock_while_writing(f.fileno())
        f.write(b"\0" * 50_000)
        f.flush()
        os.utime(live, (old, old))
        assert store.total_bytes() == image.stat().st_size + 50_000
        store.cap_bytes = image.stat().st_size + 10_000   # the writer's bytes push the image out
        assert [e.path for e in store.evict()] == [image] and live.exists()
