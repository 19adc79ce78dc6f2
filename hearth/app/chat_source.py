"""Chat sources: what the engine worker drives. Qt-free, called only from the worker thread.

A chat source (a `ChatBackend`; not to be confused with the engine's compute backends) turns
(messages, tools, sampling) into a stream of text deltas and a final stats dict, and keeps a
preset's prefix resident. `LocalBackend` runs Hearth's own engine and keeps prefixes as images
through the PrefixStore; `RemoteBackend` (remote_source.py: an OpenAI-compatible server) implements
the same methods, with `prepare_prefix` a no-op because the server caches prefixes itself. How a
turn becomes a prompt is engine/chat/chat_turn.py's rule, the one the server uses.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from hearth.engine.chat.chat_turn import (
    PREFILL_CHUNK,
    ChatTurn,
    prefill_in_chunks,
    prefix_ids,
    prefix_text,
    prompt_ids,
    tool_format_of,
    with_prefill,
)
from hearth.engine.chat.context_policy import fit_turn
from hearth.engine.generation import common_prefix
from hearth.engine.library.file_names import display_name
from hearth.engine.chat.reasoning import has_thinking_switch, open_tag_at_end

Progress = Callable[[str, int, int], None]  # (what, done, total); total 0 = unknown


@dataclass
class ModelInfo:
    path: str
    name: str
    arch: str = ""
    params: int = 0
    quant: str = ""
    size_bytes: int = 0
    n_ctx: int = 0
    backend: str = ""            # "cpu" / "gpu" / "remote"
    kv_dtype: str = ""           # the KV cache's precision, "f32" / "f16" ("" for a remote server)
    adapter: str = ""            # what runs it, in words
    load_s: float = 0.0
    tool_format: str = "generic"  # how its template writes tool calls: hermes / llama3 / generic
    thinking_switch: bool = False  # its template takes enable_thinking
    software_renderer: bool = False  # the GPU backend on a CPU rasterizer (lavapipe): slower than the CPU backend

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class StreamEvent:
    text: str = ""
    final: bool = False
    stats: dict | None = None    # on the final event: stop_reason, tokens, ttft_s, tps ...


class ChatBackend:
    """The interface the worker uses. Every method runs on the worker thread."""

    kind = "abstract"

    def load(self, path: str | None, backend: str, n_ctx: int, progress: Progress,
             kv_dtype: str = "f32") -> ModelInfo:
        """`kv_dtype`: the KV cache's precision, "f32" or "f16" (a local engine's; a server keeps its own)."""
        raise NotImplementedError

    def prepare_prefix(self, system: str, tools: list, progress: Progress, label: str | None = None,
                       cancel: Callable[[], bool] | None = None) -> dict | None:
        """Make the preset's prefix resident. Returns {"action", "ms", "tokens", "reason"} or None if
        it was already resident. `label` names the preset (shown in the cache panel)."""
        return None

    def stream(self, messages: list[dict], tools: list, sampling: dict,
               cancel: Callable[[], bool], progress: Progress | None = None,
               policy: str = "stop", template_vars: dict | None = None) -> Iterator[StreamEvent]:
        """`policy`: what to do when the conversation does not fit the context
        (engine/chat/context_policy.py); a remote server applies its own. `template_vars`: extra chat
        template variables (enable_thinking)."""
        raise NotImplementedError

    def context(self) -> dict:
        """{"used": tokens resident, "n_ctx": size, "kv_bytes": memory of the KV cache}"""
        return {"used": 0, "n_ctx": 0, "kv_bytes": 0}

    def count_tokens(self, messages: list[dict], tools: list, text: str) -> dict:
        """Tokens of a draft user message `text` after `messages`: {"message", "prompt" (the
        whole chat with it), "alone" (the system prompt and it), "n_ctx"}; {} when unknown."""
        return {}

    def cache_images(self) -> dict:
        return {"images": [], "total": 0, "cap": 0}

    # Chat contexts kept on disk (local engines only; a remote server keeps its own).
    def switch_chat(self, chat: dict | None) -> dict | None:
        """`chat` ({"id", "title"}) becomes the resident one; the previous one is saved first.
        Returns that save's report, or None."""
        return None

    def open_chat(self, messages: list[dict], tools: list, progress: Progress,
                  cancel: Callable[[], bool]) -> dict | None:
        """Restore the resident chat's saved context (and compute the rest). A report or None."""
        return None

    def save_chat(self) -> dict | None:
        """Save what is unsaved of the resident chat's context. A report or None."""
        return None

    def forget_chat(self, chat_id) -> None:
        """The chat was deleted: its saved context goes."""

    def clear_cache(self) -> None:
        pass

    def set_cache_cap(self, cap_bytes: int) -> None:
        pass

    def close(self) -> None:
        pass


