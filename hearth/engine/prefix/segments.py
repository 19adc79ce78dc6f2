"""Chat segments: the K/V of positions [start, start + n) of a conversation, chained to a parent.

A conversation's context is a chain: the preset's prefix image (format.py) is the root, and each
segment holds only the positions its parent does not, keyed by its parent's key, its start and its
own token ids (`key.segment_digest`). A chat that grew by one exchange writes one segment of that
exchange; an edited message branches at the segment it falls in; two chats of one preset share
the root, and chats with the same opening share those segments too.

Segment layout: the prefix image's (format.py) with its own header, so one reader handles both.

    offset  size                what
    0       128                 header (below)
    128     4 n                 token ids of positions [start, start + n), int32 [n]
    ...     2 L x e H n D       for each layer: K then V, the cache's dtype [H, n, D] (head-major, as
                                the cache; e = 4 bytes for float32, 2 for float16)
    ...     4 S                 the state K/V tensors do not hold, float32 [S] (if FLAG_STATE): a hybrid
                                model's recurrent state after the segment's last token (L counts only
                                the attention layers), or a SplitKV's other caches' K/V of the
                                segment's positions (layer_state: read_segment_state)
    ...     4 n_vocab           logits after the last token, float32 [n_vocab]  (if FLAG_LOGITS)
    end-4   4                   CRC-32 of every byte before it (header included)

Header (128 bytes):
    0   8   magic b"\\x89HPS\\r\\n\\x1a\\n"     8  4  u32 format version     12  4  u32 header size (128)
    16  4   u32 dtype (1 = float32, 16 = float16; format.py)   20  4  u32 flags (bit 0: logits, bit 1: state)
    24  4   u32 n_layers                28  4  u32 n_kv_heads            32  4  u32 head_dim
    36  4   u32 start                   40  4  u32 n_tokens              44  4  u32 n_vocab
    48  8   u64 image size in bytes, header to checksum included
    56  32  key (`segment_digest`)      88 32  parent key (32 zero bytes: the chain starts at 0)
    120 4   u32 S: state floats (0 without FLAG_STATE)          124 4  u32 CRC-32 of bytes [0, 124)

A chain restores every segment's K/V and the state of its last segment only: a recurrent state is
valid only at its segment's end, so on a recurrent model a chain ends at a whole segment (a branch
inside one restores up to its start and computes the rest).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..errors import PrefixImageError
from ..system.shared_work import share
from .checksum import crc32
from .format import CHECKSUM_SIZE, DTYPE_F32, DTYPE_NAMES, F32, FLAG_LOGITS, FLAG_STATE, HEADER_SIZE, I32, KVFileSizes
from .io import RunningCrc, _read_into, _read_upto, worker, write_all, write_tail

SEGMENT_MAGIC = b"\x89HPS\r\n\x1a\n"
SEGMENT_VERSION = 1
NO_PARENT = bytes(32)

_HEADER = struct.Struct("<8s10IQ32s32sI")
assert _HEADER.size == HEADER_SIZE - 4


@dataclass(frozen=True)
class SegmentHeader(KVFileSizes):
    n_layers: int
    n_kv_heads: int
    head_dim: int
    start: int
    n_tokens: int
    n_vocab: int
    key: bytes
    parent: bytes
    flags: int = FLAG_LOGITS
    dtype: int = DTYPE_F32
    version: int = SEGMENT_VERSION
    n_state: int = 0      # float32 values of the state section (FLAG_STATE)

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    def pack(self) -> bytes:
        self.check_fields()
        body = _HEADER.pack(SEGMENT_MAGIC, self.version, HEADER_SIZE, self.dtype, self.flags, self.n_layers,
                            self.n_kv_heads, self.head_dim, self.start, self.n_tokens, self.n_vocab,
                            self.image_size, self.key, self.parent, self.n_state)
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def unpack(cls, raw: bytes) -> "SegmentHeader":
        """Parse and check a header on its own (magic, version, CRC, declared size)."""
        if not raw:
            raise PrefixImageError("empty", "the chat segment is empty (0 bytes)")
        if raw[:len(SEGMENT_MAGIC)] != SEGMENT_MAGIC[:len(raw)]:
            raise PrefixImageError("magic", f"not a Hearth chat segment (starts with {raw[:8]!r})")
        if len(raw) < HEADER_SIZE:
            raise PrefixImageError("truncated", f"the chat segment ends inside its header ({len(raw)} bytes)")
        (_, version, header_size, dtype, flags, n_layers, n_kv_heads, head_dim, start, n_tokens, n_vocab,
         image_size, key, parent, n_state) = _HEADER.unpack_from(raw)
        if version != SEGMENT_VERSION:
            raise PrefixImageError("version", f"the chat segment has format version {version}; this engine "
                                              f"reads version {SEGMENT_VERSION}")
        (crc,) = struct.unpack_from("<I", raw, HEADER_SIZE - 4)
        if crc != zlib.crc32(raw[:HEADER_SIZE - 4]):
            raise PrefixImageError("header", "the chat segment's header is damaged (header CRC mismatch)")
        if (header_size != HEADER_SIZE or flags & ~(FLAG_LOGITS | FLAG_STATE) or not n_tokens
                or bool(n_state) != bool(flags & FLAG_STATE)):
            raise PrefixImageError("header", "the chat segment's header has fields this version does not "
                                             "define")
        if dtype not in DTYPE_NAMES:
            raise PrefixImageError("dtype", f"the chat segment holds dtype code {dtype}")
        h = cls(n_layers, n_kv_heads, head_dim, start, n_tokens, n_vocab, key, parent, flags, dtype, version,
                n_state)
        if image_size != h.image_size:
            raise PrefixImageError("header", f"the chat segment's header declares {image_size} bytes but "
                                             f"its sizes add up to {h.image_size}")
        return h

    def check_shape(self, kv, n_vocab: int, dtype: int) -> None:
        """Refuse a segment whose sizes, dtype or state section differ from this engine's cache."""
        for got, exp, label in ((self.n_layers, image_layers(kv), "layers"),
                                (self.n_kv_heads, kv.n_kv_heads, "KV heads"),
                                (self.head_dim, kv.head_dim, "head dim"), (self.n_vocab, n_vocab, "vocabulary size"),
                                (self.dtype, dtype, "dtype"),
                                (self.n_state, state_values(kv, self.start, self.n_tokens), "state values")):
            if got != exp:
                raise PrefixImageError("shape", f"the chat segment has {got} {label}, this engine {exp}")


