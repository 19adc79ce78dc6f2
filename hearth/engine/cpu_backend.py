"""CpuBackend: the forward pass (numpy and the engine/cpu kernels), prefilled in chunks.

Long inputs go through the model `chunk` tokens at a time: each chunk is one set of matrix
products per layer (tiles of quantized weights dequantized into BLAS), and its attention scores
are [heads, block, T] rather than [heads, n, n], so memory stays bounded whatever the prompt
length. numpy and the kernels release the GIL, so a GUI thread stays responsive while this runs in
a worker.

Threads: OpenBLAS always runs on one thread (BlasThreads says why: results must not depend on what
ran before); decode (one token) runs on the calling thread with the matrix-vector kernels on all
cores or on one, whichever its own timings say is faster (DecodeThreads); a chunk of 32 rows or
more is split into row ranges over our own threads (ThreadedRows); on an oversubscribed machine a
chunk runs on one thread (BlasThreads.choose). Every split is the same whatever thread count runs
it, so the bits of K/V and logits never depend on the load or on an earlier pass.
"""

from __future__ import annotations

import ctypes
import glob
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from .backend import Backend
from .config import ModelConfig
from .cpu.linear import int8_default, no_parallel_kernels, set_threads, vnni_tiles
from .models import build_model
from .models.decoder import SERIAL, RowRunner
from .system.shared_work import share

DEFAULT_CHUNK = 512


class BlasThreads:
    """How many threads a forward pass uses, and OpenBLAS held to one of them.

    OpenBLAS's thread count is one setting for the whole process (numpy's bundled OpenBLAS is a
    pthreads build: `openblas_set_num_threads_local` called on one thread changes the products of
    every thread), and its sgemm gives different bits on one and on two threads (it cuts the output
    into other edge tiles). A count that follows the load, or that another thread or engine set last,
    would make K/V depend on what ran before. So OpenBLAS is set to one thread (`pin`, before every
    forward pass) and never to more: every product is a one-thread BLAS call whose bits depend only
    on its shapes and values, and parallel work is our own (row ranges on ThreadedRows, numba's
    matrix-vector kernels), cut the same way whatever thread count runs it.

    `choose()` picks that thread count: all cores when the machine is quiet and one when it is not
    (load average above the core count: another process wants a core, and every hand-off waits for
    a descheduled thread). HEARTH_THREADS=<n> fixes it. Without numpy's bundled OpenBLAS nothing can
    be pinned (`can_set` False) and chunks run on the calling thread.
    """

    def __init__(self):
        self.cores = os.cpu_count() or 1
        env = os.environ.get("HEARTH_THREADS", "")
        self.fixed = int(env) if env.isdigit() and int(env) > 0 else None
        self._setters = _openblas_thread_setters()
        self.can_set = bool(self._setters)
        self.pin()

    def pin(self) -> None:
        """OpenBLAS on one thread (again: other code in the process may have changed it since). A
        forward pass calls it first; a call costs about a microsecond."""
        for fn in self._setters:
            fn(1)

    def choose(self) -> int:
        if self.fixed:
            return self.fixed
        try:
            # Our own threads count in the load average (about `cores` while we run), so only
            # a load above cores + 1 means another process wants at least a whole core.
            busy = os.getloadavg()[0] > self.cores + 1.0
        except (OSError, AttributeError):  # no load average (Windows)
            busy = False
        return 1 if busy else self.cores


