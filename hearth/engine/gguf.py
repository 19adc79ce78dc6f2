"""A memory-mapped GGUF reader (versions 2 and 3).

Layout of a GGUF file (all little-endian):
    magic  b"GGUF"          4 bytes
    version                 u32   (2 or 3; version 1 used u32 counts and is not read)
    tensor_count            u64
    metadata_kv_count       u64
    metadata: kv_count x { key: string, value_type: u32, value }
    tensor infos: tensor_count x { name: string, n_dims: u32, ne: u64[n_dims], type: u32, offset: u64 }
    padding to `general.alignment` (default 32)
    data section: each tensor at data_offset + offset
A string is { len: u64, bytes[len] } (UTF-8). An array is { type: u32, count: u64, items }.

Opening is fast because nothing large is turned into Python objects: numeric arrays become numpy
views of the map, and string arrays (the 49k-token vocabulary, the merges) are indexed by offset
and decoded only when asked.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .errors import GGUFError, UnsupportedModelError
from .quants import GGML_TYPES, SUPPORTED_TYPES, GGMLType

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Value types of metadata.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {
    UINT8: np.dtype("<u1"), INT8: np.dtype("<i1"), UINT16: np.dtype("<u2"), INT16: np.dtype("<i2"),
    UINT32: np.dtype("<u4"), INT32: np.dtype("<i4"), FLOAT32: np.dtype("<f4"), BOOL: np.dtype("u1"),
    UINT64: np.dtype("<u8"), INT64: np.dtype("<i8"), FLOAT64: np.dtype("<f8"),
}
_TYPE_NAMES = {UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16", UINT32: "uint32",
               INT32: "int32", FLOAT32: "float32", BOOL: "bool", STRING: "string", ARRAY: "array",
               UINT64: "uint64", INT64: "int64", FLOAT64: "float64"}

# Sanity bounds: a count larger than these cannot be a real file and would make us loop for ever.
_MAX_DIMS = 8
_MAX_ARRAY_DEPTH = 16  # arrays of arrays nest this deep at most (real files: 1); deeper is corrupt


class StringArray(Sequence[str]):
    """A GGUF array of strings, decoded lazily from the map.

    `offsets` (int64 [n]) point at each string's bytes and `lengths` (int64 [n]) give their sizes.
    """

    def __init__(self, buf: memoryview, offsets: np.ndarray, lengths: np.ndarray):
        self._buf = buf
        self.offsets = offsets
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.raw(i).decode("utf-8", errors="replace")

    def raw(self, i: int) -> bytes:
        o, n = int(self.offsets[i]), int(self.lengths[i])
        return bytes(self._buf[o:o + n])

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def raw_span(self) -> memoryview:
        """Every string's bytes as they lie in the file, end to end (the lengths say where each
        ends): what a hash of the array reads without decoding each string."""
        if not len(self):
            return memoryview(b"")
        return self._buf[int(self.offsets[0]):int(self.offsets[-1] + self.lengths[-1])]

    def tolist(self) -> list[str]:
        # One bytes copy of the whole span, then slicing: far faster than one memoryview slice per item.
        if not len(self):
            return []
        start = int(self.offsets[0])
        blob = bytes(self.raw_span())
        offs = (self.offsets - start).tolist()
        lens = self.lengths.tolist()
        return [blob[o:o + n].decode("utf-8", errors="replace") for o, n in zip(offs, lens)]

    def __repr__(self) -> str:
        return f"StringArray(len={len(self)})"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry. `shape` is in GGUF order (ne0 first, the fastest-moving dimension);
    numpy order is `shape[::-1]`."""
    name: str
    shape: tuple[int, ...]
    type: GGMLType
    offset: int          # from the start of the data section
    n_bytes: int
    data: np.ndarray     # uint8 [n_bytes], a view of the map (no copy)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class _Cursor:
    """Reads from the map with bounds checks that name the file."""

    def __init__(self, path: Path, buf: memoryview):
        self.path, self.buf, self.pos, self.size = path, buf, 0, len(buf)

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path.name}: {what}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"file is truncated while reading {what} at byte {self.pos} "
                            f"(needs {n} bytes, {self.size - self.pos} left of {self.size})")

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v[0] if len(v) == 1 else v

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        self.need(n, what)
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return s.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def value(self, vtype: int, key: str, depth: int = 0):
        if vtype in _SCALAR:
            dt = _SCALAR[vtype]
            self.need(dt.itemsize, f"value of {key}")
            v = np.frombuffer(self.buf, dt, 1, self.pos)[0]
            self.pos += dt.itemsize
            return bool(v) if vtype == BOOL else v.item()
        if vtype == STRING:
            return self.string(f"value of {key}")
        if vtype == ARRAY:
            itype = self.unpack("<I", f"array type of {key}")
            count = self.unpack("<Q", f"array length of {key}")
            if itype in _SCALAR:
                dt = _SCALAR[itype]
                self.need(count * dt.itemsize, f"array {key} ({count} items)")
                arr = np.frombuffer(self.buf, dt, count, self.pos)
                self.pos += count * dt.itemsize
                return arr.astype(bool) if itype == BOOL else arr
            if itype == STRING:
                return self.string_array(count, key)
            if itype == ARRAY:
                # Each inner array needs at least its 12-byte type and count.
                if count * 12 > self.size - self.pos:
                    raise self.fail(f"array {key} claims {count} items, more than the file holds: "
                                    "truncated or corrupt")
                if depth >= _MAX_ARRAY_DEPTH:
                    raise self.fail(f"array {key} nests arrays more than {_MAX_ARRAY_DEPTH} deep")
                return [self.value(ARRAY, key, depth + 1) for _ in range(count)]
            raise self.fail(f"array {key} has unknown item type {itype}")
        raise self.fail(f"metadata {key} has unknown value type {vtype}")

    def string_array(self, count: int, key: str) -> StringArray:
        # Each string needs at least its 8-byte length: a larger count cannot fit in the file.
        if count * 8 > self.size - self.pos:
            raise self.fail(f"array {key} claims {count} strings, more than the file holds: "
                            "truncated or corrupt")
        # The hot loop of opening a model (49k tokens + 49k merges): collect lengths only, in a
        # list, and let struct's own bounds check catch a truncation; offsets follow by cumsum.
        buf, start = self.buf, self.pos
        lens: list[int] = []
        append = lens.append
        unpack = struct.Struct("<Q").unpack_from
        pos = start
        try:
            for _ in range(count):
                n = unpack(buf, pos)[0]
                append(n)
                pos += 8 + n
        except (struct.error, OverflowError):
            # Either string i's length field is cut off, or string i - 1 ran past the end.
            i = len(lens) - 1 if pos > self.size else len(lens)
            raise self.fail(f"file is truncated while reading string {i} of {key} "
                            f"(array of {count} strings from byte {start})") from None
        if pos > self.size:
            raise self.fail(f"file is truncated while reading the last string of {key} "
                            f"(it ends at byte {pos}, the file at {self.size})")
        lengths = np.array(lens, np.int64)
        offsets = start + 8 * np.arange(1, count + 1, dtype=np.int64)
        if count > 1:
            offsets[1:] += np.cumsum(lengths[:-1])
        self.pos = pos
        return StringArray(buf, offsets, lengths)


