"""Writing and reading prefix images, one tensor at a time, with a running CRC-32.

The layout and the header are in format.py.

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

import os
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..errors import PrefixImageError
from .checksum import crc32
from .format import CHECKSUM_SIZE, F32, HEADER_SIZE, I32, ImageHeader

_ASYNC_CRC_MIN = 256 * 1024  # smaller buffers are checked inline: a thread hand-off costs more


# ------------------------------------------------------------------------------------------ streams

_executors: dict[str, ThreadPoolExecutor] = {}
_executor_pid = 0
_executor_lock = threading.Lock()


def worker(name: str) -> ThreadPoolExecutor:
    """This process's one-thread executor `name` ("crc": RunningCrc's; "read": the chat segments
    read beside the calling thread), made on first use."""
    global _executor_pid
    with _executor_lock:
        if _executor_pid != os.getpid():  # a forked child has no worker threads
            _executors.clear()
            _executor_pid = os.getpid()
        ex = _executors.get(name)
        if ex is None:
            ex = _executors[name] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"hearth-prefix-{name}")
        return ex


def write_tail(f, header, logits, crc: "RunningCrc", who: str) -> None:
    """The end of an image or segment: the last logits (when the header flags them), then the
    CRC-32 of everything before it."""
    if header.has_logits:
        logits = np.ascontiguousarray(logits, F32)
        if logits.shape != (header.n_vocab,):
            raise ValueError(f"{who}: logits of shape {logits.shape}, expected ({header.n_vocab},)")
        crc.update(logits)
        write_all(f, logits)
    write_all(f, struct.pack("<I", crc.value))


class RunningCrc:
    """CRC-32 of a stream of buffers, computed in order. Large buffers are checked on one worker thread
    (one worker, so FIFO order keeps the chain in order) to overlap the caller's reads and copies;
    `update` returns a Future the caller waits on before reusing that buffer."""

    def __init__(self, value: int = 0):
        self._value = value
        self._last: Future | None = None

    def _step(self, buf) -> None:
        self._value = crc32(buf, self._value)

    def update(self, buf) -> Future | None:
        if memoryview(buf).nbytes < _ASYNC_CRC_MIN and self._last is None:
            self._step(buf)
            return None
        self._last = worker("crc").submit(self._step, buf)
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

    `kv` is KVCache-like (`read_prefix(layer, n) -> (k, v)` [n_kv_heads, n, head_dim] of the header's
    dtype, float32 or float16: the cache's own, so the image holds its bytes as they are);
    `logits` float32 [n_vocab] after the last token (required when the header's flag says so).
    Errors from `f` (a full disk) propagate unchanged; nothing here modifies `kv`."""
    n, shape = header.n_tokens, (header.n_kv_heads, header.n_tokens, header.head_dim)
    dt = header.kv_dtype
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
            if t.dtype == dt and t.flags.c_contiguous:
                buf = t
            else:
                if pending[slot] is not None:
                    pending[slot].result()
                if scratch[slot] is None:
                    scratch[slot] = np.empty(shape, dt)
                np.copyto(scratch[slot], t)
                buf = scratch[slot]
            pending[slot] = crc.update(buf)
            write_all(f, buf)
            slot ^= 1
    if pending[0] is not None or pending[1] is not None:
        for fut in pending:
            if fut is not None:
                fut.result()
    if header.has_state:   # a hybrid model's recurrent state after the last token (or SplitKV's other caches)
        state = np.ascontiguousarray(kv.read_state(n), F32)
        if state.shape != (header.n_state,):
            raise ValueError(f"write_image: a state of {state.shape} values, expected ({header.n_state},)")
        crc.update(state)
        write_all(f, state)
    write_tail(f, header, logits, crc, "write_image")
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
    crc = RunningCrc(crc32(raw))
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
    dt = header.kv_dtype
    # Two (K, V) scratch pairs, each [n_kv_heads, n, head_dim]: proportional to n, never to n_ctx.
    pairs = [(np.empty(shape, dt), np.empty(shape, dt)) for _ in range(2 if header.n_layers > 1 else 1)]
    pending: list[Future | None] = [None] * (2 * len(pairs))
    offset = HEADER_SIZE + 4 * n
    # Copies of the resident positions this restore overwrites, all taken before the first write: a
    # GPU cache serves read_prefix from one snapshot download that any write invalidates.
    for layer in range(header.n_layers if keep else 0):
        k0, v0 = kv.read_prefix(layer, keep)
        backups.append((layer, np.array(k0, dt), np.array(v0, dt)))
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
        state = None
        if header.has_state:   # read here, written into the model only once the checksum holds
            state = np.empty(header.n_state, F32)
            _read_into(f, state, "the recurrent state", offset)
            offset += state.nbytes
            crc.update(state)
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
        if state is not None:
            kv.write_state(n, state)
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
