"""Continuing a conversation after tool calls, in the message shapes Hugging Face chat templates read.

    {"role": "assistant", "content": "<text>",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "calculator", "arguments": {"expression": "23*47"}}}]}
    {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "1081"}

`arguments` is a dict, not a JSON string: templates apply `tojson` to it themselves. `content` is
always a string (never None), because simple templates concatenate it.

The messages are the same for every tool format. A template with no tool support ("generic")
renders only `content` and would drop `tool_calls`; writing the calls into the text for it is the
one job of engine/chat/chat_turn.template_messages, which every prompt goes through. Copying the
raw text here as well showed such a model each call twice. A malformed call has no valid name and
arguments to put in `tool_calls`; its raw text stays in the content and its error goes back as a
`tool` message with its id.
"""

from __future__ import annotations

from typing import Sequence

from .parser import MalformedToolCall, ToolCall
from .registry import ToolResult, error_result


def messages_with_tool_round(messages: Sequence[dict], assistant_text: str,
                             calls: Sequence[ToolCall | MalformedToolCall],
                             results: Sequence[ToolResult | str | None],
                             format: str = "hermes") -> list[dict]:
    """`messages` plus the assistant's turn with its calls and one `tool` message per call.

    `assistant_text` is the visible text of the reply (outside the calls); `results[i]` answers
    `calls[i]` (None for a malformed call: its error result is used). `format` does not change
    the messages (see the module's note); callers name the format they parsed with.
    """
    if len(calls) != len(results):
        raise ValueError(f"{len(calls)} calls but {len(results)} results: give one result per call")
    content = assistant_text or ""
    raw_in_content = [c for c in calls if isinstance(c, MalformedToolCall)]
    if raw_in_content:
        raws = "\n".join(c.raw for c in raw_in_content)
        content = f"{content.rstrip()}\n{raws}" if content.strip() else raws
    assistant: dict = {"role": "assistant", "content": content}
    tool_calls = [{"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": dict(c.arguments)}}
                  for c in calls if isinstance(c, ToolCall)]
    if tool_calls:
        assistant["tool_calls"] = tool_calls
    out = [dict(m) for m in messages] + [assistant]
    for call, result in zip(calls, results):
        if result is None:
            if not isinstance(call, MalformedToolCall):
                raise ValueError(f"no result for the call {call.id} to {call.name}")
            result = error_result(call)
        text = result.content if isinstance(result, ToolResult) else str(result)
        name = call.name if call.name is not None else "invalid_tool_call"
        out.append({"role": "tool", "tool_call_id": call.id, "name": name, "content": text})
    return out
