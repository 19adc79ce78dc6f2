"""`Engine`: the public API of the inference engine, used by the app, the server, the CLI and the
prefix store.

The Engine owns what is resident (`tokens`: the ids whose K/V the cache holds, in order), the
longest-common-prefix reuse, sampling, stop handling and context checks; the backend only
computes. Every public method leaves the engine usable when it raises.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from .config import ModelConfig
from .errors import ContextFullError, EngineError, PrefixImageError
from .generation import GenerationEvent, GenerationStats, StopMatcher, cancel_check, common_prefix
from .gguf import GGUFFile
from .kv_cache import kv_dtype as parse_kv_dtype
from .kv_cache import kv_dtype_name
from .models.layer_state import Snapshots
from .prefix.format import FLAG_LOGITS, FLAG_STATE, ImageHeader, dtype_code
from .prefix.io import read_image, write_image
from .prefix.key import key_digest, model_digest
from .sampling import Sampler, Sampling, is_plain_greedy

BACKENDS = ("cpu", "gpu", "auto")


class Engine:
    """A loaded model, ready to generate. Build with `Engine.load(...)`.

    Attributes: gguf (GGUFFile), config (ModelConfig), tokenizer, backend (Backend), kv (the
    backend's cache), n_ctx, kv_dtype ("f32" or "f16"), backend_info (which backend runs and why).
    """

    def __init__(self, gguf: GGUFFile, config: ModelConfig, backend, tokenizer, backend_info: dict):
        self.gguf = gguf
        self.config = config
        self.backend = backend
        self.tokenizer = tokenizer
        self.backend_info = backend_info
        self._template = None
        self._tokens: list[int] = []
        self._last_logits: np.ndarray | None = None  # logits after the last resident token
        self._lock = threading.RLock()                # one caller at a time
        self._closed = False
        # A hybrid model's recurrent layers cannot be truncated by a slice: snapshots of their state,
        # taken at the end of every prefill and reply, are where `truncate` goes back to before
        # recomputing (`_rewind`; engine/models/layer_state.py).
        self._recurrent = bool(getattr(backend.kv, "recurrent", False))
        self._snapshots = Snapshots(backend.kv)

    # --- loading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, backend: str = "cpu", n_ctx: int = 4096,
             progress: Callable[[float, str], None] | None = None, kv_dtype: str = "f32") -> "Engine":
        """Open a GGUF model (path=None: the default model) on `backend` ("cpu", "gpu" or "auto"),
        with a KV cache of `kv_dtype` ("f32", or "f16": half the memory and image bytes).
        Raises NotEnoughMemoryError (an EngineError) before loading what would not fit.
        `progress(fraction, what)` is called as loading goes, from this thread."""
        from .paths import default_model_path  # noqa: PLC0415
        from .tokenizer import Tokenizer  # noqa: PLC0415
        if backend not in BACKENDS:
            raise EngineError(f"unknown backend '{backend}' (choose one of {', '.join(BACKENDS)})")
        kv_dtype = kv_dtype_name(parse_kv_dtype(kv_dtype))
        path = Path(path) if path is not None else default_model_path()
        if not path.is_file():
            raise EngineError(f"model file not found: {path}")
        g = GGUFFile.open(path)
        cfg = ModelConfig.from_gguf(g)
        n_ctx = int(n_ctx)
        if n_ctx <= 0:
            raise EngineError(f"n_ctx must be positive, not {n_ctx}")
        from . import memory  # noqa: PLC0415
        memory.check(g, cfg, n_ctx, backend, kv_dtype=kv_dtype)
        from .quants.scale_check import check_scales  # noqa: PLC0415
        check_scales(g)
        report = progress or (lambda fraction, what: None)
        # The tokenizer is built (mostly Python, holding the GIL) on a second thread while the
        # weights are dequantized (numpy, GIL released): load time is the longer of the two.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hearth-load") as pool:
            tok_future = pool.submit(Tokenizer.from_gguf, g)
            be, info = _make_backend(backend, cfg, g, n_ctx, report, kv_dtype)
            tok = tok_future.result()
        report(1.0, "ready")
        eng = cls(g, cfg, be, tok, info)
        eng._start_prefault()
        return eng

    def _start_prefault(self) -> None:
        """On a background thread, what a first restore and the first forward passes would otherwise
        pay for: the KV cache's pages made resident (a host cache only), the key's cached fields
        (model digest, engine build hash) and the tokenizer's pieces table (a reply's stream decoder
        reads it) computed, and the backend's `warm_up` run while nothing is resident (the CPU
        backend's first passes: a fresh process's one-time costs). The first restore and reply after
        a load then cost what the next ones do, and nobody waits for it: a call that comes first
        takes the lock first, and the warm-up then finds something resident and skips. The warm-up
        changes no result (the backend's results depend only on the ids and positions)."""
        def warm():
            try:
                steps()
            except Exception:
                if not self._closed:   # closed meanwhile: nothing left to warm, and nothing wrong
                    raise

        def steps():
            if hasattr(self.backend.kv, "prefault"):
                self.backend.kv.prefault()
            self.prefix_header([0])
            if hasattr(self.tokenizer, "token_bytes"):
                self.tokenizer.token_bytes(0)   # the pieces table a reply's stream decoder reads
            warm_up = getattr(self.backend, "warm_up", None)
            if warm_up is None:
                return
            with self._lock:
                if self._tokens or self._closed:   # a caller came first: its own pass did the warming
                    return
                warm_up()
        self._prefault = threading.Thread(target=warm, name="hearth-prefault", daemon=True)
        self._prefault.start()

    def wait_warm(self, timeout_s: float | None = None) -> None:
        """Wait for the warm-up that a load starts in the background (engine.prepare times it)."""
        self._prefault.join(timeout_s)

    def close(self) -> None:
        self._closed = True
        with self._lock:      # a warm-up (or a pass) running on another thread ends before its buffers go
            self.backend.close()

    @property
    def kv(self):
        return self.backend.kv

    @property
    def n_ctx(self) -> int:
        return self.backend.kv.max_ctx

    @property
    def kv_dtype(self) -> str:
        """The KV cache's precision: "f32" or "f16"."""
        return kv_dtype_name(self.backend.kv.dtype)

    @property
    def tokens(self) -> list[int]:
        """The token ids resident in the KV cache (a copy)."""
        return list(self._tokens)

    @property
    def eog_ids(self) -> frozenset[int]:
        return self.tokenizer.eog_ids

    # --- text ------------------------------------------------------------------------------

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        """Token ids of `text`, with the model's BOS if it wants one; `special` parses control
        tokens such as "<|im_start|>". A rendered chat that already begins with the BOS text
        does not get a second BOS."""
        ids = self.tokenizer.encode(text, add_special=True, parse_special=special)
        bos = self.tokenizer.bos_id
        if len(ids) >= 2 and bos is not None and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]
        return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    def render_chat(self, messages, tools=None, add_generation_prompt: bool = True, **template_vars) -> str:
        """The chat as the model's template renders it; `template_vars` are extra template
        variables (enable_thinking=False for Qwen3)."""
        if self._template is None:
            try:
                from .chat.chat_template import ChatTemplate  # noqa: PLC0415
            except ImportError:  # a build without the template module: plain ChatML
                return _chatml(messages, add_generation_prompt)
            self._template = ChatTemplate.from_gguf(self.gguf)
        return self._template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                     **template_vars)

    # --- the resident sequence -------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self._tokens.clear()
            self._last_logits = None
            self._snapshots.clear()
            self.kv.clear()

    @property
    def prefix_cacheable(self) -> bool:
        """Whether prefix images can hold this model's state: a hybrid (recurrent) model's image
        holds its attention layers' K/V and the recurrent state after its last token; per-layer-
        shaped K/V (SplitKV) keeps its other caches in the image's state section."""
        return getattr(self.backend.kv, "image_compatible", True)

    @property
    def segments_cacheable(self) -> bool:
        """Whether chat segments can hold this model's state: a hybrid model's segment holds the
        recurrent state at its end, a SplitKV's the other caches' K/V (prefix/segments.py). A state
        that images hold but segments cannot (no `segment_state_size`: a backend's own state
        class) keeps its chats recomputed rather than restored without their state."""
        kv = self.backend.kv
        return self.prefix_cacheable and (not hasattr(kv, "state_layout") or hasattr(kv, "segment_state_size"))

    def state_reach(self, n: int) -> int:
        """The furthest position <= n whose whole state is at hand without recomputing: n on a
        plain model or when n tokens are resident, else the newest snapshot at or before n."""
        with self._lock:
            if not self._recurrent or n == len(self._tokens):
                return n
            return self._snapshots.reach(n)

    def begin_chain(self, start: int) -> None:
        """Before chat segments are read into positions >= start: keep only the first `start`
        resident tokens. On a recurrent model without recomputing (the chain brings the state, or
        `adopt_chain` computes it): until then the resident state is not the tokens'."""
        with self._lock:
            if not self._recurrent:
                self.truncate(start)
            elif start < len(self._tokens):
                del self._tokens[start:]
                self._last_logits = None
                self._snapshots.items = [s for s in self._snapshots.items if s.n_tokens <= start]

    def adopt_chain(self, ids: Sequence[int], logits: np.ndarray | None, state_written: bool) -> None:
        """After `begin_chain` and a chain read: make `ids` resident. A recurrent model whose state
        the chain did not bring (none read, or refused) goes back to its nearest snapshot and
        recomputes; the snapshots before the chain stay (turn ends an edit goes back to)."""
        with self._lock:
            if not self._recurrent:
                self.adopt_prefix(ids, logits)
                return
            self._tokens = [int(i) for i in ids]
            self._last_logits = None
            if not state_written:
                self._rewind(len(self._tokens))
                return
            self.kv.n_tokens = len(self._tokens)
            self._last_logits = None if logits is None else np.asarray(logits, np.float32)
            self._snapshot()

    def _snapshot(self) -> None:
        """Keep the recurrent state after the resident tokens (no-op for plain models)."""
        self._snapshots.take(len(self._tokens), self._last_logits)

    def _rewind(self, n: int) -> None:
        """A recurrent model's state after the first n resident tokens: the newest snapshot at or
        before n, then the tokens after it recomputed (layer_state.Snapshots.rewind). If that fails
        the state is unknown: everything is forgotten rather than kept wrong."""
        try:
            self._last_logits = self._snapshots.rewind(n, self._tokens, self.backend.forward)
        except BaseException:
            self._tokens.clear()
            self._last_logits = None
            raise
        del self._tokens[n:]

    def feed(self, ids: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Append ids to the resident sequence. Returns float32 logits of the last position
        [n_vocab], or [len(ids), n_vocab] with all_logits. ContextFullError (nothing written)
        when they do not fit."""
        ids = [int(i) for i in ids]
        if not ids:
            raise EngineError("feed needs at least one token id")
        with self._lock:
            pos = len(self._tokens)
            self.kv.check_fits(pos, len(ids))
            self.kv.truncate(pos)
            try:
                out = self.backend.forward(np.asarray(ids, np.int32), pos, all_logits=all_logits)
            except BaseException:
                if self._recurrent:    # the recurrent layers may be half updated: back to pos
                    self._rewind(pos)
                else:
                    self.kv.truncate(pos)  # positions past pos may be half written: forget them
                raise
            self._tokens.extend(ids)
            self._last_logits = out[-1] if all_logits else out
            if len(ids) > 1:
                self._snapshot()
            return out

    def _greedy_stream(self, tok: int, n: int) -> Iterator[int]:
        """Feed tok, then each id this yields, up to n steps: the argmax after each, taken on the
        backend's device with the next step already running (backend.greedy_steps). Yields nothing
        more (and stops its steps) if the resident sequence changed meanwhile."""
        with self._lock:
            pos = len(self._tokens)
            self.kv.check_fits(pos, 1)
            self.kv.truncate(pos)
            steps = self.backend.greedy_steps(tok, pos, n)
        try:
            while True:
                with self._lock:
                    if len(self._tokens) != pos:
                        return
                    try:
                        nxt = next(steps)
                    except StopIteration:
                        return
                    except BaseException:
                        self.kv.truncate(pos)  # positions past pos may be half written: forget them
                        raise
                    self._tokens.append(tok)
                    self._last_logits = None   # recomputed if needed (_sync)
                pos += 1
                yield nxt
                tok = nxt
        finally:
            steps.close()

    def truncate(self, n: int) -> None:
        """Keep only the first n resident tokens. On a hybrid (recurrent) model this restores the
        newest snapshot at or before n and recomputes the tokens from it to n (`_rewind`); on the
        others it is a slice of the KV cache and costs nothing."""
        with self._lock:
            if n < len(self._tokens):
                self._last_logits = None
                if self._recurrent:
                    self._rewind(max(0, n))
                    return
                del self._tokens[n:]
                self.kv.truncate(n)

    def locked(self):
        """The engine's lock as a context manager: `with engine.locked(): ...` keeps every other
        caller out for the block (the lock is re-entrant, so Engine methods work inside it)."""
        return self._lock

    @property
    def last_logits(self) -> np.ndarray | None:
        """float32 [n_vocab]: the logits after the last resident token, or None when not at hand."""
        return self._last_logits

    def adopt_prefix(self, ids: Sequence[int], last_logits: np.ndarray | None) -> None:
        """After a prefix image was copied into the cache: make `ids` resident, with the
        logits after their last token (None: recomputed when needed)."""
        with self._lock:
            if not self.prefix_cacheable:
                raise PrefixImageError("not_cacheable", "prefix images cannot hold this model's state")
            self._tokens = [int(i) for i in ids]
            self.kv.n_tokens = len(self._tokens)
            self._last_logits = None if last_logits is None else np.asarray(last_logits, np.float32)
            self._snapshots.clear()   # snapshots of the tokens that were resident before
            self._snapshot()

    def _sync(self, ids: list[int]) -> tuple[int, int, np.ndarray]:
        """Make exactly `ids` resident, reusing the longest common prefix already there.
        Returns (reused, computed, logits after the last id)."""
        if not ids:
            raise EngineError("the prompt is empty (no tokens)")
        self.kv.check_fits(0, len(ids))
        common = common_prefix(self._tokens, ids)
        if common == len(ids) == len(self._tokens) and self._last_logits is not None:
            return common, 0, self._last_logits
        if self._recurrent and common == len(ids) and self._snapshots.logits_at(len(ids)) is not None:
            self.truncate(len(ids))   # a snapshot with its logits right there: nothing to recompute
            return common, 0, self._last_logits
        # The logits after ids[-1] are needed: recompute at least the last token.
        keep = min(common, len(ids) - 1)
        self._snapshots.recomputed = 0
        self.truncate(keep)
        back = self._snapshots.recomputed   # a recurrent model's tokens from its snapshot to keep
        logits = self.feed(ids[keep:])
        return keep - back, len(ids) - keep + back, logits

    def prefill(self, text: str | Sequence[int]) -> int:
        """Make `text` (or token ids) resident without generating; returns its token count."""
        ids = self.tokenize(text) if isinstance(text, str) else [int(i) for i in text]
        with self._lock:
            self._sync(ids)
        return len(ids)

    # --- prefix images (the format, key and I/O are in engine/prefix/) ----------------------

    def check_cacheable(self) -> None:
        if not self.prefix_cacheable:
            raise PrefixImageError("not_cacheable", f"{self.gguf.path.name}: prefix images of hybrid and "
                                                    "per-layer-shaped models are not supported yet")

    def prefix_ids(self, text: str | Sequence[int]) -> list[int]:
        """The prefix's token ids, tokenized exactly as `prefill` does."""
        ids = self.tokenize(text) if isinstance(text, str) else [int(i) for i in text]
        if not ids:
            raise EngineError("the prefix is empty (no tokens)")
        return ids

    def prefix_header(self, ids: Sequence[int]) -> ImageHeader:
        """The header this engine writes for the prefix `ids` (and accepts on restore)."""
        kv = self.backend.kv
        dtype = dtype_code(kv.dtype)
        key = key_digest(backend=self.backend.describe(), model=model_digest(self.gguf), ids=ids, dtype=dtype,
                         state=self._state_layout())
        n_state = int(kv.state_size(len(ids))) if hasattr(kv, "state_layout") else 0
        return ImageHeader(getattr(kv, "image_layers", kv.n_layers), kv.n_kv_heads, kv.head_dim, len(ids),
                           int(self.config.n_vocab), key, dtype=dtype, n_state=n_state,
                           flags=FLAG_LOGITS | (FLAG_STATE if n_state else 0))

    def _state_layout(self) -> str:
        kv = self.backend.kv   # a recurrent state or SplitKV's other caches: in the image's state section
        return kv.state_layout() if hasattr(kv, "state_layout") else ""

    def prefix_key(self, text: str | Sequence[int]) -> str:
        """The key (64 hex digits) of the image this engine would write for the prefix `text`."""
        return key_digest(backend=self.backend.describe(), model=model_digest(self.gguf),
                          ids=self.prefix_ids(text), dtype=dtype_code(self.backend.kv.dtype),
                          state=self._state_layout()).hex()

    def save_prefix(self, text: str | Sequence[int], fileobj) -> int:
        """Make `text` resident (computing only what is not) and stream its prefix image to the
        binary `fileobj`, one tensor per write. Returns the image's size in bytes. The engine is
        unchanged by a failing `fileobj` (a full disk): writing only reads the cache."""
        ids = self.prefix_ids(text)
        self.check_cacheable()
        with self._lock:  # no generate may move the cache while it is written
            self.prefill(ids)
            if self._last_logits is None:  # prefill always leaves them; keep the image whole if that changes
                raise EngineError("save_prefix: the engine has no logits after the prefix")
            return write_image(fileobj, self.prefix_header(ids), ids, self.kv, self._last_logits)

    def restore_prefix(self, text: str | Sequence[int], fileobj) -> int:
        """Read `text`'s prefix image from `fileobj` into the cache and make it resident with its
        last logits, so that generating right after it computes nothing. Returns its token count.
        Any mismatch or damage raises PrefixImageError and leaves the resident tokens and their K/V
        as they were."""
        ids = self.prefix_ids(text)
        self.check_cacheable()
        with self._lock:
            self.kv.check_fits(0, len(ids))
            try:
                logits = read_image(fileobj, self.prefix_header(ids), ids, self.kv, resident=len(self._tokens))
            except BaseException as e:
                if not getattr(e, "kv_restored", True):
                    self.reset()  # the rollback itself failed: forget everything rather than lie
                raise
            self.adopt_prefix(ids, logits)
        return len(ids)

    # --- generation ------------------------------------------------------------------------

    def generate(self, prompt: str | Sequence[int], max_tokens: int = 256, sampling: Sampling | None = None,
                 stop: Sequence[str] = (), cancel: threading.Event | Callable[[], bool] | None = None,
                 ) -> Iterator[GenerationEvent]:
        """Stream a reply to `prompt` (the full text to condition on, e.g. a rendered chat, or
        token ids). Yields events with .text deltas; the last has .final, .stop_reason and .stats.
        The prompt is made resident first (reusing the common prefix), so a ContextFullError for
        a prompt that does not fit is raised here, before anything is written."""
        ids = self.tokenize(prompt) if isinstance(prompt, str) else [int(i) for i in prompt]
        if not ids:
            raise EngineError("the prompt is empty (no tokens)")
        self.kv.check_fits(0, len(ids))
        return self._generate(ids, max_tokens, sampling or Sampling(), stop, cancel_check(cancel))

    def _generate(self, ids, max_tokens, sampling, stop, cancelled) -> Iterator[GenerationEvent]:
        # No lock is held across a yield: a generator may be closed from another thread.
        t0 = time.perf_counter()
        stats = GenerationStats()
        with self._lock:
            stats.reused_tokens, stats.computed_tokens, logits = self._sync(ids)
        t_prefill = time.perf_counter()
        stats.prefill_s = t_prefill - t0
        sampler = Sampler(sampling)
        decoder = self.tokenizer.stream_decoder(skip_special=True)
        stops = StopMatcher(stop)
        eog = self.tokenizer.eog_ids
        reason = "length"
        t_first = None
        # Greedy without penalties on a backend that takes the argmax on its device: each token is
        # computed while the one before is handed out (the ids stay on the device); any other
        # sampling reads the logits back and draws here, a step at a time.
        stream = None
        fast = is_plain_greedy(sampling) and hasattr(self.backend, "greedy_steps")
        nxt = None
        try:
            for step in range(max(0, max_tokens)):
                if cancelled():
                    reason = "cancelled"
                    break
                tok = nxt if nxt is not None else sampler(logits, self._tokens)
                nxt = None
                stats.generated_tokens += 1
                if t_first is None:
                    t_first = time.perf_counter()
                    stats.ttft_s = t_first - t0
                if tok in eog:
                    reason = "eog"
                    break
                text, hit = stops.feed(decoder.feed(tok))
                if hit:
                    yield GenerationEvent(text, tok)
                    reason = "stop"
                    break
                if step + 1 == max_tokens:
                    yield GenerationEvent(text, tok)
                    break
                if len(self._tokens) >= self.n_ctx:
                    yield GenerationEvent(text, tok)
                    reason = "context_full"
                    break
                if fast:
                    if stream is None:
                        stream = self._greedy_stream(tok, max_tokens - step - 1)
                    nxt = next(stream, None)
                if nxt is None:
                    fast = False
                    logits = self.feed([tok])
                yield GenerationEvent(text, tok)
        finally:
            if stream is not None:
                stream.close()
            with self._lock:
                self._snapshot()   # where the next turn of a chat on a recurrent model goes back to
        tail = ""
        if reason != "stop":
            tail, hit = stops.feed(decoder.flush())
            if hit:
                reason = "stop"
            else:
                tail += stops.flush()
        t_end = time.perf_counter()
        stats.decode_s = (t_end - t_first) if t_first is not None else 0.0
        if stats.computed_tokens and stats.prefill_s > 0:
            stats.prefill_tps = stats.computed_tokens / stats.prefill_s
        if stats.generated_tokens > 1 and stats.decode_s > 0:
            stats.decode_tps = (stats.generated_tokens - 1) / stats.decode_s
        yield GenerationEvent(tail, None, final=True, stop_reason=reason, stats=stats)


def _chatml(messages, add_generation_prompt: bool) -> str:
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def _make_backend(kind: str, cfg: ModelConfig, g: GGUFFile, n_ctx: int, report=None, kv_dtype: str = "f32"):
    """(backend, info). "auto" takes the GPU only when engine.gpu finds a real (non-CPU) adapter."""
    reason = ""
    from .config import CPU_ONLY_ARCHS  # noqa: PLC0415
    if cfg.arch in CPU_ONLY_ARCHS:
        if kind == "gpu":
            raise EngineError(f"{g.path.name}: architecture '{cfg.arch}' runs on the CPU backend only for now")
        if kind == "auto":
            kind, reason = "cpu", f"architecture '{cfg.arch}' runs on the CPU backend only"
    if kind == "auto":
        try:
            from . import gpu  # noqa: PLC0415
            adapter = gpu.probe()
        except Exception as e:  # a broken optional GPU stack must not stop the CPU engine
            adapter, reason = None, f"GPU backend unavailable ({e})"
        if adapter and adapter.get("real_gpu") and cfg.cpu_only:
            kind, reason = "cpu", f"{cfg.arch} models run on the CPU backend only ({cfg.cpu_only})"
        elif adapter and adapter.get("real_gpu"):
            kind, reason = "gpu", f"real GPU adapter {adapter.get('device', '?')}"
        else:
            kind = "cpu"
            reason = reason or ("only a CPU adapter found" if adapter else "no GPU adapter found")
    if kind == "gpu":
        try:
            from .gpu import backend_class  # noqa: PLC0415
        except Exception as e:
            raise EngineError(f"the GPU backend cannot be loaded: {e}") from e
        be = backend_class(cfg)(cfg, g, n_ctx, kv_dtype=kv_dtype)
    else:
        from .cpu_backend import CpuBackend  # noqa: PLC0415
        be = CpuBackend(cfg, g, n_ctx, progress=report, kv_dtype=kv_dtype)
    info = dict(be.describe())
    info["requested"] = "auto" if reason else kind
    if reason:
        info["reason"] = reason
    return be, info
