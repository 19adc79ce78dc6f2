"""The engine worker: one QObject on one QThread does all model work, serially.

The GUI thread never calls the engine. `EngineClient` (GUI thread) owns the QThread and the worker and
turns method calls into queued signals; the worker answers with signals only (gpt4all's worker wrote
into the GUI's list model and needed a mutex in `data()`; ours never touches a model or a widget).
Stop is a threading.Event the worker's generate loop checks between tokens; quitting sets it, asks
the thread's event loop to quit and waits, so a reply in progress ends cleanly.

Worker signals (all delivered queued to the GUI thread):
    progress(str what, int done, int total)   long work started/advanced (total 0 = unknown)
    modelLoaded(dict ModelInfo), modelFailed(str message)
    prefixReady(dict {"action", "ms", "tokens", "reason"})
    delta(int request, str text)              streamed text, per token
    finished(int request, dict stats)         stop_reason, tokens/s, ttft ...
    failed(int request, str message)          an engine error; the app stays usable
    contextChanged(dict {"used", "n_ctx", "kv_bytes"})
    cacheListed(dict {"images", "chats", "total", "cap"})
    chatContext(dict)                         a chat's context restored/computed ({"action": ..., "tokens",
                                              "restored", "computed", "ms"}) or saved ({"action": "saved",
                                              "saved", "bytes", "tokens", "ms", "error"})
    tokensCounted(dict {"seq", "message", "prompt", "alone", "n_ctx"})   a draft's tokens ({} unknown)
    idle()                                    a request is done, nothing is running
"""

from __future__ import annotations

import atexit
import logging
import threading
import traceback
import weakref

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from .chat_source import ChatBackend

log = logging.getLogger(__name__)


