"""Prefix images: the K/V cache of a prompt prefix written to a file, restored instead of recomputed.

Image layout (little-endian throughout; `n` = token count, `L`/`H`/`D` = layers, KV heads, head dim):

    offset  size                what
    0       128                 header (below)
    128     4 n                 token ids, int32 [n]
    ...     2 L x 4 H n D       for each layer: K then V, float32 [H, n, D]  (head-major, as the cache)
    ...     4 n_vocab           logits after the last token, float32 [n_vocab]  (if FLAG_LOGITS)
    end-4   4                   CRC-32 of every byte before it (header included)

Header (128 bytes):
    0   8   magic b"\\x89HPX\\r\\n\\x1a\\n"  (a high byte, CR LF, ^Z, LF: like PNG's, so a text-mode
            transfer or a truncation to 7 bits is caught as 'magic', not as a wrong checksum)
    8   4   u32 format version          12  4  u32 header size (128)
    16  4   u32 dtype (1 = float32)     20  4  u32 flags (bit 0: logits present)
    24  4   u32 n_layers                28  4  u32 n_kv_heads
    32  4   u32 head_dim                36  4  u32 n_tokens
    40  4   u32 n_vocab                 44  4  u32 reserved, 0
    48  8   u64 image size in bytes, header to checksum included
    56  32  key: blake2b-256 of everything the K/V values depend on (`key_digest`)
    88  36  reserved, 0
    124 4   u32 CRC-32 of bytes [0, 124): a damaged header is refused as 'header' before its sizes
            are believed, so a flipped bit cannot make the reader allocate or wait for gigabytes.

Why CRC-32 (zlib's) for the trailer: it detects every single-bit flip, every burst of up to 32 bits and
random damage with probability 1 - 2^-32, it is in the standard library, and it runs at ~2.8 GB/s here,
so a 2,000-token SmolLM2 image (92 MB) checks in ~32 ms, on a worker thread overlapped with the reads
and copies (zlib releases the GIL). blake2b runs at ~0.65 GB/s (~140 ms) and would alone miss the
60 ms restore goal; crc32c is not in the standard library. Images are a local cache, not a trust
boundary, and the 256-bit key (protected by the header CRC) is what decides an image's identity.

Commit-then-verify, with rollback. A restore validates the header, the key, every size against the
model and the token ids before it touches the cache, then streams each tensor once: file -> a scratch
buffer sized for one tensor ([H, n, D], double-buffered so the CRC of one overlaps the read of the next)
-> `kv.write_prefix` (the one copy into the cache). The whole-image CRC is only known at the end, so a
damaged tensor is found after some layers were written; then every written layer is put back:
positions [0, min(resident, n)) of each layer were copied aside (`kv.read_prefix`) just before being
overwritten. Cost: nothing when nothing is resident (a fresh engine, or the store, which resets first);
otherwise one copy of the overlapping resident K/V (memory proportional to min(resident, n), never to
n_ctx). Positions at or past `resident` hold no valid data, so they need no backup. The alternative,
reading the whole image into memory before committing, would cost an image-sized buffer on every
restore; reading the file twice (check, then copy) would need a seekable file and twice the reads.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import weakref
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from hashlib import blake2b

import numpy as np

from . import build_info
from .errors import EngineError, PrefixImageError

MAGIC = b"\x89HPX\r\n\x1a\n"
FORMAT_VERSION = 1
HEADER_SIZE = 128
DTYPE_F32 = 1
DTYPE_NAMES = {DTYPE_F32: "float32"}
FLAG_LOGITS = 1
CHECKSUM_SIZE = 4

# magic, version, header size, dtype, flags, n_layers, n_kv_heads, head_dim, n_tokens, n_vocab,
# reserved u32, image size u64, key, 36 reserved bytes  -> 124 bytes; then the header CRC.
_HEADER = struct.Struct("<8s10IQ32s36x")
assert _HEADER.size == HEADER_SIZE - 4

F32 = np.dtype("<f4")
I32 = np.dtype("<i4")
_ASYNC_CRC_MIN = 256 * 1024  # smaller buffers are checked inline: a thread hand-off costs more


@dataclass(frozen=True)
class ImageHeader:
    n_layers: int
    n_kv_heads: int
    head_dim: int
    n_tokens: int
    n_vocab: int
    key: bytes
    flags: int = FLAG_LOGITS
    dtype: int = DTYPE_F32
    version: int = FORMAT_VERSION

    @property
    def has_logits(self) -> bool:
        return bool(self.flags & FLAG_LOGITS)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one K or V tensor: float32 [n_kv_heads, n_tokens, head_dim]."""
        return 4 * self.n_kv_heads * self.n_tokens * self.head_dim

    @property
    def image_size(self) -> int:
        logits = 4 * self.n_vocab if self.has_logits else 0
        return (HEADER_SIZE + 4 * self.n_tokens + 2 * self.n_layers * self.tensor_bytes + logits
                + CHECKSUM_SIZE)

    def pack(self) -> bytes:
        body = _HEADER.pack(MAGIC, self.version, HEADER_SIZE, self.dtype, self.flags, self.n_layers,
                            self.n_kv_heads, self.head_dim, self.n_tokens, self.n_vocab, 0,
                            self.image_size, self.key)
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def unpack(cls, raw: bytes) -> "ImageHeader":
        """Parse and check a header on its own (magic, version, CRC, declared size); `raw` is the first
        up-to-128 bytes of a file. Sizes are checked against a model by `check_against`."""
        if not raw:
            raise PrefixImageError("empty", "the prefix image is empty (0 bytes)")
        if raw[:len(MAGIC)] != MAGIC[:len(raw)]:
            raise PrefixImageError("magic", f"not a Hearth prefix image (starts with {raw[:8]!r})")
        if len(raw) < HEADER_SIZE:
            raise PrefixImageError("truncated", f"the prefix image ends inside its header ({len(raw)} of "
                                                f"{HEADER_SIZE} bytes)")
        (magic, version, header_size, dtype, flags, n_layers, n_kv_heads, head_dim, n_tokens, n_vocab,
         reserved, image_size, key) = _HEADER.unpack_from(raw)
        if version != FORMAT_VERSION:
            raise PrefixImageError("version", f"the prefix image has format version {version}; this engine "
                                              f"reads version {FORMAT_VERSION}")
        (crc,) = struct.unpack_from("<I", raw, HEADER_SIZE - 4)
        if crc != zlib.crc32(raw[:HEADER_SIZE - 4]):
            raise PrefixImageError("header", "the prefix image's header is damaged (header CRC mismatch)")
        if header_size != HEADER_SIZE or reserved or any(raw[88:124]) or flags & ~FLAG_LOGITS:
            raise PrefixImageError("header", "the prefix image's header has fields this version does not "
                                             "define (header size, flags or reserved bytes)")
        if dtype not in DTYPE_NAMES:
            raise PrefixImageError("dtype", f"the prefix image holds dtype code {dtype}; only float32 (1) "
                                            f"is read")
        h = cls(n_layers, n_kv_heads, head_dim, n_tokens, n_vocab, key, flags, dtype, version)
        if image_size != h.image_size:
            raise PrefixImageError("header", f"the prefix image's header declares {image_size} bytes but "
                                             f"its sizes add up to {h.image_size}")
        return h

    def check_against(self, want: "ImageHeader") -> None:
        """Refuse an image whose sizes or key differ from what this engine would write (`want`)."""
        for field, label in (("n_layers", "layers"), ("n_kv_heads", "KV heads"), ("head_dim", "head dim"),
                             ("n_vocab", "vocabulary size"), ("dtype", "dtype")):
            got, exp = getattr(self, field), getattr(want, field)
            if got != exp:
                raise PrefixImageError("shape", f"the prefix image has {got} {label}, this model {exp}")
        if self.key != want.key:
            raise PrefixImageError("key", "the prefix image was made for another prefix, model, tokenizer, "
                                          "backend, engine build or machine (key mismatch)")
        if self.n_tokens != want.n_tokens:
            raise PrefixImageError("shape", f"the prefix image holds {self.n_tokens} tokens under the key of "
                                            f"a {want.n_tokens}-token prefix")


