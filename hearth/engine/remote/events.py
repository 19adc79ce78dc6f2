"""What a remote reply yields: the Engine's event and stats shapes plus what only a server reports,
and the tool calls of a reply as engine.tools objects."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

from ..generation import GenerationEvent, GenerationStats
from ..tools import MalformedToolCall, ToolCall, ToolSchemaError, validate_arguments, validate_tool_set

# OpenAI finish_reason -> the engine's stop_reason vocabulary.
STOP_REASONS = {"stop": "eog", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls"}


@dataclass
class RemoteModel:
    id: str
    owned_by: str = ""
    created: int = 0
    meta: dict = field(default_factory=dict)   # the server's whole entry


@dataclass
class RemoteStats(GenerationStats):
    prompt_tokens: int = 0        # usage.prompt_tokens (0 when the server sent no usage)
    completion_tokens: int = 0    # usage.completion_tokens, else the number of streamed deltas
    finish_reason: str = ""       # the server's own word
    model: str = ""
    speed_from: str = "client"    # "server": its timings (llama.cpp, Hearth); "client": measured here
    total_s: float = 0.0


@dataclass
class RemoteEvent(GenerationEvent):
    tool_calls: list = field(default_factory=list)   # final only: ToolCall | MalformedToolCall
    reasoning: str = ""          # the part of `text` that is the model's thinking, without the tags


def cancelled_event(stats: RemoteStats) -> RemoteEvent:
    return RemoteEvent("", None, final=True, stop_reason="cancelled", stats=stats)


def tool_calls_from_wire(calls: Sequence[dict], tools) -> list:
    """Complete OpenAI tool calls -> engine.tools ToolCall (valid) or MalformedToolCall (arguments
    that are not a JSON object, an unknown tool, arguments failing the tool's schema)."""
    try:
        params = {d["function"]["name"]: d["function"]["parameters"] for d in validate_tool_set(list(tools or []))}
    except ToolSchemaError:
        params = {}
    out = []
    for i, c in enumerate(calls):
        cid = c.get("id") or f"call_{i + 1}"
        name, raw_args = c.get("name"), c.get("arguments", "")
        raw = json.dumps({"name": name, "arguments": raw_args}, ensure_ascii=False)
        try:
            args = json.loads(raw_args) if raw_args.strip() else {}
        except ValueError:
            out.append(MalformedToolCall(cid, raw, f"the arguments of {name} are not valid JSON", name))
            continue
        if not isinstance(args, dict):
            out.append(MalformedToolCall(cid, raw, f"the arguments of {name} must be a JSON object", name))
            continue
        if params and name not in params:
            out.append(MalformedToolCall(cid, raw, f"there is no tool named {name!r}", name))
            continue
        errors = validate_arguments(args, params[name]) if name in params else []
        if errors:
            out.append(MalformedToolCall(cid, raw, f"wrong arguments for {name}: " + "; ".join(errors), name))
            continue
        out.append(ToolCall(cid, name, args, raw))
    return out