def inspect_gguf(path: str | Path) -> ModelInfo:
    """Architecture, parameter count, quantization and size of a GGUF file (header only). The
    name shown is the file's (`display_name`), which users recognise, where `general.name` is
    often a training-run label."""
    from hearth.engine.gguf import GGUFFile
    from hearth.engine.library.model_facts import quant_of
    path = Path(path)
    g = GGUFFile.open(path, check_types=False)
    try:
        params = sum(int(t.n_elements) if not callable(t.n_elements) else int(t.n_elements())
                     for t in g.tensors.values())
        return ModelInfo(str(path), display_name(path.name), g.architecture, params, quant_of(g) or "?",
                         g.file_size)
    finally:
        g.close()


def human_params(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n else "?"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _percent(progress: Progress, label: str) -> Callable[[float, str], None]:
    """The engine's load progress (a fraction) as `progress(label, percent, 100)`, once per percent."""
    last = [0]

    def report(fraction: float, what: str) -> None:
        pct = max(1, min(100, round(100 * fraction)))
        if pct != last[0]:
            last[0] = pct
            progress(label, pct, 100)
    return report


class LocalBackend(ChatBackend):
    """Hearth's own engine (CPU numpy or GPU wgpu) with prefix images from the PrefixStore."""

    kind = "local"

    def __init__(self, cache_dir: Path, cap_bytes: int):
        self.engine = None
        self.info: ModelInfo | None = None
        self._store_dir = Path(cache_dir)
        self._cap = cap_bytes
        self._store = None
        self._prefix_tokens: dict[str, list[int]] = {}
        self._prefixes: dict[tuple[str, str], tuple[list[int], str]] = {}   # (system, tools) -> (ids, text)
        self._contexts = None

    # -- model ----------------------------------------------------------------------------------------
    def load(self, path, backend, n_ctx, progress, kv_dtype="f32"):
        from hearth.engine import Engine
        from hearth.engine.paths import default_model_path
        real = Path(path) if path else default_model_path()
        progress("Reading model header", 0, 0)
        info = inspect_gguf(real)               # a broken file fails here, before anything is replaced
        progress(f"Loading {info.name}", 0, 0)
        t0 = time.perf_counter()
        eng = Engine.load(path=str(real), backend=backend, n_ctx=n_ctx,
                          progress=_percent(progress, f"Loading {info.name}"), kv_dtype=kv_dtype)
        info.load_s = time.perf_counter() - t0
        self.save_chat()                        # the old engine's resident chat, before it goes
        old, self.engine = self.engine, eng
        if old is not None and hasattr(old, "close"):
            old.close()
        self._prefix_tokens.clear()
        self._prefixes.clear()
        if self._contexts is not None:   # nothing of any chat is resident in the new engine
            self._contexts.chat, self._contexts.dirty = None, False
        info.n_ctx = int(getattr(eng, "n_ctx", n_ctx))
        info.kv_dtype = eng.kv_dtype
        info.tool_format = tool_format_of(eng)
        source = eng.gguf.metadata.get("tokenizer.chat_template") if getattr(eng, "gguf", None) else None
        info.thinking_switch = has_thinking_switch(source if isinstance(source, str) else None)
        desc = _describe(eng)
        info.backend = desc.get("backend", backend)
        if info.backend == "gpu":
            info.adapter = "GPU: " + (" ".join(str(desc.get(k, "")) for k in ("vendor", "device")).strip() or "?")
            from hearth.engine.gpu import is_software_adapter
            info.software_renderer = is_software_adapter(desc)
        else:
            info.adapter = f"CPU (numpy, {os.cpu_count()} cores)"
        if desc.get("reason"):
            info.adapter += f" [auto: {desc['reason']}]"
        self.info = info
        return info

    def _prefix_store(self):
        if self._store is None:
            from hearth.engine.prefix import PrefixStore
            self._store = PrefixStore(self._store_dir, cap_bytes=self._cap)
        return self._store

    def _chat_contexts(self):
        if self._contexts is None:
            from .chat_context import ChatContexts
            self._contexts = ChatContexts(self._prefix_store())
        return self._contexts

    def switch_chat(self, chat):
        return self._chat_contexts().switch(self.engine, chat) if self.engine is not None else None

    def open_chat(self, messages, tools, progress, cancel):
        if self.engine is None or self._chat_contexts().chat is None:
            return None
        return self._contexts.restore(self.engine, messages, tools, cancel, compute=True, progress=progress)

    def save_chat(self):
        return self._contexts.save(self.engine) if self._contexts is not None else None

    def forget_chat(self, chat_id):
        self._chat_contexts().forget(chat_id)

    # -- prompts --------------------------------------------------------------------------------------
    def prefix_text(self, system: str, tools: list) -> str:
        """The chat template rendered up to the first user message: system prompt and tools."""
        msgs = [{"role": "system", "content": system}] if system else []
        return prefix_text(self.engine, msgs, tools)

    def _prefix_ids(self, text: str) -> list[int]:
        if text not in self._prefix_tokens:
            self._prefix_tokens[text] = self.engine.prefix_ids(text)
        return self._prefix_tokens[text]

    def prepare_prefix(self, system, tools, progress, label=None, cancel=None):
        """Make the preset's prefix resident through the PrefixStore. None if it already was.

        When no image exists yet, the prefix is read here in chunks (so the user sees tokens done /
        total) before `ensure`, which then finds it resident and writes the image."""
        eng = self.engine
        key = (system, json.dumps(tools, sort_keys=True, default=str))
        if key not in self._prefixes:
            self._prefixes[key] = prefix_ids(eng, system, tools, tool_format_of(eng))
        ids, text = self._prefixes[key]
        if not text:
            self._chat_contexts().prefix_ids = []
            return None
        self._chat_contexts().prefix_ids = ids
        if eng.tokens[:len(ids)] == ids:
            return None
        store = self._prefix_store()
        t0 = time.perf_counter()
        fresh = not store.image_path(eng.prefix_key(ids)).exists()
        if fresh:
            common = common_prefix(eng.tokens, ids)
            if common < len(ids) // 2:
                eng.reset()
                common = 0
            what = _computing_words(eng)
            done = prefill_in_chunks(eng, ids, cancel or (lambda: False),
                                     lambda n, _todo: progress(what, common + n, len(ids)))
            if done is None:
                return None   # quitting: the next use starts again
            progress(what, len(ids), len(ids))
            eng.prefill(ids)
            if what != PREFIX_WORDS:
                from hearth.engine.prepare import mark_prepared  # noqa: PLC0415
                mark_prepared()     # the kernels this took are compiled now: later starts say so no more
        else:
            progress("Restoring the preset prefix", 0, 0)
        res = store.ensure(eng, ids, label=label)
        ms = (time.perf_counter() - t0) * 1000
        action = "computed" if fresh and res.action == "resident" else res.action
        return {"action": action, "ms": ms, "tokens": len(ids), "reason": res.reason or "",
                "saved": bool(getattr(res, "saved", False)), "key": res.key,
                "path": str(res.path or ""), "save_error": getattr(res, "save_error", None) or ""}

    def stream(self, messages, tools, sampling, cancel, progress=None, policy="stop", template_vars=None):
        from hearth.engine import Sampling
        eng = self.engine
        s = dict(sampling)
        max_tokens = int(s.pop("max_tokens", 512))
        seed = s.pop("seed", -1)
        kw = {k: v for k, v in s.items() if k in Sampling.__dataclass_fields__}
        if "seed" in Sampling.__dataclass_fields__:
            kw["seed"] = None if seed is None or seed < 0 else int(seed)
        prompt, ids, head, dropped = fit_turn(eng, ChatTurn(messages, tools, dict(template_vars or {})),
                                              tool_format_of(eng), policy, max_tokens)
        eng.kv.check_fits(0, len(ids))
        contexts = self._chat_contexts()
        restored = contexts.restore_ids(eng, ids) if contexts.chat is not None else None
        contexts.changed()
        # what this chat's last reply left resident (the preset prefix and the chain may have been
        # restored since): the status bar says what of it the prompt recomputed, and why
        from .chat_context import rerendered  # noqa: PLC0415  (loaded by _chat_contexts already)
        chat_id = (contexts.chat or {}).get("id")
        last_id, last = getattr(self, "_last_reply", (None, []))
        rerender = rerendered(eng, last if chat_id is not None and last_id == chat_id else eng.tokens, ids)
        # A long new part of the prompt is read in chunks: progress for the user, and Stop works.
        pre = prefill_in_chunks(eng, ids, cancel, lambda n, todo: progress("Reading the prompt", n, todo),
                                min_new=2 * PREFILL_CHUNK) if progress is not None else (0, 0.0)
        if pre is None:
            yield StreamEvent("", True, {"stop_reason": "cancelled", "generated_tokens": 0})
            return
        if head:   # a begun reply streams in its tokens, as if the model wrote them
            yield from (StreamEvent(piece) for piece in _token_pieces(eng, head))
        elif open_tag_at_end(prompt):   # the template began the reply inside the thinking
            yield StreamEvent(open_tag_at_end(prompt) + "\n")
        for ev in eng.generate(ids, max_tokens=max_tokens, sampling=Sampling(**kw), cancel=cancel):
            if getattr(ev, "final", False):
                st = with_prefill(ev.stats, *pre)
                stats = {k: getattr(st, k) for k in ("reused_tokens", "computed_tokens", "generated_tokens",
                                                     "ttft_s", "prefill_tps", "decode_tps")}
                stats["stop_reason"] = str(getattr(ev, "stop_reason", ""))
                if restored is not None:
                    stats["restored_tokens"], stats["restore_ms"] = restored.restored, restored.seconds * 1000
                if dropped:
                    stats.update(dropped_messages=dropped, context_policy=policy)
                if rerender is not None:
                    stats["rerendered"] = {**rerender, "computed": int(st.computed_tokens)}
                self._last_reply = (chat_id, eng.tokens)
                stats["prompt_tokens"] = len(ids)
                stats["n_ctx"] = int(eng.n_ctx)
                stats["backend"] = self.info.backend if self.info else ""
                yield StreamEvent(ev.text or "", True, stats)
            elif ev.text:
                yield StreamEvent(ev.text)

    def count_tokens(self, messages, tools, text):
        eng = self.engine
        if eng is None:
            return {}
        fmt = tool_format_of(eng)
        user = {"role": "user", "content": text}
        system = [m for m in messages[:1] if m.get("role") == "system"]

        def n(msgs: list[dict]) -> int:
            return len(prompt_ids(eng, ChatTurn(msgs, tools), fmt)[0])
        return {"message": len(eng.tokenizer.encode(text, add_special=False, parse_special=False)), "prompt": n(list(messages) + [user]),
                "alone": n(system + [user]), "n_ctx": int(eng.n_ctx)}

    def context(self):
        eng = self.engine
        if eng is None:
            return {"used": 0, "n_ctx": 0, "kv_bytes": 0}
        return {"used": len(eng.tokens), "n_ctx": int(eng.n_ctx), "kv_bytes": int(eng.kv.nbytes)}

    # -- cache panel ----------------------------------------------------------------------------------
    def cache_images(self):
        store = self._prefix_store()
        entries = store.entries()
        images = [{"key": e.key, "path": str(e.path), "size": int(e.size), "last_used": float(e.last_used),
                   "tokens": e.n_tokens or 0,
                   "model": display_name(Path(e.model_path).name) if e.model_path else (e.model_name or ""),
                   "preset": e.label or ""} for e in entries if e.kind == "preset"]
        chats = [{**c, "model": display_name(Path(c["model_path"]).name) if c["model_path"] else c["model_name"]}
                 for c in self._chat_contexts().rows()]
        return {"images": images, "chats": chats, "total": sum(e.size for e in entries), "cap": store.cap_bytes}

    def clear_cache(self):
        self._prefix_store().clear()

    def set_cache_cap(self, cap_bytes: int) -> None:
        """A new cap; the least recently used images go at once if the total is over it."""
        self._cap = int(cap_bytes)
        store = self._prefix_store()
        store.cap_bytes = self._cap
        store.evict()

    def close(self):
        if self.engine is not None and hasattr(self.engine, "close"):
            self.engine.close()
        self.engine = None


def _token_pieces(eng, text: str) -> Iterator[str]:
    """`text` in the pieces its tokens decode to (utf-8 sequences split across tokens held back)."""
    dec = eng.tokenizer.stream_decoder()
    for tid in eng.tokenizer.encode(text, add_special=False, parse_special=True):
        piece = dec.feed(tid)
        if piece:
            yield piece
    rest = dec.flush()
    if rest:
        yield rest


PREFIX_WORDS = "Computing the preset prefix"


def _computing_words(eng) -> str:
    """On the CPU with kernels not compiled yet (no set-up ran `hearth.engine.prepare`), the wait
    is mostly compiling, once: say so."""
    if _describe(eng).get("backend") != "cpu":
        return PREFIX_WORDS
    from hearth.engine.prepare import SAY, prepared  # noqa: PLC0415
    return PREFIX_WORDS if prepared() else f"{SAY} computing the preset prefix"


def _describe(eng) -> dict:
    info = getattr(eng, "backend_info", None)
    if isinstance(info, dict) and info:
        return info
    for obj in (eng, getattr(eng, "backend", None)):
        fn = getattr(obj, "describe", None)
        if callable(fn):
            try:
                d = fn()
                if isinstance(d, dict):
                    return d
            except Exception:  # noqa: BLE001  (a description is cosmetic)
                pass
    return {}