# ---------------------------------------------------------------------------------------------- key

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
            if len(v):
                start, end = int(v.offsets[0]), int(v.offsets[-1] + v.lengths[-1])
                blob = v._buf[start:end]  # noqa: SLF001  (the raw span; decoding 49k strings is slow)
            else:
                blob = b""
            out.append((key, np.asarray(v.lengths, "<i8").tobytes()))
            out.append((key + ".bytes", blob))
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


def key_digest(*, backend: dict, model: bytes, ids, dtype: int = DTYPE_F32) -> bytes:
    """The 32-byte key of an image: the format version, dtype, engine build, machine, backend (and GPU
    adapter: vendor, device, driver, and any weight fallbacks it reports), model digest and the
    prefix's token ids."""
    h = blake2b(digest_size=32, person=b"hearth-prefix")
    _field(h, "format", str(FORMAT_VERSION).encode())
    _field(h, "dtype", DTYPE_NAMES[dtype].encode())
    _field(h, "build", build_info.engine_build_hash().encode())
    _field(h, "machine", build_info.machine_fingerprint().encode())
    _field(h, "backend", json.dumps(_backend_identity(backend), sort_keys=True, default=str).encode())
    _field(h, "model", model)
    _field(h, "ids", np.asarray(ids, I32).tobytes())
    return h.digest()


