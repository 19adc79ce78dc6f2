"""Remote chat sources: an OpenAI-compatible server behind the app's ChatBackend interface.
Qt-free; called only from the engine worker thread.

A remote model is named by a path string, so the window's model flow (picker data, settings'
`model/path`, `load_model(path)`) carries it unchanged:

    remote:<base url>#<model id>          remote:http://127.0.0.1:8080/v1#SmolLM2-135M-Instruct.Q4_1

`RoutingBackend` is what the worker drives: a remote path loads `RemoteBackend`, anything else
`LocalBackend`. The local engine stays loaded while a remote model is in use (the serve toggle
shares it, and switching back is then a reload like any other), and the cache panel always talks
to the local prefix store. A failed load leaves the previous backend active.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..chat_source import ChatBackend, LocalBackend, ModelInfo, StreamEvent

SCHEME = "remote:"
# Where servers put the context size in GET /v1/models: Hearth "n_ctx", vLLM "max_model_len",
# LM Studio "max_context_length", llama.cpp's meta "n_ctx_train".
_CTX_FIELDS = ("n_ctx", "max_model_len", "max_context_length", "context_length")


def remote_path(url: str, model: str) -> str:
    return f"{SCHEME}{url}#{model}"


def parse_remote_path(path: str | None) -> tuple[str, str] | None:
    """(base url, model id) of a remote path, None for anything else (a file, '' = the default)."""
    if not path or not path.startswith(SCHEME):
        return None
    url, sep, model = path[len(SCHEME):].partition("#")
    return (url, model) if sep and url and model else None


def host_of(url: str) -> str:
    """'http://127.0.0.1:8080/v1' -> '127.0.0.1:8080' (for labels)."""
    return url.split("://", 1)[-1].split("/", 1)[0]


def tool_call_dicts(calls) -> list[dict]:
    """hearth.engine.tools ToolCall / MalformedToolCall -> JSON-able dicts in the OpenAI shape (stored with
    the reply's stats), a malformed call with its `error`."""
    import json
    out = []
    for c in calls or []:
        if hasattr(c, "arguments"):
            out.append({"id": c.id, "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}})
        else:
            out.append({"id": c.id, "type": "function", "function": {"name": c.name or "", "arguments": c.raw},
                        "error": c.error})
    return out


def remote_tool_calls(wire: list | None, tools) -> list:
    """The calls `tool_call_dicts` put in a remote reply's stats -> engine.tools ToolCall /
    MalformedToolCall objects again (checked against the preset's tools), for the app's tool flow."""
    if not wire:
        return []
    from hearth.engine.remote import tool_calls_from_wire
    from hearth.engine.tools import MalformedToolCall
    out = []
    for c in wire:
        fn = c.get("function") or {}
        if c.get("error"):
            out.append(MalformedToolCall(c.get("id") or "", fn.get("arguments", ""), c["error"], fn.get("name") or None))
        else:
            out += tool_calls_from_wire([{"id": c.get("id"), "name": fn.get("name"),
                                          "arguments": fn.get("arguments", "")}], tools)
    return out


class RemoteBackend(ChatBackend):
    """One model on one OpenAI-compatible server, through engine.remote's RemoteClient.

    `key_for(url)` gives the API key for a server (or None); it is called on the worker thread at
    load, so it must be thread-safe (app.remote_servers.KeyStore.get is)."""

    kind = "remote"

    def __init__(self, key_for: Callable[[str], str | None] = lambda url: None, timeout: float = 120.0):
        self.key_for = key_for
        self.timeout = timeout       # the longest silence from the server, in seconds, before a reply fails
        self.client = None
        self.url = ""
        self.model = ""
        self.info: ModelInfo | None = None
        self._used = 0

    def load(self, path, backend, n_ctx, progress, kv_dtype="f32") -> ModelInfo:
        from hearth.engine.remote import RemoteClient, RemoteError
        parsed = parse_remote_path(path)
        if parsed is None:
            raise RemoteError(f"{path!r} does not name a remote model (remote:<url>#<model>)")
        url, model = parsed
        progress(f"Connecting to {host_of(url)}", 0, 0)
        t0 = time.perf_counter()
        client = RemoteClient(url, self.key_for(url) or None, timeout=self.timeout)
        try:
            models = client.models()
        except BaseException:
            client.close()
            raise
        found = next((m for m in models if m.id == model), None)
        if found is None:
            client.close()
            have = ", ".join(m.id for m in models[:8]) or "none"
            raise RemoteError(f"{client.base_url} does not list the model {model!r} (it has: {have}); choose "
                              "another in Remote server…", client.base_url)
        old, self.client = self.client, client
        if old is not None:
            old.close()
        self.url, self.model, self._used = client.base_url, model, 0
        meta = found.meta or {}
        ctx = next((meta[k] for k in _CTX_FIELDS if isinstance(meta.get(k), int)), None)
        if ctx is None and isinstance(meta.get("meta"), dict):
            ctx = meta["meta"].get("n_ctx_train")
        self.info = ModelInfo(path, model, arch="remote", n_ctx=int(ctx or 0), backend="remote",
                              adapter=f"server {client.base_url}", load_s=time.perf_counter() - t0)
        return self.info

    def stream(self, messages, tools, sampling, cancel, progress=None, policy="stop", template_vars=None):
        s = dict(sampling)
        max_tokens = int(s.pop("max_tokens", 512) or 512)
        reply = self.client.chat(messages, self.model, tools=tools or None, sampling=s, max_tokens=max_tokens,
                                 cancel=cancel)
        try:
            for ev in reply:
                if not ev.final:
                    if ev.text:
                        yield StreamEvent(ev.text)
                    continue
                yield StreamEvent(ev.text or "", True, self._stats(ev))
        finally:
            reply.close()

    def _stats(self, ev) -> dict:
        st = ev.stats
        stats = {"stop_reason": str(ev.stop_reason or ""), "generated_tokens": int(st.generated_tokens),
                 "ttft_s": float(st.ttft_s), "decode_tps": float(st.decode_tps), "remote": host_of(self.url),
                 "speed_from": st.speed_from}
        if st.prefill_tps:
            stats["prefill_tps"] = float(st.prefill_tps)
        if st.prompt_tokens:   # the server sent usage: what its prefix cache reused
            stats.update(prompt_tokens=int(st.prompt_tokens), reused_tokens=int(st.reused_tokens),
                         computed_tokens=int(st.computed_tokens))
            self._used = int(st.prompt_tokens) + int(st.completion_tokens)
        if ev.tool_calls:
            # JSON-able, to cross the worker's signal; the Conversation gives them to the tool flow
            # (remote_tool_calls), which confirms and runs them and continues the reply.
            stats["tool_calls"] = tool_call_dicts(ev.tool_calls)
        return stats

    def context(self) -> dict:
        n = self.info.n_ctx if self.info else 0
        return {"used": self._used, "n_ctx": n, "kv_bytes": 0, "remote": True}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client = None


class RoutingBackend(ChatBackend):
    """The local engine and remote servers behind one backend (see the module docstring)."""

    def __init__(self, local: LocalBackend, remote: RemoteBackend):
        self.local, self.remote = local, remote
        self.active: ChatBackend = local

    @property
    def kind(self) -> str:
        return self.active.kind

    @property
    def engine(self):
        """What the worker checks before a request: None while nothing usable is loaded."""
        return self.local.engine if self.active is self.local else self.remote.client

    def load(self, path, backend, n_ctx, progress, kv_dtype="f32") -> ModelInfo:
        target = self.remote if parse_remote_path(path) else self.local
        if target is not self.local:
            self.local.save_chat()   # the local chat context stops being resident
        info = target.load(path, backend, n_ctx, progress, kv_dtype)
        self.active = target
        return info

    def prepare_prefix(self, system, tools, progress, label=None, cancel=None):
        return self.active.prepare_prefix(system, tools, progress, label, cancel)

    def stream(self, messages, tools, sampling, cancel, progress=None, policy="stop", template_vars=None):
        return self.active.stream(messages, tools, sampling, cancel, progress, policy, template_vars)

    def context(self) -> dict:
        return self.active.context()

    def switch_chat(self, chat):
        return self.active.switch_chat(chat)

    def open_chat(self, messages, tools, progress, cancel):
        return self.active.open_chat(messages, tools, progress, cancel)

    def save_chat(self):
        return self.active.save_chat()

    def forget_chat(self, chat_id) -> None:
        self.local.forget_chat(chat_id)

    def count_tokens(self, messages, tools, text) -> dict:
        return self.active.count_tokens(messages, tools, text)

    def cache_images(self) -> dict:
        return self.local.cache_images()

    def clear_cache(self) -> None:
        self.local.clear_cache()

    def set_cache_cap(self, cap_bytes: int) -> None:
        self.local.set_cache_cap(cap_bytes)

    def close(self) -> None:
        try:
            self.remote.close()
        finally:
            self.local.close()
