"""Text from outside the conversation, tokenized as text: a tool's result (a picked file, a fetched
page) that contains "<|im_end|>" must reach the model as those ten characters, never as the control
token that ends a turn.

The prompt is rendered by the model's template and tokenized with control-token parsing on (the
template writes its own control tokens as text). So before rendering, every control-token string
inside a literal message's content is replaced by a unique marker; the rendered text is cut at the
markers, and each cut-out string is tokenized with parsing off. Content without control-token
strings, the usual case, is left alone and the prompt's ids are exactly those of tokenizing it whole.
A template that transforms content so that a marker does not come through intact gets the strings
broken up instead (a zero-width space after their first character), which also keeps them text.

    ids, text = encode_prompt(engine, render, messages)      # render(messages) -> prompt text
"""

from __future__ import annotations

import re
import secrets
import weakref
from typing import Callable, Sequence

LITERAL_ROLES = ("tool",)           # whose content comes from outside: tool results, files, pages
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


def encode_prompt(engine, render: Callable[[list[dict]], str], messages: Sequence[dict],
                  roles: Sequence[str] = LITERAL_ROLES) -> tuple[list[int], str]:
    """(ids, text) of `render(messages)`, control-token strings inside the content of `roles`
    messages tokenized as plain text."""
    pattern = control_texts(engine.tokenizer)
    hits = [i for i, m in enumerate(messages)
            if pattern is not None and m.get("role") in roles and isinstance(m.get("content"), str)
            and pattern.search(m["content"])]
    if not hits:
        text = render(list(messages))
        return engine.tokenize(text), text
    nonce = secrets.token_hex(6)
    cut_out: list[str] = []

    def mark(match: re.Match) -> str:
        cut_out.append(match.group(0))
        return f"\ue000{nonce}.{len(cut_out) - 1}\ue001"

    marked = [dict(m, content=pattern.sub(mark, m["content"])) if i in hits else m for i, m in enumerate(messages)]
    rendered = render(marked)
    marker = re.compile(f"\ue000{nonce}\\.(\\d+)\ue001")
    found = [int(x) for x in marker.findall(rendered)]
    if sorted(found) != list(range(len(cut_out))):
        broken = [dict(m, content=pattern.sub(lambda x: x.group(0)[0] + ZERO_WIDTH_SPACE + x.group(0)[1:],
                                              m["content"])) if i in hits else m for i, m in enumerate(messages)]
        text = render(broken)
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