class GGUFFile:
    """An open GGUF file. Use `GGUFFile.open(path)`.

    Attributes:
        path, version, metadata (dict key -> value), tensors (dict name -> TensorInfo, file order),
        alignment, data_offset (where the data section starts; the file size for a
        vocabulary-only file that ends before the padding), header_bytes (the file's bytes before
        the data section), file_size.
    """

    def __init__(self, path: Path, mm: mmap.mmap | None, buf: memoryview):
        self.path = path
        self._mmap = mm
        self._buf = buf
        self.file_size = len(buf)
        self.version = 0
        self.metadata: dict[str, object] = {}
        self.metadata_types: dict[str, int] = {}
        self.metadata_spans: dict[str, tuple[int, int]] = {}  # key -> its kv's (start, end) bytes
        self.tensors: dict[str, TensorInfo] = {}
        self.alignment = DEFAULT_ALIGNMENT
        self.data_offset = 0

    @classmethod
    def open(cls, path: str | os.PathLike, check_types: bool = True) -> "GGUFFile":
        """Open and index `path`. With `check_types`, a tensor of a type the engine cannot
        dequantize is an UnsupportedModelError now rather than halfway through a reply."""
        path = Path(path)
        try:
            st = os.stat(path)
            if stat.S_ISDIR(st.st_mode):
                raise GGUFError(f"{path.name}: is a directory, not a GGUF model file")
            if not stat.S_ISREG(st.st_mode):
                # A FIFO or device would block or never end; a model is a plain file.
                raise GGUFError(f"{path.name}: is not a regular file, so not a GGUF model")
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    raise GGUFError(f"{path.name}: the file is empty, not a GGUF model")
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise GGUFError(f"{path.name}: cannot read the file ({e.strerror or e})") from e
        self = cls(path, mm, memoryview(mm))
        self._parse()
        if check_types:
            self.check_supported()
        return self

    @classmethod
    def from_header(cls, name: str, data: bytes, file_size: int) -> "GGUFFile":
        """Parse the first bytes of a file that is not all here (a model still on the Hub):
        `data` holds at least its header, `file_size` is the whole file's length. Metadata and
        tensor infos are checked as in `open`; the tensors' `data` is empty. A header that does not
        fit in `data` is a GGUFError saying it is truncated."""
        self = cls(Path(name), None, memoryview(data))
        self._parse(file_size=file_size)
        self.file_size = file_size
        return self

    @property
    def header_bytes(self) -> bytes:
        return bytes(self._buf[:self.data_offset])

    def file_bytes(self) -> np.ndarray:
        """The whole file as uint8 (a read-only view of its map): for compiled code that finds the
        tensors by their byte offsets (engine/cpu/decode_layer.py)."""
        return np.frombuffer(self._buf, np.uint8)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def arch_get(self, suffix: str, default=None):
        """Metadata `{arch}.{suffix}`, the way GGUF names per-architecture keys."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    def tensor_bytes(self, name: str) -> np.ndarray:
        return self.tensors[name].data

    def check_supported(self) -> None:
        for t in self.tensors.values():
            if t.type.name not in SUPPORTED_TYPES:
                raise UnsupportedModelError(
                    f"{self.path.name}: tensor {t.name} has type {t.type.name}, which Hearth cannot read yet "
                    f"(supported: {', '.join(sorted(SUPPORTED_TYPES))})")

    def drop_pages(self, view: np.ndarray) -> None:
        """Take the whole pages under `view` (a view of this file's map) out of this process's
        resident memory (madvise MADV_DONTNEED: a read-only file map loses nothing, the page cache
        keeps them and a later read maps them again), for data the engine has copied elsewhere.
        Nothing happens where the OS has no madvise (Windows) or the file is not mapped."""
        if self._mmap is None or not hasattr(mmap, "MADV_DONTNEED") or view.nbytes == 0:
            return
        start = view.ctypes.data - np.frombuffer(self._buf, np.uint8).ctypes.data
        if start < 0 or start + view.nbytes > len(self._buf) or not view.flags.c_contiguous:
            raise ValueError(f"{self.path.name}: drop_pages of an array that is not one span of the file's map")
        page = mmap.PAGESIZE
        a, b = -(-start // page) * page, (start + view.nbytes) // page * page
        if b > a:
            self._mmap.madvise(mmap.MADV_DONTNEED, a, b - a)

    def close(self) -> None:
        self.tensors.clear()
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass  # numpy views still alive; the map closes when they go

    def _parse(self, file_size: int | None = None) -> None:
        """`file_size`: the whole file's length when `self._buf` holds only its start."""
        c = _Cursor(self.path, self._buf)
        total = c.size if file_size is None else file_size
        c.need(4, "the magic number")
        magic = bytes(self._buf[:4])
        if magic != GGUF_MAGIC:
            raise c.fail(f"not a GGUF file (starts with {magic!r}, expected b'GGUF')")
        c.pos = 4
        self.version = c.unpack("<I", "the version")
        if self.version not in (2, 3):
            hint = ""
            if self.version & 0xFFFF == 0 and (self.version >> 24) in (2, 3):
                hint = " (it looks big-endian; Hearth reads little-endian GGUF only)"
            elif self.version == 1:
                hint = " (version 1 is the 2023 pre-release format; convert the model again)"
            raise c.fail(f"GGUF version {self.version} is not supported (only 2 and 3){hint}")
        n_tensors, n_kv = c.unpack("<QQ", "the header counts")
        # Every kv needs >= 12 bytes and every tensor info >= 24: larger counts are corrupt, not big.
        if n_kv * 12 > c.size or n_tensors * 24 > c.size:
            raise c.fail(f"absurd header counts ({n_tensors} tensors, {n_kv} metadata keys) "
                         f"for a file of {c.size} bytes: truncated or corrupt")
        for _ in range(n_kv):
            kv_start = c.pos
            key = c.string("a metadata key")
            vtype = c.unpack("<I", f"the type of {key}")
            if vtype not in _TYPE_NAMES:
                raise c.fail(f"metadata {key} has unknown value type {vtype}")
            if key in self.metadata:
                raise c.fail(f"metadata key {key} appears twice")
            self.metadata[key] = c.value(vtype, key)
            self.metadata_types[key] = vtype
            self.metadata_spans[key] = (kv_start, c.pos)
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if type(align) is not int or align <= 0 or align & (align - 1):
            raise c.fail(f"general.alignment {align!r} is not a power of two")
        self.alignment = align
        infos = []
        for _ in range(n_tensors):
            name = c.string("a tensor name")
            n_dims = c.unpack("<I", f"the dimensions of tensor {name}")
            if not 1 <= n_dims <= _MAX_DIMS:
                raise c.fail(f"tensor {name} has {n_dims} dimensions")
            shape = c.unpack(f"<{n_dims}Q", f"the shape of tensor {name}")
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            type_id = c.unpack("<I", f"the type of tensor {name}")
            offset = c.unpack("<Q", f"the offset of tensor {name}")
            if type_id not in GGML_TYPES:
                raise UnsupportedModelError(f"{self.path.name}: tensor {name} has unknown type id {type_id}")
            infos.append((name, shape, GGML_TYPES[type_id], offset))
        self.data_offset = -(-c.pos // align) * align
        if self.data_offset > total:
            if infos:
                raise c.fail("file is truncated before its tensor data")
            # A vocabulary-only file may end without the padding: it is all header.
            self.data_offset = total
        data_size = total - self.data_offset
        for name, shape, gtype, offset in infos:
            n_el = 1
            for d in shape:
                if d <= 0 or d > 1 << 40:
                    raise c.fail(f"tensor {name} has impossible shape {list(shape)}")
                n_el *= d
            if shape[0] % gtype.block_size:
                raise c.fail(f"tensor {name} ({gtype.name}) row length {shape[0]} is not a multiple of "
                             f"its block size {gtype.block_size}")
            n_bytes = n_el // gtype.block_size * gtype.type_size
            if offset % align:
                raise c.fail(f"tensor {name} offset {offset} is not aligned to {align}")
            if offset + n_bytes > data_size:
                raise c.fail(f"tensor {name} data (bytes {offset}..{offset + n_bytes} of the data section) "
                             f"lies beyond the end of the file: truncated or corrupt")
            if name in self.tensors:
                raise c.fail(f"tensor {name} appears twice")
            data = (np.frombuffer(self._buf, np.uint8, n_bytes, self.data_offset + offset)
                    if file_size is None else np.empty(0, np.uint8))
            self.tensors[name] = TensorInfo(name, shape, gtype, offset, n_bytes, data)
        self._check_no_overlap(c)

    def _check_no_overlap(self, c: _Cursor) -> None:
        # llama.cpp demands the tensors back to back in file order; we only demand that no two
        # share bytes, which is what a corrupt offset would break.
        spans = sorted((t.offset, t.offset + t.n_bytes, t.name) for t in self.tensors.values())
        for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
            if start < end:
                raise c.fail(f"tensors {a} and {b} overlap in the data section (a corrupt offset)")
