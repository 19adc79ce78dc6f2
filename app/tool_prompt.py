"""How a chat with tools becomes a prompt, the same way the server does it (Qt-free).

A template with tool support renders the tools and earlier calls itself. One without (format
"generic", like the default model's) gets the tools described in the system prompt and earlier
calls written into the assistant's text, by engine/server's `template_messages`, so the app and the
server build the same prompt and the same preset prefix (and share prefix images).

A last assistant message without tool calls is a reply already begun ("continue from this text"):
the prompt ends with it and the model continues it, as the server does for a client's prefill.
"""

from __future__ import annotations

from types import SimpleNamespace


def tool_format_of(engine) -> str:
    """'hermes' | 'llama3' | 'generic': the tool-call format the engine's chat template teaches."""
    from engine.tools import detect_format
    gguf = getattr(engine, "gguf", None)
    src = gguf.metadata.get("tokenizer.chat_template") if gguf is not None else None
    return detect_format(src if isinstance(src, str) else None)


def template_messages(messages: list[dict], tools: list, fmt: str) -> list[dict]:
    """The messages as the model's template should see them (the server's rule)."""
    from engine.server.chat import template_messages as server_rule
    return server_rule(SimpleNamespace(messages=list(messages), tools=list(tools or [])), fmt)


def prefix_system(system: str, tools: list, fmt: str) -> str:
    """The system prompt a preset's prefix is rendered with: for a generic template with tools, the
    preset's own followed by the tools' description."""
    msgs = template_messages([{"role": "system", "content": system}] if system else [], tools, fmt)
    return msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else ""


def split_reply_head(messages: list[dict]) -> tuple[list[dict], str]:
    """(messages, head): a trailing assistant message without tool calls is the reply's beginning."""
    if len(messages) > 1 and messages[-1].get("role") == "assistant" and not messages[-1].get("tool_calls"):
        return messages[:-1], messages[-1].get("content") or ""
    return messages, ""