def image_layers(kv) -> int:
    """The K/V tensor pairs a segment holds per position range: a hybrid model's attention layers, a
    SplitKV's first cache's layers, every layer of a plain cache."""
    return getattr(kv, "image_layers", kv.n_layers)


def state_values(kv, start: int, n: int) -> int:
    """float32 values of the state section of a segment of positions [start, start + n) (0: none)."""
    return int(kv.segment_state_size(start, n)) if hasattr(kv, "segment_state_size") else 0


def read_segment_header(f) -> SegmentHeader:
    return SegmentHeader.unpack(_read_upto(f, HEADER_SIZE))


def write_segment(f, header: SegmentHeader, ids, kv, logits: np.ndarray | None) -> int:
    """Stream a segment to `f`: the cache's positions [header.start, header.end) of every layer, one
    write per tensor. `kv` is KVCache-like; nothing here modifies it. Errors from `f` propagate."""
    s, e = header.start, header.end
    ids = np.ascontiguousarray(ids, I32)
    if ids.shape != (header.n_tokens,):
        raise ValueError(f"write_segment: {len(ids)} ids for a header of {header.n_tokens} tokens")
    crc = RunningCrc()
    for part in (header.pack(), ids):
        crc.update(part)
        write_all(f, part)
    shape = (header.n_kv_heads, header.n_tokens, header.head_dim)
    # one is CRC-checked while the other fills
    scratch = [np.empty(shape, header.kv_dtype), np.empty(shape, header.kv_dtype)]
    pending = [None, None]
    slot = 0
    for layer in range(header.n_layers):
        for t in kv.read_prefix(layer, e):
            if pending[slot] is not None:
                pending[slot].result()
            np.copyto(scratch[slot], t[:, s:e])
            pending[slot] = crc.update(scratch[slot])
            write_all(f, scratch[slot])
            slot ^= 1
    if header.has_state:
        state = np.ascontiguousarray(kv.read_segment_state(s, e), F32)
        if state.shape != (header.n_state,):
            raise ValueError(f"write_segment: a state of {state.shape} values, expected ({header.n_state},)")
        for fut in pending:
            if fut is not None:
                fut.result()
        crc.update(state)
        write_all(f, state)
    write_tail(f, header, logits, crc, "write_segment")
    return header.image_size


