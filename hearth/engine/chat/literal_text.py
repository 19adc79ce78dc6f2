"""Text from outside the conversation, tokenized as text: a tool's result (a picked file, a fetched
page), a file attached to a message, and every string of the tool definitions (a third-party MCP
server writes their descriptions) that contains "<|im_end|>" must reach the model as those ten
characters, never as the control token that ends a turn. What the user types and what the
template writes are tokenized as they always were.

The prompt is rendered by the model's template and tokenized with control-token parsing on (the
template writes its own control tokens as text). So before rendering, every control-token string
inside outside text is replaced by a unique marker; the rendered text is cut at the markers, and
each cut-out string is tokenized with parsing off. A marker may come out of the template once, many
times or not at all (a prefix cut before it); one that comes out damaged (a template that escapes
or transforms text) makes the strings broken up instead (a zero-width space after their first
character), which also keeps them text. Prompts without such strings, the usual case, are left
alone and their ids are exactly those of tokenizing the text whole.

    ids, text = encode_prompt(engine, render, messages, tools=tools)   # render(messages[, tools]) -> text
"""

from __future__ import annotations

import re
import secrets
import weakref
from typing import Any, Callable, Sequence

from .attachment_text import spans as attachment_spans

LITERAL_ROLES = ("tool",)           # whose whole content comes from outside: tool results, pages
ZERO_WIDTH_SPACE = "\u200b"

_control_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def control_texts(tokenizer) -> re.Pattern | None:
    """A pattern matching the text of every control or unknown token of `tokenizer`, longest first;
    None when it has none."""
    pattern = _control_cache.get(tokenizer)
    if pattern is None:
        texts = {tokenizer.token_text(i) for i in range(tokenizer.n_vocab) if tokenizer.is_special(i)}
        texts.discard("")
        ordered = sorted(texts, key=len, reverse=True)
        pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else False
        _control_cache[tokenizer] = pattern
    return pattern or None


def outside_text(messages: Sequence[dict], tools, change: Callable[[str], str],
                 roles: Sequence[str] = LITERAL_ROLES) -> tuple[list[dict], Any]:
    """(messages, tools) with `change` applied to the text from outside: the content of `roles`
    messages, the attachment blocks of user messages, every string (and key) of the tools."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str) and m.get("role") in roles:
            m = dict(m, content=change(content))
        elif isinstance(content, str) and m.get("role") == "user":
            pieces, pos = [], 0
            for start, end in attachment_spans(content):
                pieces += [content[pos:start], change(content[start:end])]
                pos = end
            if pieces:
                m = dict(m, content="".join(pieces) + content[pos:])
        out.append(m)
    return out, _every_string(tools, change)


def _every_string(value, change: Callable[[str], str]):
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {change(k) if isinstance(k, str) else k: _every_string(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_every_string(v, change) for v in value]
    return value


def encode_prompt(engine, render: Callable[..., str], messages: Sequence[dict], roles: Sequence[str] = LITERAL_ROLES,
                  tools=None) -> tuple[list[int], str]:
    """(ids, text) of `render(messages)` (or `render(messages, tools)` when `tools` is given), with
    control-token strings in the text from outside (see `outside_text`) tokenized as plain text."""
    call = (lambda m, t: render(m)) if tools is None else render
    pattern = control_texts(engine.tokenizer)
    nonce = secrets.token_hex(6)
    cut_out: list[str] = []

    def mark(match: re.Match) -> str:
        cut_out.append(match.group(0))
        return f"\ue000{nonce}.{len(cut_out) - 1}\ue001"

    if pattern is not None:
        marked, marked_tools = outside_text(messages, tools, lambda s: pattern.sub(mark, s), roles)
    if not cut_out:
        text = call(list(messages), tools)
        return engine.tokenize(text), text
    rendered = call(marked, marked_tools)
    marker = re.compile(f"\ue000{nonce}\\.(\\d+)\ue001")
    if nonce in marker.sub("", rendered):           # a marker the template changed on its way
        broken, broken_tools = outside_text(
            messages, tools, lambda s: pattern.sub(lambda x: x.group(0)[0] + ZERO_WIDTH_SPACE + x.group(0)[1:], s), roles)
        text = call(broken, broken_tools)
        return engine.tokenize(text), text
    pieces = marker.split(rendered)            # text, index, text, index, ..., text
    ids = engine.tokenize(pieces[0])
    text = pieces[0]
    for k in range(1, len(pieces), 2):
        literal, after = cut_out[int(pieces[k])], pieces[k + 1]
        ids += engine.tokenizer.encode(literal, add_special=False, parse_special=False)
        if after:
            ids += engine.tokenizer.encode(after, add_special=False, parse_special=True)
        text += literal + after
    return ids, text
