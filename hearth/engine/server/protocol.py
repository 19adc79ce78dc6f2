"""The OpenAI chat-completions wire format: a request checked into a `ChatRequest`, messages turned
into what chat templates read, and the response bodies and stream chunks built from engine events.

Nothing here does I/O or touches the engine, so all of it is tested without a model.

Wire shapes (the subset of https://platform.openai.com/docs/api-reference/chat Hearth serves):

    request   {"model", "messages": [{"role": "system"|"user"|"assistant"|"tool", "content", ...}],
               "tools"?, "tool_choice"? ("auto"|"none"), "stream"?, "stream_options"? {"include_usage"},
               "temperature"?, "top_p"?, "max_tokens"?|"max_completion_tokens"?, "seed"?, "stop"?,
               "presence_penalty"?, "frequency_penalty"?, "n"? (1 only)}
    reply     {"id", "object": "chat.completion", "created", "model",
               "choices": [{"index": 0, "message": {"role": "assistant", "content", "tool_calls"?},
                            "finish_reason": "stop"|"length"|"tool_calls"}],
               "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
                         "prompt_tokens_details": {"cached_tokens"}},
               "timings": {...}}      # llama.cpp's field: prompt and decode speed, read by engine.remote
    chunk     {"id", "object": "chat.completion.chunk", "created", "model",
               "choices": [{"index": 0, "delta": {...}, "finish_reason": null|...}]}

Template messages differ from wire messages in one place: a call's `arguments` is a JSON *string*
on the wire and a dict for templates (they apply `tojson` themselves; see engine.tools.conversation).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from ..sampling import Sampling
from ..tools import ToolSchemaError, validate_tool_set

ROLES = ("system", "user", "assistant", "tool", "developer")
MAX_STOPS = 4
MAX_DEPTH = 64     # JSON nesting; tool schemas, the deepest thing a request carries, need far less

# Engine stop reasons -> OpenAI finish_reason. "cancelled" never reaches a client (it left).
FINISH_REASONS = {"eog": "stop", "stop": "stop", "length": "length", "context_full": "length",
                  "cancelled": "stop"}


class RequestError(Exception):
    """A request the server refuses: HTTP `status`, OpenAI error `type` and `code`, and a message
    that names the field and the fix."""

    def __init__(self, message: str, status: int = 400, code: str | None = None,
                 type: str = "invalid_request_error", param: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.code, self.type, self.param = status, code, type, param
        self.retry_after = retry_after      # seconds, sent as Retry-After (503: the server is busy)

    def body(self) -> dict:
        return error_body(str(self), self.type, self.code, self.param)


def error_body(message: str, type: str = "invalid_request_error", code: str | None = None,
               param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass
class ChatRequest:
    model: str | None
    messages: list[dict]           # template shapes: arguments as dicts, content always a string
    tools: list[dict] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None  # None: until the context is full
    stop: list[str] = field(default_factory=list)
    sampling: Sampling = field(default_factory=Sampling)


def parse_chat_request(body: bytes) -> ChatRequest:
    """Check a POST /v1/chat/completions body. Raises RequestError (400) naming the bad field."""
    try:
        d = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"the request body is not valid JSON ({e})", code="invalid_json") from None
    except RecursionError:
        raise RequestError(f"the request body nests deeper than {MAX_DEPTH} levels", code="invalid_json") from None
    if not isinstance(d, dict):
        raise RequestError("the request body must be a JSON object")
    for key, value in d.items():
        if _too_deep(value, MAX_DEPTH - 1):
            raise RequestError(f"'{key}' nests deeper than {MAX_DEPTH} levels", param=key)
    bad = _lone_surrogate(d)
    if bad is not None:
        raise RequestError(f"'{bad}' holds a lone surrogate (half of a UTF-16 pair, such as \\ud800): it is "
                           "no character; send the whole pair or the character itself", param=bad)
    model = d.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string", param="model")
    n = d.get("n", 1)
    if n != 1:
        raise RequestError("'n' must be 1: Hearth generates one choice per request", param="n")
    tools = d.get("tools") or []
    choice = d.get("tool_choice", "auto")
    if choice not in ("auto", "none", None):
        raise RequestError("'tool_choice' must be \"auto\" or \"none\": Hearth cannot force a tool call",
                           param="tool_choice")
    if tools:
        try:
            tools = validate_tool_set(tools)
        except ToolSchemaError as e:
            raise RequestError(f"'tools': {e}", param="tools") from None
    if choice == "none":
        tools = []
    messages = wire_to_template_messages(d.get("messages"))
    opts = d.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise RequestError("'stream_options' must be an object", param="stream_options")
    stream = _flag(d, "stream")
    include_usage = _flag(opts, "include_usage", "stream_options.include_usage")
    max_tokens = d.get("max_completion_tokens", d.get("max_tokens"))
    if max_tokens is not None:
        max_tokens = _number(d, "max_tokens" if "max_tokens" in d else "max_completion_tokens", int, 1, 1 << 24)
    stop = d.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > MAX_STOPS:
        raise RequestError(f"'stop' must be a string or a list of at most {MAX_STOPS} strings", param="stop")
    return ChatRequest(model=model, messages=messages, tools=list(tools), stream=stream,
                       include_usage=include_usage, max_tokens=max_tokens, stop=stop,
                       sampling=sampling_from_request(d))


def _flag(d: dict, key: str, name: str | None = None) -> bool:
    """A true/false field: JSON booleans only, so that "false" (a string) is not taken for true."""
    v = d.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise RequestError(f"'{name or key}' must be true or false, not {json.dumps(v)[:40]}", param=name or key)
    return v


def _too_deep(value, depth_left: int) -> bool:
    """Whether `value` nests more than `depth_left` more levels (iterative: no recursion to exhaust)."""
    stack = [(value, depth_left)]
    while stack:
        v, left = stack.pop()
        if isinstance(v, (dict, list)):
            if left <= 0:
                return True
            stack.extend((c, left - 1) for c in (v.values() if isinstance(v, dict) else v))
    return False


def _lone_surrogate(value) -> str | None:
    """The path (`messages[0].content`) of the first string, or key, in `value` that holds a lone
    surrogate, which has no UTF-8 form; None when there is none. The body is already known to nest
    at most MAX_DEPTH levels."""
    stack = [(value, "")]
    while stack:
        v, path = stack.pop()
        if isinstance(v, str):
            if not _encodable(v):
                return path
        elif isinstance(v, dict):
            for k, c in reversed(list(v.items())):
                sub = f"{path}.{k}" if path else str(k)
                if not _encodable(k):
                    return path or "(a key)"
                stack.append((c, sub))
        elif isinstance(v, list):
            stack.extend((c, f"{path}[{i}]") for i, c in reversed(list(enumerate(v))))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def sampling_from_request(d: dict) -> Sampling:
    """OpenAI's sampling fields over Hearth's defaults. Temperature 0 is greedy."""
    s = Sampling()
    if d.get("temperature") is not None:
        s.temperature = _number(d, "temperature", float, 0.0, 2.0)
    if d.get("top_p") is not None:
        s.top_p = _number(d, "top_p", float, 0.0, 1.0)
    if d.get("presence_penalty") is not None:
        s.presence_penalty = _number(d, "presence_penalty", float, -2.0, 2.0)
    if d.get("frequency_penalty") is not None:
        s.frequency_penalty = _number(d, "frequency_penalty", float, -2.0, 2.0)
    if d.get("seed") is not None:
        s.seed = _number(d, "seed", int, -(1 << 63), (1 << 64) - 1) % (1 << 63)
    if s.temperature <= 0.0:
        s.top_k, s.top_p, s.min_p = 0, 1.0, 0.0
    return s


def _number(d: dict, key: str, kind: type, lo: float, hi: float):
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and v != int(v)):
        raise RequestError(f"'{key}' must be {'a whole number' if kind is int else 'a number'}", param=key)
    if not lo <= v <= hi:
        raise RequestError(f"'{key}' is {v}, outside {lo:g}..{hi:g}", param=key)
    return kind(v)


def wire_to_template_messages(messages) -> list[dict]:
    """OpenAI messages -> the shapes chat templates read: `content` a string (text parts joined),
    assistant `tool_calls` with dict arguments, tool results with `tool_call_id` and `name`."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of messages", param="messages")
    out, names = [], {}
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(f"{where} must be an object", param="messages")
        role = m.get("role")
        if role not in ROLES:
            raise RequestError(f"{where}.role is {role!r}; use one of {', '.join(ROLES)}", param="messages")
        msg = {"role": "system" if role == "developer" else role, "content": _content(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = [_call_from_wire(c, f"{where}.tool_calls[{j}]")
                                 for j, c in enumerate(_list(m["tool_calls"], f"{where}.tool_calls"))]
            for c in msg["tool_calls"]:
                names[c["id"]] = c["function"]["name"]
        if role == "tool":
            cid = m.get("tool_call_id")
            if not isinstance(cid, str):
                raise RequestError(f"{where}: a tool message needs its 'tool_call_id'", param="messages")
            msg["tool_call_id"] = cid
            msg["name"] = m.get("name") if isinstance(m.get("name"), str) else names.get(cid, "tool")
        elif isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        out.append(msg)
    return out


def _list(v, where: str) -> list:
    if not isinstance(v, list):
        raise RequestError(f"{where} must be a list", param="messages")
    return v


def _content(c, where: str) -> str:
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        parts = []
        for p in c:
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str):
                parts.append(p["text"])
            else:
                kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                raise RequestError(f"{where}.content: a part of type {kind!r} cannot be read; Hearth's "
                                   "models take text only", param="messages")
        return "".join(parts)
    raise RequestError(f"{where}.content must be a string or a list of text parts", param="messages")


def _call_from_wire(c, where: str) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RequestError(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\", "
                           "\"arguments\"}}}}", param="messages")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise RequestError(f"{where}.function.arguments is a string that is not JSON",
                               param="messages") from None
    if not isinstance(args, dict):
        raise RequestError(f"{where}.function.arguments must be a JSON object", param="messages")
    cid = c.get("id") if isinstance(c.get("id"), str) else f"call_{uuid.uuid4().hex[:8]}"
    return {"id": cid, "type": "function", "function": {"name": fn["name"], "arguments": args}}


def tool_call_to_wire(call, index: int) -> dict:
    """An engine.tools ToolCall as an OpenAI tool call (arguments as a JSON string)."""
    return {"index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}


# --- replies -----------------------------------------------------------------------------------------

def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def timings(stats) -> dict:
    """llama.cpp's `timings` object from GenerationStats: remote clients read speeds from it."""
    return {"prompt_n": stats.computed_tokens, "prompt_ms": stats.prefill_s * 1000,
            "prompt_per_second": stats.prefill_tps, "cache_n": stats.reused_tokens,
            "predicted_n": stats.generated_tokens, "predicted_ms": stats.decode_s * 1000,
            "predicted_per_second": stats.decode_tps}


def completion_body(cid: str, created: int, model: str, content: str, tool_calls: list[dict],
                    finish_reason: str, usage_: dict, timings_: dict) -> dict:
    message: dict = {"role": "assistant", "content": content if content or not tool_calls else None}
    if tool_calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in tool_calls]
    return {"id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": usage_, "timings": timings_}


def chunk_body(cid: str, created: int, model: str, delta: dict, finish_reason: str | None = None,
               **extra) -> dict:
    body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
    body.update(extra)
    return body


def usage_chunk_body(cid: str, created: int, model: str, usage_: dict) -> dict:
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [], "usage": usage_}


def models_body(model_id: str, created: int, owned_by: str = "hearth", **meta) -> dict:
    return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created,
                                        "owned_by": owned_by, **meta}]}


def now() -> int:
    return int(time.time())
