"""A copy of a real GGUF file with one metadata value changed in place, for tests of hostile models.

The value keeps its size (a number of the same type; a string no longer than the old one, padded with
spaces), so the header's length and every tensor offset stay as they are and the copy is a byte
copy with a few bytes changed: fast even for a large file, unlike a rewrite through gguf-py's reader.
"""

from __future__ import annotations

import struct
from pathlib import Path

NUMBER_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 10: "<Q", 11: "<q", 12: "<d"}
STRING = 8


def patch_metadata(src: Path, dst: Path, key: str, value) -> Path:
    data = bytearray(Path(src).read_bytes())
    name = key.encode()
    at = data.find(struct.pack("<Q", len(name)) + name)
    if at < 0:
        raise KeyError(f"{src}: no metadata key {key}")
    pos = at + 8 + len(name)
    (kind,) = struct.unpack_from("<I", data, pos)
    pos += 4
    if kind in NUMBER_FORMATS:
        struct.pack_into(NUMBER_FORMATS[kind], data, pos, value)
    elif kind == STRING:
        (n,) = struct.unpack_from("<Q", data, pos)
        new = value.encode()
        if len(new) > n:
            raise ValueError(f"{key}: the new string is {len(new)} bytes, the old one {n}; it cannot grow")
        data[pos + 8:pos + 8 + n] = new.ljust(n, b" ")
    else:
        raise ValueError(f"{key}: metadata of type {kind} cannot be patched")
    Path(dst).write_bytes(bytes(data))
    return Path(dst)