# ------------------------------------------------------------------------------------------ streams

_executor: ThreadPoolExecutor | None = None
_executor_pid = 0
_executor_lock = threading.Lock()


def _crc_executor() -> ThreadPoolExecutor:
    global _executor, _executor_pid
    with _executor_lock:
        if _executor is None or _executor_pid != os.getpid():  # a forked child has no worker thread
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hearth-prefix-crc")
            _executor_pid = os.getpid()
        return _executor


class RunningCrc:
    """CRC-32 of a stream of buffers, computed in order. Large buffers are checked on one worker thread
    (one worker, so FIFO order keeps the chain in order) to overlap the caller's reads and copies;
    `update` returns a Future the caller waits on before reusing that buffer."""

    def __init__(self, value: int = 0):
        self._value = value
        self._last: Future | None = None

    def _step(self, buf) -> None:
        self._value = zlib.crc32(buf, self._value)

    def update(self, buf) -> Future | None:
        if memoryview(buf).nbytes < _ASYNC_CRC_MIN and self._last is None:
            self._step(buf)
            return None
        self._last = _crc_executor().submit(self._step, buf)
        return self._last

    @property
    def value(self) -> int:
        if self._last is not None:
            self._last.result()
        return self._value


def write_all(f, buf) -> None:
    """Write all of `buf` (raw files may take it in parts)."""
    mv = memoryview(buf).cast("B")
    while len(mv):
        n = f.write(mv)
        if n is None:
            raise BlockingIOError("non-blocking file object would block while writing a prefix image")
        if n >= len(mv):  # buffered writers report the whole length
            return
        mv = mv[n:]


def _read_into(f, buf, what: str, offset: int) -> None:
    """Fill `buf` from `f` or refuse as 'truncated'; OSError becomes 'io'."""
    mv = memoryview(buf).cast("B")
    want, got = len(mv), 0
    readinto = getattr(f, "readinto", None)
    try:
        while got < want:
            if readinto is not None:
                n = readinto(mv[got:])
            else:
                chunk = f.read(want - got)
                n = len(chunk)
                mv[got:got + n] = chunk
            if not n:
                raise PrefixImageError("truncated", f"the prefix image ends inside {what} (byte {offset + got}, "
                                                    f"{want - got} bytes missing)")
            got += n
    except OSError as e:
        raise PrefixImageError("io", f"cannot read the prefix image: {e}") from e


def _read_bytes(f, n: int, what: str, offset: int) -> bytes:
    buf = bytearray(n)
    _read_into(f, buf, what, offset)
    return bytes(buf)


def _remaining_size(f) -> int | None:
    """Bytes left from the current position, when the file object can tell; None for streams."""
    try:
        if hasattr(f, "fileno"):
            pos = f.tell()
            size = os.fstat(f.fileno()).st_size
            return size - pos
        if f.seekable():
            pos = f.tell()
            end = f.seek(0, os.SEEK_END)
            f.seek(pos)
            return end - pos
    except (OSError, AttributeError, ValueError):
        pass
    return None


def _read_upto(f, n: int) -> bytes:
    """Up to n bytes (fewer only at the end of the file)."""
    out = bytearray()
    try:
        while len(out) < n:
            chunk = f.read(n - len(out))
            if not chunk:
                break
            out += chunk
    except OSError as e:
        raise PrefixImageError("io", f"cannot read the prefix image: {e}") from e
    return bytes(out)


# ------------------------------------------------------------------------------------ write, read

