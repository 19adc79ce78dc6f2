"""The system-prompt text that teaches a model with no tool support in its chat template how to
call tools (the "generic" format that parser.ToolCallParser reads)."""

from __future__ import annotations

import json
from typing import Iterable

from .parser import definitions_of
from .schema import validate_tool_set


def fallback_system_prompt(tools: Iterable[dict]) -> str:
    """The system-prompt text that describes the tools and the call format for a template with no
    tool support (format 'generic'). Append it to the preset's own system prompt."""
    defs = validate_tool_set(list(definitions_of(tools)))
    lines = [json.dumps(d, ensure_ascii=False) for d in defs]
    example = _example_call(defs[0]["function"]) if defs else {"name": "tool_name", "arguments": {}}
    # A JSON list inside the tags: the shape SmolLM2 (the default model) learned from APIGen-style
    # function-calling data; a single object inside the tags (Hermes) parses just as well.
    return (
        "You can call tools to help answer. The tools, as JSON Schema function definitions:\n"
        "<tools>\n" + "\n".join(lines) + "\n</tools>\n\n"
        "To call tools, reply with only a <tool_call> tag holding a JSON list of calls, each with "
        "the tool's name and its arguments, and no other text, like this:\n"
        f"<tool_call>[{json.dumps(example, ensure_ascii=False)}]</tool_call>\n"
        "The results come back in a message from the tool; then answer the user with them. "
        "If no tool fits the question, answer directly."
    )


def _example_call(fn: dict) -> dict:
    props = fn["parameters"].get("properties", {})
    args = {}
    for name in fn["parameters"].get("required", []):
        s = props.get(name, {})
        if s.get("examples"):
            args[name] = s["examples"][0]
        elif "enum" in s:
            args[name] = s["enum"][0]
        else:
            t = s.get("type", "string")
            t = t[0] if isinstance(t, list) else t
            args[name] = {"number": 1, "integer": 1, "boolean": True, "array": [], "object": {}}.get(t, "...")
    return {"name": fn["name"], "arguments": args}
