"""A preset's prefix: the chat template rendered up to the first user message (system prompt and tools).

One rule for the app's LocalBackend and the server's saved-preset matching, so both produce the same
text and so share the same prefix images in the PrefixStore.
"""

from __future__ import annotations

import os


def prefix_text(engine, system_messages: list[dict], tools: list) -> str:
    """The chat template rendered up to the first user message: the system prompt and tools.

    Render two chats that differ only in the user's text and keep what they share; templates that
    inject a default system prompt or put the tools in the user turn are cut back to a line end,
    where tokenization cannot merge across the cut."""
    a = engine.render_chat(system_messages + [{"role": "user", "content": "\x01A"}], tools=tools or None)
    b = engine.render_chat(system_messages + [{"role": "user", "content": "\x02B"}], tools=tools or None)
    common = os.path.commonprefix([a, b])
    if system_messages:
        only = engine.render_chat(system_messages, tools=tools or None, add_generation_prompt=False)
        if only and common.startswith(only):
            return only
    cut = common.rfind("\n")
    return common[:cut + 1] if cut >= 0 else ""
