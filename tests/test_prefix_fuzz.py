"""Fuzzing the prefix-image reader (engine/prefix/io.py) with hypothesis.

Small model-free images in real KVCaches. Whatever is done to an image's bytes, the reader either
restores exactly what was written (bytes unchanged) or refuses with PrefixImageError -- never another
exception, never a changed resident K/V after a refusal."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hearth.engine.errors import PrefixImageError
from hearth.engine.kv_cache import KVCache
from hearth.engine.prefix import format as pf
from hearth.engine.prefix import io as pio

MAX_CTX = 16


@st.composite
def images(draw):
    L, H, D = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 4))
    n, V = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    logits = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    kv = KVCache(L, H, D, MAX_CTX)
    for layer in range(L):
        kv.write_prefix(layer, n, rng.standard_normal((H, n, D), np.float32),
                        rng.standard_normal((H, n, D), np.float32))
    ids = rng.integers(0, 50000, n).astype(np.int32)
    lg = rng.standard_normal(V).astype(np.float32)
    header = pf.ImageHeader(L, H, D, n, V, rng.bytes(32), pf.FLAG_LOGITS if logits else 0)
    f = io.BytesIO()
    pio.write_image(f, header, ids, kv, lg if logits else None)
    return f.getvalue(), header, ids, kv, lg


def mutations(size: int):
    off = st.integers(0, max(0, size - 1))
    return st.lists(st.one_of(
        st.tuples(st.just("flip"), off, st.integers(0, 7)),
        st.tuples(st.just("cut"), st.integers(0, size)),
        st.tuples(st.just("overwrite"), off, st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("insert"), off, st.binary(min_size=1, max_size=8)),
        st.tuples(st.just("delete"), off, st.integers(1, 8)),
        # A header field changed with the header CRC fixed up: reaches the checks behind the CRC.
        st.tuples(st.just("field"), st.integers(1, 12), st.integers(0, 2**32 - 1)),
    ), min_size=1, max_size=3)


def apply(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for op in ops:
        kind = op[0]
        if kind == "flip" and op[1] < len(b):
            b[op[1]] ^= 1 << op[2]
        elif kind == "cut":
            del b[op[1]:]
        elif kind == "overwrite":
            b[op[1]:op[1] + len(op[2])] = op[2]
        elif kind == "insert":
            b[op[1]:op[1]] = op[2]
        elif kind == "delete":
            del b[op[1]:op[1] + op[2]]
        elif kind == "field" and len(b) >= pf.HEADER_SIZE:
            fields = list(struct.unpack_from("<8s10IQ32s", b))
            i = op[1]
            fields[i] = (op[2] if i < 11 else op[2] * 7919) if i != 12 else struct.pack("<I", op[2]) * 8
            body = struct.pack("<8s10IQ32s36x", *fields)
            b[:pf.HEADER_SIZE] = body + struct.pack("<I", zlib.crc32(body))
    return bytes(b)


def snapshot(kv: KVCache, n: int):
    return [tuple(np.array(t) for t in kv.read_prefix(layer, n)) for layer in range(kv.n_layers)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), img=images(), resident=st.integers(0, MAX_CTX), stream=st.booleans())
def test_reader_restores_exactly_or_refuses_cleanly(data, img, resident, stream):
    raw, header, ids, src, lg = img
    bad = apply(raw, data.draw(mutations(len(raw))))
    rng = np.random.default_rng(resident)
    dst = KVCache(header.n_layers, header.n_kv_heads, header.head_dim, MAX_CTX)
    for layer in range(header.n_layers):
        shape = (header.n_kv_heads, MAX_CTX, header.head_dim)
        dst.write_prefix(layer, MAX_CTX, rng.standard_normal(shape, np.float32),
                         rng.standard_normal(shape, np.float32))
    before = snapshot(dst, resident)
    f = _Stream(bad) if stream else io.BytesIO(bad)
    try:
        got = pio.read_image(f, header, ids, dst, resident)
    except PrefixImageError as e:
        assert bad != raw, f"an intact image was refused: {e.reason}: {e}"
        assert e.reason in {"empty", "magic", "version", "header", "dtype", "shape", "key", "tokens",
                            "truncated", "trailing", "checksum"}
        assert all(np.array_equal(a, b) for pa, pb in zip(snapshot(dst, resident), before)
                   for a, b in zip(pa, pb)), "a refused image changed resident K/V"
        return
    assert bad == raw, "a damaged image was accepted"
    n = header.n_tokens
    assert all(np.array_equal(a, b) for pa, pb in zip(snapshot(dst, n), snapshot(src, n)) for a, b in zip(pa, pb))
    assert (got is None) == (not header.has_logits)
    if got is not None:
        assert np.array_equal(got, lg)


@settings(max_examples=200, deadline=None)
@given(blob=st.binary(max_size=600), prefix_magic=st.booleans())
def test_arbitrary_bytes_are_refused(blob, prefix_magic):
    data = (pf.MAGIC + blob) if prefix_magic else blob
    want = pf.ImageHeader(2, 1, 2, 3, 4, b"k" * 32)
    kv = KVCache(2, 1, 2, 8)
    try:
        pio.read_image(io.BytesIO(data), want, np.arange(3, dtype=np.int32), kv, 0)
    except PrefixImageError:
        return
    raise AssertionError("random bytes were accepted as an image")


class _Stream:
    """Forward-only, short reads: the reader cannot learn the size in advance."""

    def __init__(self, data: bytes):
        self._data, self._pos = data, 0

    def read(self, n: int = -1) -> bytes:
        n = min(n if n >= 0 else len(self._data), 13)
        out = self._data[self._pos:self._pos + n]
        self._pos += len(out)
        return out

    def seekable(self) -> bool:
        return False