@dataclass
class ChainPart:
    """One segment of a restore: an open file positioned after its header, what it holds, and how many
    of its positions the restore uses (`use` < n_tokens: the chat branches inside it)."""
    f: object
    header: SegmentHeader
    use: int
    crc: RunningCrc | None = None
    logits: np.ndarray | None = None
    state: np.ndarray | None = None     # the state section, float32 [n_state] (read with the checksum)
    failed: bool = False
    _bufs: list | None = None
    pending: list = field(default_factory=lambda: [None, None])

    def scratch(self, j: int) -> np.ndarray:
        """Buffer j (0: K, 1: V) [H, n, D] of the segment's dtype, reused across layers (fresh pages are slow to
        touch) once the CRC thread is done with it."""
        if self._bufs is None:
            shape = (self.header.n_kv_heads, self.header.n_tokens, self.header.head_dim)
            self._bufs = [np.empty(shape, self.header.kv_dtype), np.empty(shape, self.header.kv_dtype)]
        if self.pending[j] is not None:
            self.pending[j].result()
            self.pending[j] = None
        return self._bufs[j]


def read_chain(parts: list[ChainPart], ids, kv) -> tuple[int, np.ndarray | None]:
    """Restore the chain `parts` (consecutive, the first starting where the resident tokens end) into
    `kv`; returns the end position of the good parts. State sections are read into the parts
    (`ChainPart.state`), not written: `write_states` does that once the chain's end is known. Headers were checked by the caller; here
    each part's token ids are checked against `ids` before anything is written, then every layer's
    K and V of every part is read, in file order, and written at its positions. A part whose
    checksum fails only at its end leaves the positions before it good (their own checksums
    passed): the restore ends there, and the caller computes the rest. Positions past the returned
    end hold no valid data (the caller's resident count says so)."""
    ids = np.asarray(ids, I32)
    good = []
    for p in parts:
        h = p.header
        raw_ids = np.empty(h.n_tokens, I32)
        try:
            _read_into(p.f, raw_ids, "the token ids", HEADER_SIZE)
        except PrefixImageError:
            break
        if not np.array_equal(raw_ids[:p.use], ids[h.start:h.start + p.use]):
            break
        p.crc = RunningCrc(crc32(h.pack()))
        p.crc.update(raw_ids)
        good.append(p)
    if len(good) < len(parts):
        parts[len(good)].failed = True
    if not good:
        return (parts[0].header.start if parts else 0), None
    base = good[0].header.start
    kv = getattr(kv, "image_cache", kv)   # the cache that holds the segments' K/V tensors
    if _host_cache(kv, good[0].header.kv_dtype):
        # Each part is its own file with its own checksum: the parts are read side by side (this
        # thread and one worker), each straight into its positions of the cache.
        _each(lambda p: _read_part(p, kv), good)
    else:
        _read_layers(good, kv)
    n_good, logits = base, None
    for p in good:
        if p.failed:
            break
        h = p.header
        n_good = h.start + p.use
        # the logits after a part's last token are not the ones after position `use` of a branch
        logits = p.logits if p.use == h.n_tokens else None
        if p.use < h.n_tokens:
            break
    return n_good, logits


def _host_cache(kv, dt) -> bool:
    """Whether `kv` is the host cache (engine/kv_cache.py: per-layer numpy arrays of the segments'
    dtype), written in place."""
    return isinstance(getattr(kv, "k", None), list) and bool(kv.k) and isinstance(kv.k[0], np.ndarray) \
        and kv.k[0].dtype == dt and kv.k[0].flags.c_contiguous