def write_image(f, header: ImageHeader, ids, kv, logits: np.ndarray | None) -> int:
    """Stream an image to the binary file object `f`, one write per tensor; returns its size.

    `kv` is KVCache-like (`read_prefix(layer, n) -> (k, v)` float32 [n_kv_heads, n, head_dim]);
    `logits` float32 [n_vocab] after the last token (required when the header's flag says so).
    Errors from `f` (a full disk) propagate unchanged; nothing here modifies `kv`."""
    n, shape = header.n_tokens, (header.n_kv_heads, header.n_tokens, header.head_dim)
    ids = np.ascontiguousarray(ids, I32)
    if ids.shape != (n,):
        raise ValueError(f"write_image: {len(ids)} ids for a header of {n} tokens")
    crc = RunningCrc()
    head = header.pack()
    for part in (head, ids):
        crc.update(part)
        write_all(f, part)
    # Views of the cache are strided over heads; they are made contiguous in one of two scratch
    # buffers (one is checked by the CRC thread while the other is filled).
    scratch: list[np.ndarray | None] = [None, None]
    pending: list[Future | None] = [None, None]
    slot = 0
    for layer in range(header.n_layers):
        for t in kv.read_prefix(layer, n):
            if tuple(t.shape) != shape:
                raise ValueError(f"write_image: layer {layer} tensor has shape {t.shape}, expected {shape}")
            if t.dtype == F32 and t.flags.c_contiguous:
                buf = t
            else:
                if pending[slot] is not None:
                    pending[slot].result()
                if scratch[slot] is None:
                    scratch[slot] = np.empty(shape, F32)
                np.copyto(scratch[slot], t)
                buf = scratch[slot]
            pending[slot] = crc.update(buf)
            write_all(f, buf)
            slot ^= 1
    if header.has_logits:
        logits = np.ascontiguousarray(logits, F32)
        if logits.shape != (header.n_vocab,):
            raise ValueError(f"write_image: logits of shape {logits.shape}, expected ({header.n_vocab},)")
        crc.update(logits)
        write_all(f, logits)
    write_all(f, struct.pack("<I", crc.value))
    return header.image_size


def read_header(f) -> tuple[ImageHeader, bytes]:
    raw = _read_upto(f, HEADER_SIZE)
    return ImageHeader.unpack(raw), raw


def read_image(f, want: ImageHeader, ids, kv, resident: int) -> np.ndarray | None:
    """Check the image in `f` against `want` (what this engine would write for `ids`) and restore it
    into `kv`; returns the stored logits (or None if the image has none).

    Everything that can be checked before touching the cache is: header, key, sizes against the model
    and against the file's length (when it can be known), the token ids. Then each tensor is read once
    and written once into the cache; if the checksum (or anything else) fails after that, the layers
    written so far get their positions [0, min(resident, n)) back, so `kv` holds what it held.
    `kv.write_prefix` must copy k and v before it returns: the scratch buffers are reused."""
    header, raw = read_header(f)
    header.check_against(want)
    n = header.n_tokens
    ids = np.ascontiguousarray(ids, I32)
    crc = RunningCrc(zlib.crc32(raw))
    stored = np.empty(n, I32)
    _read_into(f, stored, "the token ids", HEADER_SIZE)
    if not np.array_equal(stored, ids):
        raise PrefixImageError("tokens", "the prefix image's token ids differ from the prefix's (damaged)")
    crc.update(stored)
    rest = header.image_size - HEADER_SIZE - 4 * n
    remaining = _remaining_size(f)
    if remaining is not None and remaining < rest:
        raise PrefixImageError("truncated", f"the prefix image is cut short: {remaining} bytes follow its "
                                            f"token ids, {rest} expected")
    if remaining is not None and remaining > rest:
        raise PrefixImageError("trailing", f"the prefix image has {remaining - rest} bytes after its end")
    return _commit_tensors(f, header, kv, resident, crc)