class EngineWorker(QObject):
    progress = Signal(str, int, int)
    modelLoaded = Signal(dict)
    modelFailed = Signal(str)
    prefixReady = Signal(dict)
    delta = Signal(int, str)
    finished = Signal(int, dict)
    failed = Signal(int, str)
    contextChanged = Signal(dict)
    cacheListed = Signal(dict)
    chatContext = Signal(dict)
    tokensCounted = Signal(dict)
    idle = Signal()

    def __init__(self, backend: ChatBackend, shutdown: threading.Event):
        super().__init__()
        self.backend = backend
        self._shutdown = shutdown

    def _progress(self, what: str, done: int, total: int) -> None:
        self.progress.emit(what, done, total)

    @Slot()
    def warm_up(self) -> None:
        """Start-up work that would otherwise come with the first message and hold the interpreter lock
        there for 0.1-0.5 s, stalling the window: native imports (numpy.random, which numpy loads on first
        use and a sampler's generator needs; wgpu and cffi) and hashing the engine's sources for prefix
        keys. Done first, before the first model load, while the window is only starting."""
        import numpy.random  # noqa: PLC0415

        numpy.random.default_rng(0)
        from hearth.engine import build_info
        build_info.engine_build_hash()
        build_info.machine_fingerprint()
        try:
            import cffi  # noqa: F401, PLC0415  (wgpu's native binding)
            import wgpu  # noqa: F401, PLC0415
        except Exception:  # noqa: BLE001  (no GPU stack: the CPU backend does not need it)
            pass

    @Slot(object)
    def load_model(self, req: dict) -> None:
        if self._shutdown.is_set():
            return
        try:
            info = self.backend.load(req.get("path") or None, req.get("backend", "auto"),
                                     int(req.get("n_ctx", 4096)), self._progress, req.get("kv_dtype", "f32"))
            self.modelLoaded.emit(info.to_dict())
        except Exception as e:  # noqa: BLE001  any failure leaves the previous model loaded
            log.warning("model load failed: %s", traceback.format_exc())
            self.modelFailed.emit(_readable(e))
        self.contextChanged.emit(self.backend.context())
        self.idle.emit()

    @Slot(object)
    def prepare_prefix(self, req: dict) -> None:
        if self._shutdown.is_set() or not self._ready():
            return
        try:
            res = self.backend.prepare_prefix(req.get("system", ""), req.get("tools", []), self._progress,
                                              req.get("label"), self._shutdown.is_set)
            if res is not None:
                res["preset"] = req.get("preset", "")
                self.prefixReady.emit(res)
        except Exception as e:  # noqa: BLE001
            log.warning("prefix failed: %s", traceback.format_exc())
            self.failed.emit(-1, _readable(e))
        self.contextChanged.emit(self.backend.context())
        self.idle.emit()

    @Slot(object)
    def generate(self, req: dict) -> None:
        rid = req["id"]
        cancel_event: threading.Event = req["cancel"]
        if self._shutdown.is_set():
            return
        if not self._ready():
            self.failed.emit(rid, "No model is loaded yet.")
            self.idle.emit()
            return
        cancel = lambda: cancel_event.is_set() or self._shutdown.is_set()  # noqa: E731
        try:
            self._saved(self.backend.switch_chat(req.get("chat")))
            res = self.backend.prepare_prefix(req.get("system", ""), req.get("tools", []), self._progress,
                                              req.get("label"), cancel)
            if res is not None:
                res["preset"] = req.get("preset", "")
                self.prefixReady.emit(res)
            stats = {}
            for ev in self.backend.stream(req["messages"], req.get("tools", []), req["sampling"], cancel,
                                          self._progress, req.get("context_policy", "stop"),
                                          req.get("template_vars") or {}):
                if ev.text:
                    self.delta.emit(rid, ev.text)
                if ev.final:
                    stats = ev.stats or {}
            if cancel_event.is_set():
                stats["stop_reason"] = "stopped"
            if stats.get("restored_tokens"):
                self.chatContext.emit({"action": "restored", "tokens": stats.get("reused_tokens", 0),
                                       "restored": stats["restored_tokens"], "computed": 0,
                                       "ms": stats.get("restore_ms", 0.0)})
            if stats.get("rerendered"):
                self.chatContext.emit({"action": "rerendered", **stats["rerendered"]})
            self.finished.emit(rid, stats)
        except Exception as e:  # noqa: BLE001  engine errors become a message in the chat
            log.warning("generation failed: %s", traceback.format_exc())
            self.failed.emit(rid, _readable(e))
        self.contextChanged.emit(self.backend.context())
        self._save_chat()   # the reply is shown; saving its positions delays only the next request
        self.idle.emit()

    @Slot(object)
    def open_chat(self, req: dict) -> None:
        """A chat was opened: save the one resident, restore this one's context, compute the rest."""
        stale = req.get("stale") or (lambda: False)
        if self._shutdown.is_set() or not self._ready() or stale():
            self.idle.emit()
            return
        cancel = lambda: self._shutdown.is_set() or stale()  # noqa: E731
        try:
            self._saved(self.backend.switch_chat(req.get("chat")))
            if req.get("messages"):
                res = self.backend.prepare_prefix(req.get("system", ""), req.get("tools", []), self._progress,
                                                  req.get("label"), cancel)
                if res is not None:
                    res["preset"] = req.get("preset", "")
                    self.prefixReady.emit(res)
                got = self.backend.open_chat(req["messages"], req.get("tools", []), self._progress, cancel)
                if got is not None and got.get("action") != "resident":
                    self.chatContext.emit(got)
        except Exception as e:  # noqa: BLE001  a context that cannot be restored is computed on Send
            log.warning("opening a chat's context failed: %s", traceback.format_exc())
            self.failed.emit(-1, _readable(e))
        self.contextChanged.emit(self.backend.context())
        self._save_chat()
        self.idle.emit()

    @Slot(str)
    def forget_chat(self, chat_id: str) -> None:
        try:
            self.backend.forget_chat(chat_id)
        except Exception:  # noqa: BLE001  the cap removes what is left
            log.warning("removing a chat's context failed: %s", traceback.format_exc())

    def _save_chat(self) -> None:
        try:
            self._saved(self.backend.save_chat())
        except Exception as e:  # noqa: BLE001  an unsaved context costs a recompute, nothing else
            log.warning("saving the chat context failed: %s", traceback.format_exc())
            self._saved({"saved": False, "error": _readable(e), "bytes": 0, "tokens": 0, "ms": 0.0})

    def _saved(self, report: dict | None) -> None:
        if report is not None:
            self.chatContext.emit({"action": "saved", **report})

    @Slot(object)
    def count_tokens(self, req: dict) -> None:
        """Not a request the client waits for: no `idle` (a count never makes the app busy)."""
        if self._shutdown.is_set() or (req.get("latest") and req["seq"] != req["latest"]()):
            return   # a newer draft is queued behind this one
        try:
            res = self.backend.count_tokens(req["messages"], req.get("tools", []), req["text"])
        except Exception:  # noqa: BLE001  a count is advice: the send itself reports real errors
            log.warning("token count failed: %s", traceback.format_exc())
            res = {}
        self.tokensCounted.emit({**res, "seq": req["seq"], "tag": req.get("tag", "")})

    @Slot()
    def close_backend(self) -> None:
        """Connected directly to QThread.finished, which the worker thread emits as it ends: the
        engine is closed on the thread that used it, never on the GUI thread. The resident chat's
        unsaved positions are saved first (atomically: a quit that cannot wait leaves a temporary
        file, never a damaged segment)."""
        self._save_chat()
        try:
            self.backend.close()
        except Exception:  # noqa: BLE001
            log.warning("backend close failed: %s", traceback.format_exc())

    @Slot(str)
    def cache(self, op: str) -> None:
        try:
            if op == "clear":
                self.backend.clear_cache()
            elif op.startswith("cap:"):
                self.backend.set_cache_cap(int(op[4:]))
            self.cacheListed.emit(self.backend.cache_images())
        except Exception as e:  # noqa: BLE001
            log.warning("cache listing failed: %s", traceback.format_exc())
            self.cacheListed.emit({"images": [], "total": 0, "cap": 0, "error": _readable(e)})

    def _ready(self) -> bool:
        return getattr(self.backend, "engine", True) is not None


