"""engine/prefix/ (format, key, io) and the Engine's prefix methods: the image format, its key, the
writer and the reader.

The first part needs no model: small real KVCaches filled with random values. The second part
(bottom of the file) runs the real default model."""

from __future__ import annotations

import io
from pathlib import Path
import struct
import tracemalloc
import zlib

import numpy as np
import pytest

from hearth.engine.errors import PrefixImageError
from hearth.engine.kv_cache import KVCache
from hearth.engine.prefix import format as pf
from hearth.engine.prefix import io as pio
from hearth.engine.prefix import key as pk

L, H, D, V = 3, 2, 4, 11  # layers, kv heads, head dim, vocab: tiny on purpose


def filled_cache(n: int, max_ctx: int = 64, seed: int = 0, layers: int = L) -> KVCache:
    kv = KVCache(layers, H, D, max_ctx)
    rng = np.random.default_rng(seed)
    for layer in range(layers):
        kv.write_prefix(layer, n, rng.standard_normal((H, n, D), np.float32),
                        rng.standard_normal((H, n, D), np.float32))
    return kv


def snapshot(kv: KVCache, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [tuple(np.array(t) for t in kv.read_prefix(layer, n)) for layer in range(kv.n_layers)]


def same_kv(a, b) -> bool:
    return all(np.array_equal(x, y) and np.array_equal(x2, y2) for (x, x2), (y, y2) in zip(a, b))


def make_image(n: int = 5, seed: int = 0, key: bytes = b"k" * 32, logits: bool = True):
    """(image bytes, ids, header, writer's kv, logits)"""
    kv = filled_cache(n, seed=seed)
    ids = np.arange(100, 100 + n, dtype=np.int32)
    lg = np.random.default_rng(seed + 1).standard_normal(V).astype(np.float32)
    header = pf.ImageHeader(L, H, D, n, V, key, pf.FLAG_LOGITS if logits else 0)
    buf = io.BytesIO()
    size = pio.write_image(buf, header, ids, kv, lg if logits else None)
    data = buf.getvalue()
    assert size == len(data) == header.image_size
    return data, ids, header, kv, lg


def section_offsets(h: pf.ImageHeader) -> dict[str, int]:
    out = {"header": 0, "ids": pf.HEADER_SIZE}
    off = pf.HEADER_SIZE + 4 * h.n_tokens
    for layer in range(h.n_layers):
        out[f"k{layer}"] = off
        out[f"v{layer}"] = off + h.tensor_bytes
        off += 2 * h.tensor_bytes
    out["logits"] = off
    out["checksum"] = h.image_size - pf.CHECKSUM_SIZE
    out["end"] = h.image_size
    return out


class Stream:
    """A forward-only binary stream (no seek, no fileno, short reads): like a pipe or socket."""

    def __init__(self, data: bytes, chunk: int = 7):
        self._data, self._pos, self._chunk = data, 0, chunk

    def read(self, n: int = -1) -> bytes:
        n = min(n if n >= 0 else len(self._data), self._chunk)
        out = self._data[self._pos:self._pos + n]
        self._pos += len(out)
        return out

    def seekable(self) -> bool:
        return False


def refuse(data: bytes, want: pf.ImageHeader, ids, kv, resident: int, stream: bool = False) -> str:
    f = Stream(data) if stream else io.BytesIO(data)
    with pytest.raises(PrefixImageError) as e:
        pio.read_image(f, want, ids, kv, resident)
    return e.value.reason


# ---------------------------------------------------------------------------------------- header

def test_header_is_128_bytes_and_round_trips():
    h = pf.ImageHeader(30, 3, 64, 2000, 49152, bytes(range(32)))
    raw = h.pack()
    assert len(raw) == 128 and raw.startswith(pf.MAGIC)
    assert pf.ImageHeader.unpack(raw) == h
    assert h.image_size == 128 + 4 * 2000 + 2 * 30 * 3 * 2000 * 64 * 4 + 4 * 49152 + 4


def test_every_single_bit_flip_in_the_header_is_refused():
    raw = pf.ImageHeader(L, H, D, 5, V, b"x" * 32).pack()
    reasons = set()
    for bit in range(len(raw) * 8):
        bad = bytearray(raw)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(PrefixImageError) as e:
            pf.ImageHeader.unpack(bytes(bad))
        reasons.add(e.value.reason)
    assert reasons <= {"magic", "version", "header"}


def test_empty_garbage_and_foreign_files_are_refused_with_their_reason():
    want = pf.ImageHeader(L, H, D, 5, V, b"k" * 32)
    kv, ids = KVCache(L, H, D, 16), np.arange(5, dtype=np.int32)
    assert refuse(b"", want, ids, kv, 0) == "empty"
    assert refuse(b"GGUF" + bytes(300), want, ids, kv, 0) == "magic"
    assert refuse(np.random.default_rng(1).bytes(5000), want, ids, kv, 0) == "magic"
    assert refuse(pf.MAGIC[:5], want, ids, kv, 0) == "truncated"
    assert refuse(pf.MAGIC + bytes(200), want, ids, kv, 0) == "version"


def test_another_version_dtype_or_flags_is_refused():
    data, ids, want, _, _ = make_image()

    def with_fields(**fields) -> bytes:
        vals = list(struct.unpack_from("<8s10IQ32s", data))
        names = ["magic", "version", "hsize", "dtype", "flags", "L", "H", "D", "n", "V", "res", "size", "key"]
        for k, v in fields.items():
            vals[names.index(k)] = v
        body = struct.pack("<8s10IQ32s36x", *vals)
        return body + struct.pack("<I", zlib.crc32(body)) + data[128:]

    kv = KVCache(L, H, D, 16)
    assert refuse(with_fields(version=2), want, ids, kv, 0) == "version"
    assert refuse(with_fields(dtype=2), want, ids, kv, 0) == "dtype"
    assert refuse(with_fields(flags=3), want, ids, kv, 0) == "header"
    assert refuse(with_fields(size=len(data) + 1), want, ids, kv, 0) == "header"
    assert refuse(with_fields(hsize=256), want, ids, kv, 0) == "header"


# ----------------------------------------------------------------------------------- round trip

def test_round_trip_into_a_fresh_cache_is_bit_identical():
    data, ids, want, src, lg = make_image(n=9)
    dst = KVCache(L, H, D, 32)
    got = pio.read_image(io.BytesIO(data), want, ids, dst, resident=0)
    assert np.array_equal(got, lg)
    assert same_kv(snapshot(dst, 9), snapshot(src, 9))


def test_image_bytes_are_the_cache_layout():
    """Tokens, then per layer K then V as [n_kv_heads, n, head_dim] float32, then logits, then CRC."""
    data, ids, h, kv, lg = make_image(n=4)
    off = section_offsets(h)
    assert np.array_equal(np.frombuffer(data, "<i4", 4, off["ids"]), ids)
    for layer in range(L):
        k, v = kv.read_prefix(layer, 4)
        assert np.array_equal(np.frombuffer(data, "<f4", H * 4 * D, off[f"k{layer}"]).reshape(H, 4, D), k)
        assert np.array_equal(np.frombuffer(data, "<f4", H * 4 * D, off[f"v{layer}"]).reshape(H, 4, D), v)
    assert np.array_equal(np.frombuffer(data, "<f4", V, off["logits"]), lg)
    assert struct.unpack("<I", data[-4:])[0] == zlib.crc32(data[:-4])


def test_image_without_logits_round_trips_and_returns_none():
    data, ids, want, src, _ = make_image(n=3, logits=False)
    dst = KVCache(L, H, D, 8)
    assert pio.read_image(io.BytesIO(data), want, ids, dst, 0) is None
    assert same_kv(snapshot(dst, 3), snapshot(src, 3))


def test_writer_makes_one_write_per_tensor():
    class Recorder(io.BytesIO):
        sizes: list[int] = []

        def write(self, b):
            self.sizes.append(memoryview(b).nbytes)
            return super().write(b)

    n = 6
    _, ids, h, kv, lg = make_image(n=n)
    f = Recorder()
    pio.write_image(f, h, ids, kv, lg)
    assert f.sizes == [128, 4 * n] + [h.tensor_bytes] * (2 * L) + [4 * V, 4]


def test_reader_works_on_a_forward_only_stream_with_short_reads():
    data, ids, want, src, lg = make_image(n=7)
    dst = KVCache(L, H, D, 16)
    assert np.array_equal(pio.read_image(Stream(data, chunk=5), want, ids, dst, 0), lg)
    assert same_kv(snapshot(dst, 7), snapshot(src, 7))


def test_reader_writes_each_layer_once_and_allocates_nothing_proportional_to_n_ctx():
    class CountingCache(KVCache):
        writes = 0

        def write_prefix(self, layer, n, k, v):
            CountingCache.writes += 1
            super().write_prefix(layer, n, k, v)

    n, big_ctx = 8, 200_000  # the cache is 2 * 3 * 2 * 200k * 4 * 4 bytes = 38 MB; the image ~1 KB
    data, ids, want, src, _ = make_image(n=n)
    dst = CountingCache(L, H, D, big_ctx)
    tracemalloc.start()
    try:
        pio.read_image(io.BytesIO(data), want, ids, dst, resident=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert CountingCache.writes == L
    assert peak < 64 * 1024, f"restoring a {len(data)}-byte image peaked at {peak} bytes"
    assert same_kv(snapshot(dst, n), snapshot(src, n))


def test_running_crc_equals_zlib_over_the_whole_stream():
    rng = np.random.default_rng(3)
    parts = [rng.bytes(n) for n in (128, 20, 300_000, 7, 1_000_000, 44, 300_000, 4)]
    crc = pio.RunningCrc()
    for p in parts:  # small parts inline, large ones on the worker thread, all in order
        crc.update(np.frombuffer(p, np.uint8))
    assert crc.value == zlib.crc32(b"".join(parts))


# -------------------------------------------------------------------------------------- refusals

def test_key_and_shape_mismatches_are_refused_before_the_cache_is_touched():
    data, ids, want, _, _ = make_image(n=5)
    kv = filled_cache(20, seed=9)
    before = snapshot(kv, 20)
    other = dict(n_layers=L, n_kv_heads=H, head_dim=D, n_tokens=5, n_vocab=V, key=want.key)
    for change, reason in (({"key": b"q" * 32}, "key"), ({"n_tokens": 6, "key": b"q" * 32}, "key"),
                           ({"n_tokens": 6}, "shape"), ({"n_layers": L + 1}, "shape"),
                           ({"n_kv_heads": 1}, "shape"), ({"head_dim": 8}, "shape"), ({"n_vocab": V + 1}, "shape")):
        w = pf.ImageHeader(**{**other, **change})
        assert refuse(data, w, ids, kv, resident=20) == reason
    assert refuse(data, want, ids + 1, kv, resident=20) == "tokens"
    assert same_kv(snapshot(kv, 20), before)


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_cut_short_at_every_section_boundary_and_inside_every_section(stream):
    data, ids, want, _, _ = make_image(n=5)
    cuts = set()
    for off in section_offsets(want).values():
        cuts |= {off - 1, off, off + 1, off + 3}
    cuts = sorted(c for c in cuts if 0 <= c < len(data))
    for resident in (0, 3, 9):
        kv = filled_cache(12, seed=4)
        before = snapshot(kv, resident)
        for cut in cuts:
            reason = refuse(data[:cut], want, ids, kv, resident, stream=stream)
            assert reason == ("empty" if cut == 0 else "truncated"), cut
            assert same_kv(snapshot(kv, resident), before), f"cut at {cut} changed resident K/V"


def test_trailing_bytes_are_refused():
    data, ids, want, _, _ = make_image(n=5)
    kv = KVCache(L, H, D, 16)
    assert refuse(data + b"\0", want, ids, kv, 0) == "trailing"
    assert refuse(data + b"\0", want, ids, kv, 0, stream=True) == "trailing"


@pytest.mark.parametrize("resident", [0, 2, 4, 12])
def test_every_single_bit_flip_is_refused_and_resident_kv_is_put_back(resident):
    """Exhaustive on a small image: every bit of every section."""
    data, ids, want, _, _ = make_image(n=4)
    kv = filled_cache(16, seed=5)
    before = snapshot(kv, 16)
    for bit in range(len(data) * 8):
        bad = bytearray(data)
        bad[bit // 8] ^= 1 << (bit % 8)
        refuse(bytes(bad), want, ids, kv, resident)
    # Positions [0, resident) are exactly as before; later ones were never promised.
    assert same_kv(snapshot(kv, resident), [(k[:, :resident], v[:, :resident]) for k, v in before])


def test_a_refusal_after_a_partial_commit_restores_the_resident_positions():
    """A flipped bit in the last tensor is only found by the checksum, after every layer was
    written: the resident positions must come back, the others may hold anything."""
    data, ids, want, src, _ = make_image(n=6)
    off = section_offsets(want)
    bad = bytearray(data)
    bad[off[f"v{L - 1}"] + 5] ^= 0x10
    kv = filled_cache(10, seed=7)
    before = snapshot(kv, 4)
    assert refuse(bytes(bad), want, ids, kv, resident=4) == "checksum"
    assert same_kv(snapshot(kv, 4), before)
    # and the same image, undamaged, then restores over it
    pio.read_image(io.BytesIO(data), want, ids, kv, resident=4)
    assert same_kv(snapshot(kv, 6), snapshot(src, 6))


def test_io_errors_while_reading_are_refusals():
    data, ids, want, _, _ = make_image(n=5)

    class Failing(io.BytesIO):
        def readinto(self, b):
            if self.tell() > 200:
                raise OSError(5, "Input/output error")
            return super().readinto(b)

    kv = filled_cache(8)
    before = snapshot(kv, 8)
    with pytest.raises(PrefixImageError) as e:
        pio.read_image(Failing(data), want, ids, kv, resident=8)
    assert e.value.reason == "io"
    assert same_kv(snapshot(kv, 8), before)


# ------------------------------------------------------------------------------------------ key

def test_key_changes_with_every_input(monkeypatch):
    from hearth.engine import build_info
    base = dict(backend={"backend": "cpu"}, model=b"m" * 32, ids=[1, 2, 3])
    k0 = pk.key_digest(**base)
    assert len(k0) == 32 and pk.key_digest(**base) == k0
    assert pk.key_digest(**{**base, "backend": {"backend": "gpu", "device": "x"}}) != k0
    gpu = {"backend": "gpu", "vendor": "v", "device": "d", "driver": "1.0", "kv_bytes": 1 << 20}
    k_gpu = pk.key_digest(**{**base, "backend": gpu})
    assert pk.key_digest(**{**base, "backend": {**gpu, "driver": "1.1"}}) != k_gpu
    sizes = {"kv_bytes": 1 << 21, "weights_bytes": 5}  # they follow n_ctx: not in the key
    assert pk.key_digest(**{**base, "backend": {**gpu, **sizes}}) == k_gpu
    assert pk.key_digest(**{**base, "model": b"n" * 32}) != k0
    assert pk.key_digest(**{**base, "ids": [1, 2, 4]}) != k0
    assert pk.key_digest(**{**base, "ids": [1, 2]}) != k0
    saved = dict(build_info._cache)
    try:
        monkeypatch.setattr(build_info, "package_versions", lambda: {"numpy": "0.0-other"})
        build_info.clear_caches()
        assert pk.key_digest(**base) != k0
        monkeypatch.undo()
        build_info._cache.clear()
        build_info._cache.update(saved)
        monkeypatch.setattr(build_info, "machine_inputs", lambda: {"machine": "riscv64"})
        build_info._cache.pop("machine")
        assert pk.key_digest(**base) != k0
    finally:
        monkeypatch.undo()
        build_info._cache.clear()
        build_info._cache.update(saved)
    assert pk.key_digest(**base) == k0


def test_build_hash_covers_every_engine_source_file(tmp_path):
    from hearth.engine import build_info
    import shutil
    src = tmp_path / "engine"
    shutil.copytree(build_info.ENGINE_DIR, src, ignore=shutil.ignore_patterns("__pycache__"))
    h0 = build_info.hash_sources(src)
    names = [p.relative_to(src).as_posix() for p in build_info.source_files(src)]
    assert "prefix/key.py" in names and "kv_cache.py" in names
    assert all(n.endswith((".py", ".wgsl")) for n in names)
    victim = src / "kv_cache.py"
    victim.write_bytes(victim.read_bytes() + b"\n")
    assert build_info.hash_sources(src) != h0
    (src / "wgsl").mkdir(exist_ok=True)
    (src / "wgsl" / "new_kernel.wgsl").write_text("// a new kernel")
    h1 = build_info.hash_sources(src)
    (src / "wgsl" / "new_kernel.wgsl").write_text("// a new kernel!")
    assert build_info.hash_sources(src) != h1
    (src / "notes.txt").write_text("not code")
    assert build_info.hash_sources(src) == build_info.hash_sources(src)


# ==================================================================================================
# The real default model: the tools prompt of a real preset, written once, restored into fresh engines.

def _fn(name, description, props, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


def _s(description, **kw):
    return {"type": "string", "description": description, **kw}


# A larger tool set of the kind users build (the shipped preset's three tools render to ~450 tokens).
EXTRA_TOOLS = [
    _fn("search_web", "Search the web and return the titles, addresses and snippets of the best results.",
        {"query": _s("What to search for, in plain words"),
         "max_results": {"type": "integer", "minimum": 1, "maximum": 10, "description": "How many results"}},
        ["query"]),
    _fn("get_weather", "Current weather and a three-day forecast for a place.",
        {"location": _s("City and country, for example Lyon, France"),
         "units": _s("Unit system", enum=["metric", "imperial"])}, ["location"]),
    _fn("send_email", "Draft an email for the user to review; it is never sent without their confirmation.",
        {"to": {"type": "array", "items": {"type": "string"}, "description": "Recipient addresses"},
         "subject": _s("Subject line"), "body": _s("Plain-text body")}, ["to", "subject", "body"]),
    _fn("create_calendar_event", "Add an event to the user's calendar.",
        {"title": _s("Short title"), "start": _s("Start, ISO 8601 date-time"), "end": _s("End, ISO 8601 date-time"),
         "location": _s("Where it takes place"), "attendees": {"type": "array", "items": {"type": "string"}}},
        ["title", "start"]),
    _fn("list_calendar_events", "List the events between two dates.",
        {"from_date": _s("First day, ISO 8601 date"), "to_date": _s("Last day, ISO 8601 date")},
        ["from_date", "to_date"]),
    _fn("create_note", "Save a note in the user's notebook.",
        {"title": _s("Title of the note"), "text": _s("Content, Markdown allowed"),
         "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags to file it under"}},
        ["title", "text"]),
    _fn("search_notes", "Find notes whose title or text matches a query.",
        {"query": _s("Words to look for"), "tag": _s("Only notes with this tag")}, ["query"]),
    _fn("set_reminder", "Remind the user of something at a given time.",
        {"text": _s("What to remind them of"), "at": _s("When, ISO 8601 date-time")}, ["text", "at"]),
    _fn("translate_text", "Translate text between two languages.",
        {"text": _s("The text"), "source_language": _s("ISO 639-1 code, or auto"),
         "target_language": _s("ISO 639-1 code")}, ["text", "target_language"]),
]


def tools_prefix(eng) -> str:
    """The 'Assistant with tools' preset of resources/presets.json with the shipped tool sets and the
    extra tools above, rendered with the model's chat template up to the first user message (what
    the app makes resident for a preset)."""
    import json
    from hearth.engine.tools import fallback_system_prompt
    root = Path(__file__).resolve().parent.parent / "hearth" / "resources"
    preset = next(p for p in json.loads((root / "presets.json").read_text())["presets"] if p["tools"])
    tools = list(preset["tools"])
    for f in sorted((root / "toolsets").glob("*.json")):
        tools += json.loads(f.read_text())["tools"]
    seen, unique = set(), []
    for t in tools + EXTRA_TOOLS:
        if t["function"]["name"] not in seen:
            seen.add(t["function"]["name"])
            unique.append(t)
    system = preset["system_prompt"] + "\n\n" + fallback_system_prompt(unique)
    return eng.render_chat([{"role": "system", "content": system}], add_generation_prompt=False)


def user_turn(eng, prefix: str, question: str) -> str:
    full = eng.render_chat([{"role": "system", "content": "x"}, {"role": "user", "content": question}])
    sys_only = eng.render_chat([{"role": "system", "content": "x"}], add_generation_prompt=False)
    assert full.startswith(sys_only)
    return prefix + full[len(sys_only):]


def engine_state(e):
    n = len(e.tokens)
    return e.tokens, [tuple(np.array(t) for t in e.kv.read_prefix(layer, n)) for layer in range(e.kv.n_layers)]


def same_state(a, b) -> bool:
    return a[0] == b[0] and all(np.array_equal(x, y) for p, q in zip(a[1], b[1]) for x, y in zip(p, q))


def run(eng, prompt, sampling, max_tokens=12):
    """(text, token ids, stop reason, final stats, engine state after the reply)"""
    events = list(eng.generate(prompt, max_tokens=max_tokens, sampling=sampling))
    tokens = [e.token_id for e in events if e.token_id is not None]
    return ("".join(e.text for e in events), tokens, events[-1].stop_reason, events[-1].stats,
            engine_state(eng))


N_CTX = 2048


@pytest.fixture(scope="module")
def written():
    """The writer: a fresh engine computes the tools prefix and writes its image, then replies to
    each case's prompt starting from the prefix exactly as computed (truncate keeps its K/V).
    A second image holds the prefix plus a user turn, ending where the assistant's reply starts."""
    from hearth.engine import Engine, Sampling
    eng = Engine.load(n_ctx=N_CTX)
    prefix = tools_prefix(eng)
    n = eng.prefill(prefix)
    assert n >= 1000, f"the tools prompt has only {n} tokens"
    f = io.BytesIO()
    assert eng.save_prefix(prefix, f) == len(f.getvalue())
    state = engine_state(eng)
    turn = user_turn(eng, prefix, "What is 17.5 percent of 2,400 euros?")
    cases = {  # name: (the image's prefix, prompt, sampling)
        "right_after": (prefix, prefix, Sampling.greedy()),
        "greedy": (prefix, turn, Sampling.greedy()),
        "seeded": (prefix, user_turn(eng, prefix, "Write a haiku about the sea."),
                   Sampling(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=1234)),
        "right_after_turn": (turn, turn, Sampling.greedy()),
    }
    images, replies = {prefix: f.getvalue()}, {}
    for name, (image_prefix, prompt, sampling) in cases.items():  # "right_after" first: it needs the prefill's logits
        eng.truncate(n)
        if image_prefix not in images:
            eng.prefill(image_prefix)
            g = io.BytesIO()
            eng.save_prefix(image_prefix, g)
            images[image_prefix] = g.getvalue()
        replies[name] = run(eng, prompt, sampling)
    yield {"prefix": prefix, "n": n, "image": images[prefix], "images": images, "state": state, "cases": cases,
           "replies": replies, "key": eng.prefix_key(prefix), "eng": eng}
    eng.close()


@pytest.fixture(scope="module")
def reader():
    from hearth.engine import Engine
    eng = Engine.load(n_ctx=N_CTX)
    yield eng
    eng.close()


@pytest.mark.parametrize("case", ["right_after", "greedy", "seeded", "right_after_turn"])
def test_a_restored_prefix_replies_exactly_like_the_engine_that_computed_it(written, reader, case):
    image_prefix, prompt, sampling = written["cases"][case]
    n_image = len(reader.tokenize(image_prefix))
    reader.reset()
    assert reader.restore_prefix(image_prefix, io.BytesIO(written["images"][image_prefix])) == n_image
    if image_prefix == written["prefix"]:
        assert same_state(engine_state(reader), written["state"])
    text, tokens, stop, stats, state = run(reader, prompt, sampling)
    w_text, w_tokens, w_stop, w_stats, w_state = written["replies"][case]
    assert (text, tokens, stop) == (w_text, w_tokens, w_stop) and stats.generated_tokens
    if case != "right_after":  # right after the system turn the model ends at once
        assert text
    n_prompt = len(reader.tokenize(prompt))
    # Only what follows the image's prefix is computed: nothing at all when generating right after it.
    assert (stats.reused_tokens, stats.computed_tokens) == (n_image, n_prompt - n_image)
    assert (w_stats.reused_tokens, w_stats.computed_tokens) == (stats.reused_tokens, stats.computed_tokens)
    assert same_state(state, w_state), "K/V after the reply differ from the writer's"


def test_the_image_is_what_the_cache_held(written):
    h = pf.ImageHeader.unpack(written["image"][:128])
    assert h.key.hex() == written["key"] and h.n_tokens == written["n"] and h.has_logits
    ids, layers = written["state"]
    assert np.array_equal(np.frombuffer(written["image"], "<i4", h.n_tokens, 128), ids)
    off = 128 + 4 * h.n_tokens
    shape = (h.n_kv_heads, h.n_tokens, h.head_dim)
    for k, v in layers[::7]:
        assert np.array_equal(np.frombuffer(written["image"], "<f4", k.size, off).reshape(shape), k)
        off += 14 * h.tensor_bytes


def test_prefix_key_is_cheap_stable_and_names_the_prefix(written, reader):
    prefix = written["prefix"]
    assert reader.prefix_key(prefix) == written["key"]  # another engine, same model, build, backend
    assert reader.prefix_key(prefix + " ") != written["key"]
    assert len(written["key"]) == 64 and int(written["key"], 16) >= 0
    assert reader.gguf in pk._model_cache  # the model-level part is hashed once per engine


# ----------------------------------------------------------------------------- refusals (real model)

@pytest.fixture
def busy_reader(written, reader):
    """The reader with the prefix restored and a reply after it: something worth preserving."""
    reader.reset()
    reader.restore_prefix(written["prefix"], io.BytesIO(written["image"]))
    _, prompt, sampling = written["cases"]["greedy"]
    run(reader, prompt, sampling, max_tokens=3)
    return reader


def state_digest(eng):
    """The resident tokens and a CRC of every head's K and V over them (a copy of ~70 MB per check
    would make these tests slow; any change to the K/V changes a CRC)."""
    n, crcs = len(eng.tokens), []
    for layer in range(eng.kv.n_layers):
        for t in eng.kv.read_prefix(layer, n):
            crcs += [zlib.crc32(np.ascontiguousarray(t[h])) for h in range(t.shape[0])]
    return eng.tokens, crcs


def refused(eng, text, data, stream=False) -> str:
    before = state_digest(eng)
    f = Stream(data, chunk=1 << 20) if stream else io.BytesIO(data)
    with pytest.raises(PrefixImageError) as e:
        eng.restore_prefix(text, f)
    assert state_digest(eng) == before, f"refusal '{e.value.reason}' changed the engine"
    return e.value.reason


def test_damaged_images_are_refused_and_the_engine_keeps_its_state(written, busy_reader):
    eng, data, prefix = busy_reader, written["image"], written["prefix"]
    h = pf.ImageHeader.unpack(data[:128])
    rng = np.random.default_rng(2024)
    assert refused(eng, prefix, b"") == "empty"
    assert refused(eng, prefix, rng.bytes(100_000)) == "magic"
    assert refused(eng, prefix, data[: len(data) // 2].replace(pf.MAGIC, b"GGUF\0\0\0\0", 1)) == "magic"
    boundaries = sorted(set(section_offsets(h).values()) - {h.image_size})
    cuts = boundaries + [int(c) for c in rng.integers(1, len(data), 6)]
    for cut in cuts:
        assert refused(eng, prefix, data[:cut]) in ("empty", "truncated") if cut == 0 else "truncated"
    for cut in [section_offsets(h)["k5"] + 77, section_offsets(h)["logits"] + 3, len(data) - 1]:
        assert refused(eng, prefix, data[:cut], stream=True) == "truncated"  # found mid-restore
    sections = section_offsets(h)
    flips = [3, 60, 130, sections["k0"] + 1, sections["v13"] + 999, sections["logits"] + 17, len(data) - 2]
    flips += [int(o) for o in rng.integers(0, len(data), 5)]
    for off in flips:
        bad = bytearray(data)
        bad[off] ^= 1 << int(rng.integers(0, 8))
        assert refused(eng, prefix, bytes(bad)) in {"magic", "version", "header", "tokens", "checksum"}
    # still fully usable: the same reply as the writer's, from the same state
    eng.reset()
    eng.restore_prefix(prefix, io.BytesIO(data))
    _, prompt, sampling = written["cases"]["greedy"]
    assert run(eng, prompt, sampling)[:2] == written["replies"]["greedy"][:2]


def test_another_prefix_or_engine_build_is_refused(written, busy_reader, monkeypatch):
    from hearth.engine import build_info
    eng, data, prefix = busy_reader, written["image"], written["prefix"]
    assert refused(eng, prefix.replace("helpful", "careful", 1), data) == "key"
    assert refused(eng, prefix + "\n", data) == "key"
    saved = dict(build_info._cache)
    try:
        real = build_info.package_versions()
        monkeypatch.setattr(build_info, "package_versions", lambda: {**real, "numpy": "0.0-other"})
        build_info.clear_caches()
        assert eng.prefix_key(prefix) != written["key"]
        assert refused(eng, prefix, data) == "key"
    finally:
        monkeypatch.undo()
        build_info._cache.clear()
        build_info._cache.update(saved)
    assert eng.prefix_key(prefix) == written["key"]


def test_the_context_size_is_not_in_the_key_but_must_hold_the_prefix(written):
    from hearth.engine import ContextFullError, Engine
    big = Engine.load(n_ctx=2 * N_CTX)
    try:
        assert big.restore_prefix(written["prefix"], io.BytesIO(written["image"])) == written["n"]
        assert same_state(engine_state(big), written["state"])
    finally:
        big.close()
    small = Engine.load(n_ctx=256)
    try:
        with pytest.raises(ContextFullError):
            small.restore_prefix(written["prefix"], io.BytesIO(written["image"]))
        assert small.tokens == []
    finally:
        small.close()


@pytest.mark.parametrize("change", ["metadata", "weights"])
def test_an_image_is_refused_by_another_model(written, tmp_path, change):
    """A copy of the GGUF with one metadata byte changed, or one byte in the first block of a weight
    tensor (same header: only the weight sample tells them apart)."""
    from hearth.engine import Engine
    from hearth.engine.gguf import GGUFFile
    src = Path(written["eng"].gguf.path)
    g = GGUFFile.open(src)
    raw = bytearray(src.read_bytes())
    if change == "metadata":
        name = str(g.metadata["general.name"]).encode()
        at = bytes(raw[:g.data_offset]).index(name)
        raw[at] ^= 0x01  # one letter of the model's name
    else:
        t = g.tensors["blk.0.attn_q.weight"]
        raw[g.data_offset + t.offset + 5] ^= 0x01  # inside its first quant block
    g.close()
    copy = tmp_path / "model.gguf"
    copy.write_bytes(raw)
    other = Engine.load(copy, n_ctx=N_CTX)
    try:
        assert other.prefix_key(written["prefix"]) != written["key"]
        assert refused(other, written["prefix"], written["image"]) == "key"
    finally:
        other.close()
