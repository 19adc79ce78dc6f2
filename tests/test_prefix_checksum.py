"""engine/prefix/checksum.py: the CRC-32 images and segments carry is zlib's, value for value."""

from __future__ import annotations

import zlib

import numpy as np

from hearth.engine.prefix.checksum import crc32


def test_crc32_gives_zlib_s_values_whole_and_continued():
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 64, 4096 + 3, 1 << 20):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32(data) == zlib.crc32(data)
        cut = n // 3
        assert crc32(data[cut:], crc32(data[:cut])) == zlib.crc32(data)
        assert crc32(memoryview(np.frombuffer(data, np.uint8)), 12345) == zlib.crc32(data, 12345)
