"""Write a GGUF byte by byte from another one: its metadata values copied raw (renamed, replaced or
added where asked), tensors copied, replaced or added. Tiny test models derived from the shared
ones are made this way in ~1 s (the vendored gguf-py reader takes ~15 s on a 151k-token vocabulary),
and the same inputs give the same bytes (their llama.cpp reference carries the sha256)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

U32, I32, F32_T, BOOL, ARRAY = 4, 5, 6, 7, 9   # metadata value types
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32


def kv(key: str, vtype: int, raw_value: bytes) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + raw_value


def u32(v: int) -> tuple[int, bytes]:
    return U32, struct.pack("<I", v)


def i32_array(vals) -> tuple[int, bytes]:
    return ARRAY, struct.pack("<IQ", I32, len(vals)) + b"".join(struct.pack("<i", int(v)) for v in vals)


def bool_array(vals) -> tuple[int, bytes]:
    return ARRAY, struct.pack("<IQ", BOOL, len(vals)) + bytes(int(bool(v)) for v in vals)


def string(s: str) -> tuple[int, bytes]:
    b = s.encode()
    return 8, struct.pack("<Q", len(b)) + b


def array_tensor(name: str, arr: np.ndarray) -> tuple[str, tuple[int, ...], int, bytes]:
    """A float32 or float16 numpy array (numpy order) as a tensor entry."""
    gtype = GGML_F16 if arr.dtype == np.float16 else GGML_F32
    return name, tuple(arr.shape[::-1]), gtype, np.ascontiguousarray(arr).tobytes()


def rewrite(src: Path, dst: Path, rename=None, meta: dict | None = None, tensors=None) -> Path:
    """`rename(key) -> key`; `meta`: key -> (vtype, raw value bytes), replacing or adding;
    `tensors(name, tensor_info) -> list of (name, ne, ggml type id, bytes)` (None: copied as is)."""
    from hearth.engine.gguf import GGUFFile  # noqa: PLC0415
    g = GGUFFile.open(src, check_types=False)
    raw = Path(src).read_bytes()
    meta = dict(meta or {})
    kvs = []
    for key, (a, b) in g.metadata_spans.items():
        new = rename(key) if rename else key
        if new in meta:
            kvs.append(kv(new, *meta.pop(new)))
            continue
        kvs.append(kv(new, g.metadata_types[key], raw[a:b][8 + len(key.encode()) + 4:]))
    kvs += [kv(k, *v) for k, v in meta.items()]
    out = []
    for name, t in g.tensors.items():
        got = tensors(name, t) if tensors else None
        out += got if got is not None else [(name, tuple(t.shape), t.type.id, bytes(t.data))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(out), len(kvs)) + b"".join(kvs)
    infos, blobs, offset = [], [], 0
    for name, ne, tid, data in out:
        nb = name.encode()
        infos.append(struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) +
                     b"".join(struct.pack("<Q", int(x)) for x in ne) + struct.pack("<IQ", tid, offset))
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head += b"".join(infos)
    head += b"\0" * ((-len(head)) % ALIGN)
    Path(dst).write_bytes(head + b"".join(blobs))
    return Path(dst)


def replaced(name, ne=None, keep=None, poke=None):
    """A `tensors` callback for gguf_rewrite: tensor `name` with shape ne (GGUF order; its bytes cut
    to `keep`) or with the bytes at offsets `poke` set to 0xFF."""
    def f(n, t):
        if n != name:
            return None
        data = bytearray(t.data)
        for at in poke or ():
            data[at] = 0xFF
        return [(n, tuple(ne or t.shape), t.type.id, bytes(data[:keep]))]
    return f
