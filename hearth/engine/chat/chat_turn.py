"""A chat turn on the engine: how a conversation becomes a prompt and is prefilled.

One rule for the app's local chat and the server's requests, so both build the same prompt and the
same preset prefix (and so share the same prefix images):

- `template_messages`: the messages as the model's template should see them. A template with no
  tool support ("generic", like the default model's) gets the tools described in the system prompt
  and earlier calls written into the assistant's text in the format that prompt teaches.
- `split_reply_head`: a last assistant message without tool calls is a reply already begun (a
  client's prefill, the app's "continue"): the prompt ends with its text and the model continues it.
- `prefix_text`: a preset's prefix, the template rendered up to the first user message;
  `prefix_ids` its ids, tokenized as `prompt_ids` tokenizes a chat's prompt.
- `prefill_in_chunks` and `with_prefill`: a long new part of the prompt read in chunks, so a caller
  can show progress and stop within one chunk, and the generation's stats that count those tokens.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ..generation import GenerationStats, common_prefix
from .literal_text import encode_prompt
from ..tools import detect_format, fallback_system_prompt

PREFILL_CHUNK = 128   # tokens read between checks for cancel (and progress reports)


@dataclass
class ChatTurn:
    """What a prompt is built from: the conversation so far and the tools the model may call.
    The server's ChatRequest has the same two fields and is passed as is."""
    messages: list[dict]
    tools: list = field(default_factory=list)
    template_vars: dict = field(default_factory=dict)   # extra template variables: enable_thinking


def tool_format_of(engine) -> str:
    """'hermes' | 'llama3' | 'generic': the tool-call format the engine's chat template teaches."""
    gguf = getattr(engine, "gguf", None)
    src = gguf.metadata.get("tokenizer.chat_template") if gguf is not None else None
    return detect_format(src if isinstance(src, str) else None)


def template_messages(turn, tool_format: str) -> list[dict]:
    """The turn's messages as this model's template should see them. A template with no tool
    support ("generic") gets the tools described in the system prompt, and earlier calls written
    into the assistant's text in the format that prompt teaches (it would drop `tool_calls`)."""
    if not turn.tools or tool_format != "generic":
        return turn.messages
    out = [dict(m) for m in turn.messages]
    guide = fallback_system_prompt(turn.tools)
    if out and out[0]["role"] == "system":
        out[0]["content"] = f"{out[0]['content'].rstrip()}\n\n{guide}" if out[0]["content"].strip() else guide
    else:
        out.insert(0, {"role": "system", "content": guide})
    for m in out:
        if m.get("tool_calls"):
            calls = "\n".join("<tool_call>\n" + json.dumps({"name": c["function"]["name"],
                                                            "arguments": c["function"]["arguments"]},
                                                           ensure_ascii=False) + "\n</tool_call>"
                              for c in m.pop("tool_calls"))
            m["content"] = f"{m['content'].rstrip()}\n{calls}" if m["content"].strip() else calls
    return out


def split_reply_head(messages: list[dict]) -> tuple[list[dict], str]:
    """(messages, head): a trailing assistant message without tool calls is the reply's beginning."""
    if len(messages) > 1 and messages[-1].get("role") == "assistant" and not messages[-1].get("tool_calls"):
        return messages[:-1], messages[-1].get("content") or ""
    return messages, ""


def render_prompt(engine, turn, tool_format: str) -> tuple[str, list[dict], str]:
    """(prompt text, the messages the template saw, the reply's head). The head is split off first,
    so a trailing assistant message with tool calls is a finished turn in every tool format.
    The template's TemplateError goes to the caller."""
    messages, tools, head, render = _prompt_parts(engine, turn, tool_format)
    return render(messages, tools), template_messages(ChatTurn(messages, tools), tool_format), head


def prompt_ids(engine, turn, tool_format: str) -> tuple[list[int], str, list[dict], str]:
    """(ids, prompt text, the messages the template saw, the reply's head): `render_prompt`
    tokenized, with control-token text from outside the user's typing (tool results, attached
    files, the tools' definitions) kept as text (engine/chat/literal_text.py); the template's own
    control tokens are tokens as always."""
    messages, tools, head, render = _prompt_parts(engine, turn, tool_format)
    ids, prompt = encode_prompt(engine, render, messages, tools=tools)
    return ids, prompt, template_messages(ChatTurn(messages, tools), tool_format), head


def _prompt_parts(engine, turn, tool_format: str):
    messages, head = split_reply_head(list(turn.messages))
    template_vars = getattr(turn, "template_vars", None) or {}

    def render(msgs: list[dict], tools: list) -> str:
        shown = template_messages(ChatTurn(msgs, tools), tool_format)
        return engine.render_chat(shown, tools=tools or None, add_generation_prompt=True, **template_vars) + head
    return messages, list(turn.tools or []), head, render


def prefix_system(system: str, tools: list, tool_format: str) -> str:
    """The system prompt a preset's prefix is rendered with: for a generic template with tools, the
    preset's own followed by the tools' description."""
    msgs = template_messages(ChatTurn([{"role": "system", "content": system}] if system else [], tools),
                             tool_format)
    return msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else ""


def prefix_ids(engine, system: str, tools: list, tool_format: str) -> tuple[list[int], str]:
    """(ids, text) of a preset's prefix, for the system prompt `system` (the user's own text) and
    `tools`, whose strings are tokenized as text as `prompt_ids` tokenizes them, so that a chat's
    prompt begins with exactly these ids. The text is "" when the template gives no prefix."""
    def render(msgs: list[dict], tools: list) -> str:
        full = prefix_system(msgs[0]["content"] if msgs else "", tools, tool_format)
        return prefix_text(engine, [{"role": "system", "content": full}] if full else [], tools)
    return encode_prompt(engine, render, [{"role": "system", "content": system}] if system else [], tools=list(tools))


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


def prefill_in_chunks(engine, ids: list[int], cancel: Callable[[], bool],
                      progress: Callable[[int, int], None] | None = None, min_new: int = 0,
                      chunk: int = PREFILL_CHUNK) -> tuple[int, float] | None:
    """Read the part of `ids` that is not resident in chunks, all but its last token (which
    `generate` reads, to have its logits). Nothing is done when that part is `min_new` tokens or
    fewer. `progress(done, total)` counts new tokens. Returns (tokens computed here, seconds),
    or None if `cancel()` turned true between chunks."""
    t0 = time.perf_counter()
    common = common_prefix(engine.tokens, ids)
    todo = len(ids) - common
    if todo <= min_new:
        return 0, 0.0
    ends = list(range(common + chunk, len(ids) - 1, chunk))
    for end in ends:
        if cancel():
            return None
        engine.prefill(ids[:end])
        if progress is not None:
            progress(end - common, todo)
    return (ends[-1] - common if ends else 0), time.perf_counter() - t0


def with_prefill(stats: GenerationStats, computed: int, seconds: float) -> GenerationStats:
    """Stats of a generation whose prompt was partly read by prefill_in_chunks: those tokens were
    computed for this turn, not reused."""
    if computed:
        stats.reused_tokens -= computed
        stats.computed_tokens += computed
        stats.prefill_s += seconds
        stats.ttft_s += seconds
        stats.prefill_tps = stats.computed_tokens / stats.prefill_s if stats.prefill_s > 0 else 0.0
    return stats