def _readable(e: Exception) -> str:
    from hearth.engine import ContextFullError, EngineError
    if isinstance(e, ContextFullError) and e.n_ctx:      # the engine's words are the server's
        return (f"{e.resident + e.new:,} tokens do not fit in the context length ({e.n_ctx:,} tokens). Start "
                "a new chat, shorten the preset's system prompt, or choose a larger context length in "
                "Settings → Context length….")
    if isinstance(e, EngineError):   # a ContextFullError says what the user can do
        return str(e)
    if isinstance(e, (OSError, ValueError)):
        return str(e) or type(e).__name__
    return f"Internal error ({type(e).__name__}: {e}). The app is still usable; details are in the log."


def _shutdown_at_exit(ref) -> None:
    client = ref()
    if client is not None:
        try:
            client.shutdown()
        except RuntimeError:   # its Qt object is already gone (and with it the thread)
            pass


class EngineClient(QObject):
    """GUI-thread handle on the worker thread. Call its methods; connect to `worker`'s signals.

    Signals:
        busyChanged(bool): a request is running (or queued) / all done.
    """

    busyChanged = Signal(bool)
    _loadRequested = Signal(object)
    _prefixRequested = Signal(object)
    _generateRequested = Signal(object)
    _cacheRequested = Signal(str)
    _openRequested = Signal(object)
    _forgetRequested = Signal(str)
    _countRequested = Signal(object)
    _warmRequested = Signal()

    def __init__(self, backend: ChatBackend, parent=None):
        super().__init__(parent)
        self._shutdown = threading.Event()
        self._cancel = threading.Event()
        self._pending = 0
        self._next_id = 0
        self.thread = QThread()
        self.thread.setObjectName("engineThread")
        self.worker = EngineWorker(backend, self._shutdown)
        self.worker.moveToThread(self.thread)
        # Signals across threads with an object living in the other thread are queued.
        self._loadRequested.connect(self.worker.load_model)
        self._prefixRequested.connect(self.worker.prepare_prefix)
        self._generateRequested.connect(self.worker.generate)
        self._cacheRequested.connect(self.worker.cache)
        self._openRequested.connect(self.worker.open_chat)
        self._forgetRequested.connect(self.worker.forget_chat)
        self._epoch = 0   # bumped by every open/generate: an open request older than the latest is skipped
        self._countRequested.connect(self.worker.count_tokens)
        self._count_seq = 0
        self._warmRequested.connect(self.worker.warm_up)
        self.worker.idle.connect(self._on_idle)
        self.thread.finished.connect(self.worker.close_backend, Qt.ConnectionType.DirectConnection)
        self.thread.start()
        self._warmRequested.emit()
        # However the window goes away (closed, dropped, the interpreter exiting), the thread is stopped
        # before Qt destroys it: a QThread destroyed while it runs aborts the process.
        ref = weakref.ref(self)
        atexit.register(_shutdown_at_exit, ref)

    @property
    def busy(self) -> bool:
        return self._pending > 0

    def _queued(self) -> None:
        self._pending += 1
        if self._pending == 1:
            self.busyChanged.emit(True)

    def _on_idle(self) -> None:
        self._pending = max(0, self._pending - 1)
        if self._pending == 0:
            self.busyChanged.emit(False)

    def load_model(self, path: str, backend: str, n_ctx: int, kv_dtype: str = "f32") -> None:
        self._queued()
        self._loadRequested.emit({"path": path, "backend": backend, "n_ctx": n_ctx, "kv_dtype": kv_dtype})

    def prepare_prefix(self, preset_id: str, system: str, tools: list, label: str = "") -> None:
        self._queued()
        self._prefixRequested.emit({"preset": preset_id, "system": system, "tools": tools, "label": label})

    def generate(self, messages: list[dict], tools: list, sampling: dict, system: str = "",
                 preset_id: str = "", label: str = "", context_policy: str = "stop",
                 template_vars: dict | None = None, chat: dict | None = None) -> int:
        """`chat` ({"id", "title"}) names the conversation, whose context is saved after the reply."""
        self._epoch += 1
        self._next_id += 1
        self._cancel = threading.Event()
        self._queued()
        self._generateRequested.emit({"id": self._next_id, "messages": messages, "tools": tools,
                                      "sampling": sampling, "system": system, "preset": preset_id, "label": label,
                                      "context_policy": context_policy, "template_vars": dict(template_vars or {}),
                                      "cancel": self._cancel, "chat": chat})
        return self._next_id

    def open_chat(self, chat: dict, messages: list[dict], tools: list, system: str = "", preset_id: str = "",
                  label: str = "") -> None:
        """The chat `chat` ({"id", "title"}) is shown: bring its context back (from disk if saved)."""
        self._epoch += 1
        epoch = self._epoch
        self._queued()
        self._openRequested.emit({"chat": chat, "messages": messages, "tools": tools, "system": system,
                                  "preset": preset_id, "label": label, "stale": lambda: self._epoch != epoch})

    def forget_chat(self, chat_id) -> None:
        self._forgetRequested.emit(str(chat_id))

    def count_tokens(self, messages: list[dict], tools: list, text: str) -> int:
        """Count a draft's tokens on the worker; the answer is `worker.tokensCounted` with this seq."""
        self._count_seq += 1
        self._countRequested.emit({"seq": self._count_seq, "messages": messages, "tools": tools, "text": text,
                                   "latest": lambda: self._count_seq})
        return self._count_seq

    def count_text(self, text: str, tag: str) -> None:
        """Count the tokens of `text` alone (an attachment); the answer carries `tag`."""
        self._countRequested.emit({"seq": -1, "tag": tag, "messages": [], "tools": [], "text": text})

    def stop(self) -> None:
        """Ask the reply in progress to end after the current token (thread-safe: only sets a flag)."""
        self._cancel.set()

    def list_cache(self) -> None:
        self._cacheRequested.emit("list")

    def clear_cache(self) -> None:
        self._cacheRequested.emit("clear")

    def set_cache_cap(self, cap_bytes: int) -> None:
        """Change the prefix cache's size cap (evicting at once); the listing comes back after."""
        self._cacheRequested.emit(f"cap:{int(cap_bytes)}")

    def shutdown(self, timeout_ms: int = 20000) -> bool:
        """Stop generation, end the thread's event loop and wait for it. True if it ended in time."""
        self._shutdown.set()
        self._cancel.set()
        self.thread.quit()
        return self.thread.wait(timeout_ms)