def _each(fn, items) -> None:
    """fn(item) for every item, on this thread and the "read" worker, each item on whichever is free."""
    share(fn, items, worker("read").submit, 1 if (os.cpu_count() or 1) >= 2 else 0)


def _read_part(p: ChainPart, kv) -> None:
    """Part p's K and V of every layer into the host cache `kv`, then its logits and checksum
    (p.failed when any of it is short or damaged)."""
    h = p.header
    try:
        for layer in range(kv.n_layers):
            for j, dst in enumerate((kv.k[layer], kv.v[layer])):
                if h.end <= kv.max_ctx:
                    # one read per head: dst[head, start:end] is one contiguous run, as in the file
                    # (positions past `use` are past the restore)
                    for head in range(h.n_kv_heads):
                        run = dst[head, h.start:h.end]
                        _read_into(p.f, run, f"layer {layer}", 0)
                        p.crc.update(run)
                    continue
                buf = p.scratch(j)   # a branch inside a segment that reaches past this context
                _read_into(p.f, buf, f"layer {layer}", 0)
                p.pending[j] = p.crc.update(buf)
                dst[:, h.start:h.start + p.use] = buf[:, :p.use]
    except PrefixImageError:
        p.failed = True
        return
    _finish(p)


def _read_layers(parts: list[ChainPart], kv) -> None:
    """A device cache: each layer's K and V of every part, in file order, read into the part's
    scratch buffers and written at the part's positions with `kv.write_at` (the resident positions
    before them stay on the device untouched); then each part's logits and checksum, up to the first
    damaged part."""
    alive = list(parts)
    for layer in range(kv.n_layers):
        for p in list(alive):
            h = p.header
            bufs = []
            try:
                for j in (0, 1):
                    buf = p.scratch(j)   # waits for its checksum of the layer before, not the other's
                    _read_into(p.f, buf, f"layer {layer}", 0)
                    p.pending[j] = p.crc.update(buf)
                    bufs.append(buf[:, :p.use])
            except PrefixImageError:
                p.failed = True
                del alive[alive.index(p):]
                break
            # write_at copies out before it returns; the checksum thread only reads the buffers
            kv.write_at(layer, h.start, *bufs)
    for p in alive:
        if not _finish(p):
            break


def _finish(p: ChainPart) -> bool:
    """Read part p's logits (when it has them) and its closing checksum; False (p.failed) when they
    are short, damaged or followed by more bytes."""
    h = p.header
    try:
        if h.has_state:
            p.state = np.empty(h.n_state, F32)
            _read_into(p.f, p.state, "the state", 0)
            p.crc.update(p.state)
        if h.has_logits:
            p.logits = np.empty(h.n_vocab, F32)
            _read_into(p.f, p.logits, "the logits", 0)
            p.crc.update(p.logits)
        (stored,) = struct.unpack("<I", _read_upto(p.f, CHECKSUM_SIZE).rjust(CHECKSUM_SIZE, b"\0"))
        if stored != p.crc.value or _read_upto(p.f, 1):
            p.failed = True
    except PrefixImageError:
        p.failed = True
    return not p.failed


def write_states(parts: list[ChainPart], kv, n_good: int) -> bool:
    """Write the state sections of the good parts restored up to n_good into `kv`: a SplitKV's
    other caches' K/V of each part's used positions; a recurrent state only from the part that ends
    exactly at n_good (its state is the one after that token). Returns whether a recurrent state was
    written (False: the caller must compute it)."""
    recurrent = bool(getattr(kv, "recurrent", False))
    wrote = False
    for p in parts:
        h = p.header
        if p.failed or p.state is None or h.start >= n_good:
            break
        use = min(p.use, n_good - h.start)
        if recurrent:
            if h.end == n_good and use == h.n_tokens:
                kv.write_segment_state(h.start, use, h.n_tokens, p.state)
                wrote = True
            continue
        kv.write_segment_state(h.start, use, h.n_tokens, p.state)
    return wrote
