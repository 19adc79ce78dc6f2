"""Split GGUF models (llama.cpp's `gguf-split` layout) joined into one file, and cut into parts.

A split model is N valid GGUF files `stem-0000k-of-0000N.gguf`. Part 1 holds every metadata key
plus `split.no` (u16, 0-based), `split.count` (u16) and `split.tensors.count` (i32); the other
parts hold only the three `split.*` keys. Each part holds a run of the tensors, with offsets into
its own data section. Hearth's engine maps one file, so a downloaded split model is joined once:
part 1's metadata bytes (less the `split.*` keys) copied verbatim, every tensor info rewritten with
its offset in the joined data section, the data copied in chunks. The parts are removed only after
the joined file has been written, synced, renamed into place and opened again.

Joining needs the model's size free on the disk once more; that is checked before starting.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import BinaryIO

from ..errors import GGUFError, HubError
from ..gguf import GGUF_MAGIC, INT32, UINT16, GGUFFile, TensorInfo
from .file_names import joined_name, split_names, split_part

SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
_COPY_CHUNK = 8 << 20


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _tensor_info(t: TensorInfo, offset: int) -> bytes:
    return (_string(t.name) + struct.pack(f"<I{len(t.shape)}Q", len(t.shape), *t.shape)
            + struct.pack("<IQ", t.type.id, offset))


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _write_gguf(out: BinaryIO, version: int, kv_bytes: list[bytes], tensors: list[TensorInfo],
                alignment: int) -> None:
    """Header (magic, version, counts, raw kv bytes, tensor infos), padding, then each tensor's
    data at an aligned offset: the layout `engine.gguf` documents."""
    offsets, pos = [], 0
    for t in tensors:
        offsets.append(pos)
        pos = _align(pos + t.n_bytes, alignment)
    out.write(GGUF_MAGIC + struct.pack("<IQQ", version, len(tensors), len(kv_bytes)))
    for kv in kv_bytes:
        out.write(kv)
    for t, off in zip(tensors, offsets):
        out.write(_tensor_info(t, off))
    out.write(b"\0" * (_align(out.tell(), alignment) - out.tell()))
    base = out.tell()
    for t, off in zip(tensors, offsets):
        out.write(b"\0" * (base + off - out.tell()))
        data = t.data
        for i in range(0, t.n_bytes, _COPY_CHUNK):
            out.write(data[i:i + _COPY_CHUNK].tobytes())
    out.write(b"\0" * (_align(out.tell() - base, alignment) + base - out.tell()))


def _raw_kvs(g: GGUFFile, keys) -> list[bytes]:
    """The kv entries of `keys`, each as the file's own bytes (key, type, value), copied verbatim."""
    header = g.header_bytes
    return [header[slice(*g.metadata_spans[k])] for k in keys]


def _split_kv(key: str, vtype: int, fmt: str, value: int) -> bytes:
    return _string(key) + struct.pack("<I" + fmt, vtype, value)


def _check_free(folder: Path, need: int, what: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < need:
        raise HubError("disk_full", f"{what} needs {need / 1e9:.2f} GB free in {folder}, "
                                    f"{free / 1e9:.2f} GB are: free some space and try again")


def part_paths(first: Path) -> list[Path]:
    """All parts of the split model whose first part is `first`, in order."""
    part = split_part(first.name)
    if part is None:
        raise GGUFError(f"{first.name}: not the first part of a split model (name-00001-of-0000N.gguf)")
    return [first.with_name(n) for n in split_names(part)]


def join_split(first: Path, out: Path | None = None, remove_parts: bool = True) -> Path:
    """Join the parts of a split model into one GGUF file (`stem.gguf` next to them unless `out`)
    and return its path. Every part is checked (present, numbered, same count, tensor total)
    before anything is written."""
    paths = part_paths(first)
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise GGUFError(f"{first.name}: parts missing: {', '.join(missing)}")
    out = out or first.with_name(joined_name(first.name))
    parts = [GGUFFile.open(p, check_types=False) for p in paths]
    try:
        head = parts[0]
        for i, g in enumerate(parts):
            no, count = g.get("split.no"), g.get("split.count")
            if no != i or count != len(parts):
                raise GGUFError(f"{g.path.name}: split.no={no}, split.count={count}; expected "
                                f"{i} and {len(parts)} (parts of different models?)")
        tensors = [t for g in parts for t in g.tensors.values()]
        want = head.get("split.tensors.count")
        if want is not None and want != len(tensors):
            raise GGUFError(f"{head.path.name}: split.tensors.count is {want}, the parts hold {len(tensors)}")
        names = [t.name for t in tensors]
        if len(set(names)) != len(names):
            raise GGUFError(f"{head.path.name}: a tensor appears in two parts")
        kv = _raw_kvs(head, [k for k in head.metadata if k not in SPLIT_KEYS])
        _check_free(out.parent, sum(g.file_size for g in parts), f"Joining {out.name}")
        tmp = out.with_name(out.name + ".joining")
        try:
            with open(tmp, "wb") as f:
                _write_gguf(f, head.version, kv, tensors, head.alignment)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, out)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise HubError("disk_full" if e.errno == 28 else "io",
                           f"Joining {out.name} failed: {e.strerror or e}; the parts are kept") from e
    finally:
        for g in parts:
            g.close()
    joined = GGUFFile.open(out, check_types=False)
    n = len(joined.tensors)
    joined.close()
    if n != len(tensors):
        raise GGUFError(f"{out.name}: joined file holds {n} tensors, expected {len(tensors)}")
    if remove_parts:
        for p in paths:
            p.unlink(missing_ok=True)
    return out


def split_model(path: Path, n_parts: int, folder: Path | None = None) -> list[Path]:
    """Cut a GGUF file into `n_parts` parts the way `gguf-split --split-max-tensors` does (tensors
    spread evenly, metadata in part 1). Used to make split test models; returns the part paths."""
    g = GGUFFile.open(path, check_types=False)
    try:
        tensors = list(g.tensors.values())
        if not 1 <= n_parts <= len(tensors):
            raise ValueError(f"cannot cut {len(tensors)} tensors into {n_parts} parts")
        folder = folder or path.parent
        stem = path.name[:-5] if path.name.lower().endswith(".gguf") else path.name
        per = -(-len(tensors) // n_parts)
        kv_all = _raw_kvs(g, [k for k in g.metadata if k not in SPLIT_KEYS])
        # Later parts carry the alignment too, or their data would be read at the default 32.
        kv_align = _raw_kvs(g, [k for k in ("general.alignment",) if k in g.metadata])
        out = []
        for i in range(n_parts):
            chunk = tensors[i * per:(i + 1) * per]
            split_kv = [_split_kv("split.no", UINT16, "H", i), _split_kv("split.count", UINT16, "H", n_parts),
                        _split_kv("split.tensors.count", INT32, "i", len(tensors))]
            p = folder / f"{stem}-{i + 1:05d}-of-{n_parts:05d}.gguf"
            with open(p, "wb") as f:
                _write_gguf(f, g.version, (kv_all if i == 0 else kv_align) + split_kv, chunk, g.alignment)
            out.append(p)
        return out
    finally:
        g.close()
