"""The key of a prefix image: blake2b-256 of everything its K/V values depend on.

`model_digest` identifies the model's weights and tokenizer (cached per GGUFFile); `key_digest` adds
the format, dtype, engine build, machine, backend and the prefix's token ids. The key is stored in
the image's header (format.py) and names its file in the store.
"""

from __future__ import annotations

import json
import threading
import weakref
from hashlib import blake2b

import numpy as np

from .. import build_info
from .format import DTYPE_F32, DTYPE_NAMES, FORMAT_VERSION, I32

_SAMPLE_BYTES = 4096  # bytes hashed at each end of every tensor (at least one quant block each)
_model_cache: "weakref.WeakKeyDictionary[object, bytes]" = weakref.WeakKeyDictionary()
_model_cache_lock = threading.Lock()


def _field(h, label: str, data: bytes | memoryview) -> None:
    """Feed one labelled, length-prefixed field, so no two field lists hash the same byte stream."""
    lab = label.encode()
    h.update(len(lab).to_bytes(2, "little") + lab + len(data).to_bytes(8, "little"))
    h.update(data)


def _tokenizer_fields(gguf) -> list[tuple[str, bytes | memoryview]]:
    """The tokenizer as the GGUF holds it: every `tokenizer.*` value's bytes, in key order. String
    arrays (vocabulary, merges) are hashed as the exact bytes read (lengths and text)."""
    out = []
    for key in sorted(k for k in gguf.metadata if k.startswith("tokenizer.")):
        v = gguf.metadata[key]
        if isinstance(v, np.ndarray):
            out.append((key, f"{v.dtype.str}{v.shape}".encode() + v.tobytes()))
        elif hasattr(v, "offsets") and hasattr(v, "lengths"):  # gguf.StringArray
            out.append((key, np.asarray(v.lengths, "<i8").tobytes()))
            out.append((key + ".bytes", v.raw_span()))  # the raw span: decoding 49k strings is slow
        else:
            out.append((key, repr(v).encode()))
    return out


def model_digest(gguf) -> bytes:
    """blake2b-256 of what identifies the model's weights and tokenizer: the GGUF header bytes (all
    metadata and tensor infos), the file length, the first and last 4 KiB of every tensor (two
    fine-tunes with identical headers differ there), and the tokenizer arrays. Cached per GGUFFile:
    ~10 ms once, then free."""
    with _model_cache_lock:
        cached = _model_cache.get(gguf)
    if cached is not None:
        return cached
    h = blake2b(digest_size=32, person=b"hearth-model")
    _field(h, "file_size", str(gguf.file_size).encode())
    _field(h, "header", gguf.header_bytes)
    for name, t in gguf.tensors.items():
        data = t.data
        s = min(len(data), _SAMPLE_BYTES)
        _field(h, "tensor", name.encode())
        _field(h, "first", data[:s].tobytes())
        _field(h, "last", data[len(data) - s:].tobytes())
    for label, data in _tokenizer_fields(gguf):
        _field(h, label, data)
    digest = h.digest()
    with _model_cache_lock:
        _model_cache[gguf] = digest
    return digest


def _backend_identity(describe: dict) -> dict:
    """backend.describe() without its sizes (`*_bytes`: the GPU's KV and weight buffers grow with
    n_ctx): sizes say nothing about how K/V values are computed, and an image made with n_ctx 4096
    is valid in an engine loaded with 2048 if the prefix fits."""
    return {k: v for k, v in describe.items() if not str(k).endswith("_bytes")}


def _identity(h, backend: dict, model: bytes, dtype: int) -> None:
    """The fields every key starts with: what the K/V values depend on besides the tokens."""
    _field(h, "format", str(FORMAT_VERSION).encode())
    _field(h, "dtype", DTYPE_NAMES[dtype].encode())
    _field(h, "build", build_info.engine_build_hash().encode())
    _field(h, "machine", build_info.machine_fingerprint().encode())
    _field(h, "backend", json.dumps(_backend_identity(backend), sort_keys=True, default=str).encode())
    _field(h, "model", model)


def key_digest(*, backend: dict, model: bytes, ids, dtype: int = DTYPE_F32, state: str = "") -> bytes:
    """The 32-byte key of an image: the format version, dtype, engine build, machine, backend (and GPU
    adapter: vendor, device, driver, and any weight fallbacks it reports), model digest and the
    prefix's token ids; for a hybrid model also `state`, its snapshot's layout (layer pattern, shapes,
    dtype: HybridState.state_layout), so an image without a snapshot or with another one never
    shares a key with one that has it."""
    h = blake2b(digest_size=32, person=b"hearth-prefix")
    _identity(h, backend, model, dtype)
    if state:
        _field(h, "state", state.encode())
    _field(h, "ids", np.asarray(ids, I32).tobytes())
    return h.digest()


def segment_digest(*, backend: dict, model: bytes, parent: bytes, start: int, ids,
                   dtype: int = DTYPE_F32, state: str = "") -> bytes:
    """The 32-byte key of a chat segment: the fields of `key_digest`, its parent's key (a prefix
    image's or another segment's; 32 zero bytes for a chain that starts at position 0), the
    position it starts at and its own token ids. The parent's key covers every token before
    `start`, so the key covers the whole sequence up to the segment's end. `state` as for
    `key_digest`: a segment with a snapshot never shares a key with one without."""
    h = blake2b(digest_size=32, person=b"hearth-segment")
    _identity(h, backend, model, dtype)
    if state:
        _field(h, "state", state.encode())
    _field(h, "parent", bytes(parent))
    _field(h, "start", str(int(start)).encode())
    _field(h, "ids", np.asarray(ids, I32).tobytes())
    return h.digest()