def _openblas_thread_setters() -> list:
    """numpy's bundled OpenBLAS's thread-count setters (the process-wide one and the calling
    thread's), as ctypes functions of one int; none where numpy has no bundled OpenBLAS."""
    libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    names = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads",
             "openblas_set_num_threads_local")
    for path in glob.glob(os.path.join(libdir, "libscipy_openblas*.so*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        fns = [getattr(lib, name) for name in names if hasattr(lib, name)]
        for fn in fns:
            fn.argtypes = [ctypes.c_int]
        if fns:
            return fns
    return []


_BLAS = BlasThreads()


class DecodeThreads:
    """Picks the thread count of one-token passes (numba's matrix-vector kernels) by timing them.

    The load average cannot tell a quiet machine from one where another process holds about one
    core: our own threads are most of the load either way, and at that border two spinning
    threads make a token 5-10x slower than one thread (measured 4 vs 31 tok/s). So each count is timed
    on real tokens (a moving average of seconds per token), the faster is used, and the other is
    tried again now and then in case the machine changed (and timed afresh after every prefill,
    which moves the context length and with it a token's cost): after `probe_every` tokens, and twice as
    long after each probe that found it clearly slower (up to `max_interval`), since a probe of the
    slow count costs a slow token. 1 and 2 threads give bit-identical matrix-vector products here
    (the kernels split them by output row, OpenBLAS stays on one thread; a test checks it), so
    switching never changes a result.
    """

    def __init__(self, cores: int, probe_every: int = 32, max_interval: int = 1024):
        self.options = (cores, 1) if cores > 1 else (1,)
        self.probe_every = probe_every
        self.max_interval = max_interval
        self.interval = probe_every
        self.next_probe = probe_every
        self.cost: dict[int, float] = {}
        self.count = 0
        self.warmup = 0

    def best(self) -> int:
        return min(self.cost, key=self.cost.get)

    def forget(self) -> None:
        """Drop the timings: after a prefill the context length (and so a token's cost) has moved."""
        self.cost.clear()
        self.warmup = 1  # the first token after a prefill pays for cold caches: not timed
        self.interval = self.probe_every
        self.next_probe = self.count + self.probe_every

    def pick(self) -> int:
        self.count += 1
        for n in self.options:
            if n not in self.cost:
                return n
        best = self.best()
        if self.count >= self.next_probe and len(self.options) > 1:
            self.next_probe = self.count + self.interval
            return next(n for n in self.options if n != best)
        return best

    def record(self, n: int, seconds: float) -> None:
        if self.warmup:
            self.warmup -= 1
            return
        old = self.cost.get(n)
        if old is not None and len(self.cost) == len(self.options) and n != self.best():
            # A probe of the slower count: back off while it stays clearly slower.
            slow = seconds > 1.3 * self.cost[self.best()]
            self.interval = min(self.interval * 2, self.max_interval) if slow else self.probe_every
        self.cost[n] = seconds if old is None else 0.75 * old + 0.25 * seconds


# Below this many rows a chunk runs on one thread: the hand-offs would cost more than they save.
MIN_PARALLEL_ROWS = 32


def _row_thread() -> None:
    _BLAS.pin()
    no_parallel_kernels()


class SplitRows(RowRunner):
    """Row ranges of a chunk cut for `n_split` threads, run one after another on this thread.

    A chunk is cut the same way whether one or several threads run it, so a prefill gives the
    same bits whatever thread count the machine's load picked (a prefix image written on a busy
    machine restores into the same state a quiet one computes).
    """

    def __init__(self, n_split: int):
        self.n_split = n_split

    def split(self, n: int, pos: int = 0, fixed: int = 0, window: int = 0) -> list[tuple[int, int]]:
        if n < MIN_PARALLEL_ROWS:
            return [(0, n)]
        # Cost of row i: a fixed part (its matrix products) plus its attention span.
        span = np.arange(pos + 1, pos + n + 1, dtype=np.float64)
        if window > 0:
            span = np.minimum(span, window)
        cost = np.cumsum(fixed + span)
        cuts = np.searchsorted(cost, cost[-1] * np.arange(1, self.n_split) / self.n_split)
        edges = [0, *sorted(set(int(c) for c in cuts if 0 < c < n)), n]
        return list(zip(edges[:-1], edges[1:]))


class ThreadedRows(SplitRows):
    """Splits row ranges between this thread and n - 1 pool threads, each with one BLAS thread.

    Why not OpenBLAS's own threads: numpy's element-wise work (norms, RoPE, softmax exp, SiLU:
    ~25-40% of a prefill) runs on one core whatever BLAS does, while row ranges on our own
    threads parallelize everything; and our threads wait on futexes instead of spinning, so an
    oversubscribed machine slows down gently instead of collapsing.
    """

    def __init__(self, n_threads: int):
        super().__init__(n_threads)
        self.n_threads = n_threads
        self.pool = ThreadPoolExecutor(max_workers=n_threads - 1, thread_name_prefix="hearth-cpu",
                                       initializer=_row_thread)

    def run(self, fn, ranges) -> None:
        if len(ranges) == 1:
            fn(*ranges[0])
            return
        futures = [self.pool.submit(fn, r0, r1) for r0, r1 in ranges[1:]]
        try:
            fn(*ranges[0])
        finally:
            for f in futures:
                f.result()

    def map(self, fn, items) -> None:
        """fn(item) for every item, each on whichever of the threads takes it next (this one
        included): the pieces of one short input's products and attention."""
        share(fn, items, self.pool.submit, self.n_threads - 1)

    def close(self) -> None:
        self.pool.shutdown(wait=False)



class SpreadPieces(RowRunner):
    """A short input (fewer than MIN_PARALLEL_ROWS rows): its rows stay together on this thread, and
    the pieces of its work, fixed by the shapes whatever the thread count (the weight tiles of each
    product, attention one KV head at a time), are spread over `rows`' threads. Split into row
    ranges, a 20-row input would dequantize every weight tile once per range."""

    def __init__(self, rows: ThreadedRows):
        self.work = rows


class DeadlineRunner(RowRunner):
    """Runs a one-token pass on this thread and drops it to one thread once it has taken longer
    than `deadline` (a whole pass on one thread, with a margin). Where another process holds a
    core, each parallel launch can wait a scheduler slice (~4 ms measured, ~100 launches per
    token) for a descheduled worker: without this a probe of two threads could cost seconds.
    One and several threads give bit-identical products, so a switch within a pass changes
    nothing."""

    def __init__(self):
        self.deadline = float("inf")
        self.dropped = False

    def run(self, fn, ranges) -> None:
        super().run(fn, ranges)
        if time.perf_counter() > self.deadline:
            set_threads(1)
            self.deadline = float("inf")
            self.dropped = True


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, cfg: ModelConfig, gguf, n_ctx: int, chunk: int = DEFAULT_CHUNK, progress=None,
                 kv_dtype: str = "f32", int8: bool | None = None):
        self.cfg = cfg
        self.model = build_model(cfg, gguf)
        # One-token passes multiply quantized matrices with x quantized to 8 bits as llama.cpp does
        # (engine/cpu/kernels_int8.py: ~2x faster kernels, llama.cpp's products to float rounding),
        # the default; int8=False or HEARTH_CPU_INT8=0 gives float32 x everywhere, the exact float
        # path. Batches quantize x too unless HEARTH_CPU_INT8_BATCH=0 (float32 x and BLAS tiles):
        # every quantized matrix in VNNI tiles where the CPU has VNNI (engine/cpu/gemm_vnni.py),
        # elsewhere K-quant matrices in int8 tiles for inputs of up to 32 rows (engine/cpu/gemm_int8.py).
        # With int8 the last of several ids runs as a one-token pass (forward), so a prompt's logits
        # equal those of its recomputed last token.
        self.int8 = False
        self.set_int8(int8_default() if int8 is None else int8)
        self.model.make_resident(progress)
        self.kv = self.model.make_state(n_ctx, kv_dtype)
        self.chunk = chunk
        self.threads = 1
        self._rows: ThreadedRows | None = None
        self._decode = DecodeThreads(_BLAS.cores)
        self._deadline = DeadlineRunner()

    def set_int8(self, on: bool) -> None:
        """8-bit x in one-token passes (True) or float32 x everywhere (False)."""
        self.int8 = bool(on)
        self.model.set_int8(self.int8)

    @contextmanager
    def float_activations(self):
        """Within: float32 x in every product (the exact float path), then the setting as it was."""
        old = self.int8
        self.set_int8(False)
        try:
            yield self
        finally:
            self.set_int8(old)

    def forward(self, ids, pos: int, all_logits: bool = False) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        n = len(ids)
        if n == 0:
            raise ValueError("forward needs at least one token")
        self.kv.check_fits(pos, n)
        bad = (ids < 0) | (ids >= self.cfg.n_vocab)
        if bad.any():
            raise ValueError(f"token id {int(ids[bad][0])} is outside the vocabulary of {self.cfg.n_vocab}")
        if n > 1 and self.int8 and not all_logits:
            # The logits after several ids come from a one-token pass of the last one, as they do
            # when the engine recomputes only a prompt's last token after reusing its prefix: the
            # same ids then give the same logits (and the same greedy reply) whichever way they
            # arrived, one-token passes having 8-bit x and batches float32. After a short input
            # the one-token pass runs block by block with it (Decoder.forward's `tail`): the same
            # arithmetic, reading each block's K/V and weights while they are still in the caches.
            if n - 1 < MIN_PARALLEL_ROWS and n - 1 <= self.chunk:
                return self._forward(ids[:-1], pos, False, tail=int(ids[-1]))
            self._forward(ids[:-1], pos, False, logits=False)
            return self._forward(ids[-1:], pos + n - 1, False)
        return self._forward(ids, pos, all_logits)

    def _forward(self, ids, pos: int, all_logits: bool, logits: bool = True, tail: int | None = None
                 ) -> np.ndarray | None:
        n = len(ids)
        if tail is not None:   # one chunk, then the one-token pass of `tail` block by block with it
            _BLAS.pin()
            self._decode.forget()
            self.threads = _BLAS.choose()
            par = self._runner(n)
            # The tail's matrix-vector products on this thread alone: numba's threads would spin
            # after each of its launches while the pool thread runs the next block's pieces.
            set_threads(1)
            out = self.model.forward(ids, pos, self.kv, par=par, tail=tail)
            self.kv.n_tokens = pos + n + 1
            return out
        _BLAS.pin()
        adaptive = n == 1 and _BLAS.fixed is None and _BLAS.can_set
        if not adaptive:
            self._decode.forget()
        self.threads = self._decode.pick() if adaptive else _BLAS.choose()
        started = time.perf_counter()
        one = self._decode.cost.get(1)
        self._deadline.deadline = started + 1.5 * one if adaptive and self.threads > 1 and one else float("inf")
        self._deadline.dropped = False
        outs = []
        for s in range(0, n, self.chunk):
            part = ids[s:s + self.chunk]
            want = logits and (all_logits or s + self.chunk >= n)
            out = self.model.forward(part, pos + s, self.kv, all_logits=all_logits, par=self._runner(len(part)),
                                     logits=want)
            self.kv.n_tokens = pos + s + len(part)
            if want:
                outs.append(out)
        if adaptive:
            self._decode.record(self.threads, time.perf_counter() - started)
        if not logits:
            return None
        return np.concatenate(outs) if all_logits else outs[-1]

    def warm_up(self) -> None:
        """A chunk on the row threads, a short input and a one-token pass on positions nothing holds,
        so that the first real ones do not pay for what a fresh process does once: numba's
        dispatchers loading the cached kernels, the row threads and numba's threads starting, this
        backend's buffers first touched. The Engine's background thread calls it after a load,
        holding the engine's lock, with nothing resident; it leaves nothing resident, and it changes
        no later result (OpenBLAS stays on one thread, every split is fixed by its shapes: a test
        compares a warmed engine's K/V with a fresh one's)."""
        n = max(1, min(MIN_PARALLEL_ROWS, (self.kv.max_ctx - 1) // 2))
        short = max(1, min(MIN_PARALLEL_ROWS // 2, n))
        ids = np.zeros(n, np.int64)
        try:
            self.forward(ids, 0)
            self.forward(ids[:short], n)
            if n + short < self.kv.max_ctx:
                self.forward(ids[:1], n + short)
        finally:
            self.kv.clear()   # nothing resident (a recurrent state back to zeros too)

    def _runner(self, n_rows: int) -> RowRunner:
        """Decode: this thread (numba's kernels on self.threads); short inputs: this thread, their
        products' tiles and attention heads spread over our threads (SpreadPieces); longer chunks:
        row ranges on our own threads (ThreadedRows)."""
        # Row threads only where each is held to one BLAS thread (numpy's bundled OpenBLAS).
        if n_rows >= MIN_PARALLEL_ROWS and _BLAS.can_set and _BLAS.cores > 1:
            if self.threads == 1:
                return SplitRows(_BLAS.cores)   # the same cuts, one after another
            return self._threaded()
        set_threads(self.threads)
        if n_rows == 1:
            return self._deadline
        if self.threads > 1 and _BLAS.can_set:
            return SpreadPieces(self._threaded())
        return SERIAL

    def _threaded(self) -> ThreadedRows:
        if self._rows is None or self._rows.n_threads != self.threads:
            if self._rows is not None:
                self._rows.close()
            self._rows = ThreadedRows(self.threads)
        return self._rows

    def describe(self) -> dict:
        # What K/V values depend on (prefix-image keys): the float-x path computes a decoded
        # token's K/V a little differently from the default 8-bit x, so it says so.
        extra = self.model.arithmetic
        if not self.int8:
            return {"backend": "cpu", **extra}
        if self.model.int8_batches:
            return {"backend": "cpu", "decode_x": "int8", "batch_x": "int8-vnni" if vnni_tiles() else "int8", **extra}
        return {"backend": "cpu", "decode_x": "int8", **extra}

    def close(self) -> None:
        self.model = None
        if self._rows is not None:
            self._rows.close()
            self._rows = None