def _commit_tensors(f, header: ImageHeader, kv, resident: int, crc: RunningCrc) -> np.ndarray | None:
    n = header.n_tokens
    shape = (header.n_kv_heads, n, header.head_dim)
    keep = max(0, min(resident, n))  # resident positions this restore overwrites
    backups: list[tuple[int, np.ndarray, np.ndarray]] = []
    # Two (K, V) scratch pairs, each [n_kv_heads, n, head_dim]: proportional to n, never to n_ctx.
    pairs = [(np.empty(shape, F32), np.empty(shape, F32)) for _ in range(2 if header.n_layers > 1 else 1)]
    pending: list[Future | None] = [None] * (2 * len(pairs))
    offset = HEADER_SIZE + 4 * n
    # Copies of the resident positions this restore overwrites, all taken before the first write: a
    # GPU cache serves read_prefix from one snapshot download that any write invalidates.
    for layer in range(header.n_layers if keep else 0):
        k0, v0 = kv.read_prefix(layer, keep)
        backups.append((layer, np.array(k0, F32), np.array(v0, F32)))
    written = 0
    try:
        for layer in range(header.n_layers):
            slot = layer % len(pairs)
            for j, what in enumerate(("K", "V")):
                fut = pending[2 * slot + j]
                if fut is not None:
                    fut.result()  # the CRC thread is done with this buffer
                _read_into(f, pairs[slot][j], f"layer {layer} {what}", offset)
                offset += header.tensor_bytes
                pending[2 * slot + j] = crc.update(pairs[slot][j])
            written = layer + 1  # counted first: a write that fails half-way is put back too
            kv.write_prefix(layer, n, pairs[slot][0], pairs[slot][1])
        logits = None
        if header.has_logits:
            logits = np.empty(header.n_vocab, F32)
            _read_into(f, logits, "the logits", offset)
            offset += logits.nbytes
            crc.update(logits)
        (stored_crc,) = struct.unpack("<I", _read_bytes(f, CHECKSUM_SIZE, "the checksum", offset))
        if stored_crc != crc.value:
            raise PrefixImageError("checksum", "the prefix image is damaged (checksum mismatch)")
        if _read_upto(f, 1):
            raise PrefixImageError("trailing", "the prefix image has bytes after its checksum")
        return logits
    except BaseException as e:
        for fut in pending:
            if fut is not None:
                fut.exception()  # wait; its own failure, if any, is not the one to report
        try:
            for layer, k0, v0 in backups[:written]:
                kv.write_prefix(layer, keep, k0, v0)
        except BaseException:  # noqa: BLE001  (a device lost mid-rollback: say the cache is not intact)
            e.kv_restored = False  # type: ignore[attr-defined]  (the engine glue resets the engine)
        raise


# ------------------------------------------------------------------------------- the engine's API
# Engine.prefix_key / save_prefix / restore_prefix call these. An engine here needs: tokenize(text),
# tokens, prefill(text), reset(), config.n_vocab, gguf, backend (.describe(), .kv), _lock, _last_logits
# and _adopt_prefix(ids, last_logits).

def prefix_ids(engine, text) -> list[int]:
    """The prefix's token ids, tokenized exactly as `prefill` does."""
    ids = engine.tokenize(text) if isinstance(text, str) else [int(i) for i in text]
    if not ids:
        raise EngineError("the prefix is empty (no tokens)")
    return ids


def expected_header(engine, ids) -> ImageHeader:
    """The header this engine writes for `ids` (and accepts on restore)."""
    kv = engine.backend.kv
    key = key_digest(backend=engine.backend.describe(), model=model_digest(engine.gguf), ids=ids)
    return ImageHeader(kv.n_layers, kv.n_kv_heads, kv.head_dim, len(ids), int(engine.config.n_vocab), key)


def prefix_key(engine, text) -> str:
    """The key (64 hex digits) of the image this engine would write for `text`."""
    return key_digest(backend=engine.backend.describe(), model=model_digest(engine.gguf),
                      ids=prefix_ids(engine, text)).hex()


def save_prefix(engine, text, f) -> int:
    """Make `text` resident (computing only what is not) and stream its image to `f`; returns the
    image's size. The engine is unchanged by a failing `f` (a full disk): writing only reads the cache."""
    ids = prefix_ids(engine, text)
    with engine._lock:  # noqa: SLF001  (no generate may move the cache while it is written)
        engine.prefill(ids)
        logits = engine._last_logits  # noqa: SLF001
        if logits is None:  # prefill always leaves them; keep the image whole if that ever changes
            raise EngineError("save_prefix: the engine has no logits after the prefix")
        return write_image(f, expected_header(engine, ids), ids, engine.backend.kv, logits)


def restore_prefix(engine, text, f) -> int:
    """Read an image of `text` from `f` into the cache and make it resident, with its last logits, so
    that generating right after it computes nothing. Returns its token count. Refuses with
    PrefixImageError (the engine's tokens and their K/V as before) on any mismatch or damage."""
    ids = prefix_ids(engine, text)
    with engine._lock:  # noqa: SLF001
        engine.backend.kv.check_fits(0, len(ids))
        want = expected_header(engine, ids)
        try:
            logits = read_image(f, want, ids, engine.backend.kv, resident=len(engine.tokens))
        except BaseException as e:
            if not getattr(e, "kv_restored", True):
                engine.reset()  # the rollback itself failed: forget everything rather than lie
            raise
        engine._adopt_prefix(ids, logits)  # noqa: SLF001
    return len(ids)
