"""Splitting assistant text for display, and the stats line under a reply. Qt-free.

A reply is shown as a column of segments: prose by paragraph (each a Markdown label, so a growing
reply re-renders only its last paragraph) and fenced code blocks whole (a monospace block with a
Copy button). An unclosed fence - a code block still streaming - is a code block already.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)[ \t]*([\w+#.-]*)[^\n]*$", re.M)


_LIST_ITEM = re.compile(r"^[ \t]*([-*+]|\d+[.)])[ \t]")


def _paragraphs(md: str) -> list[str]:
    """Prose split at blank lines, so a growing reply re-renders only its last paragraph. A list
    stays one piece (a loose list has blank lines between items, and numbering must carry on)."""
    out: list[str] = []
    for p in re.split(r"\n[ \t]*\n", md):
        if not p.strip():
            continue
        continues = p[:1] in (" ", "\t") or _LIST_ITEM.match(p)
        if out and continues and any(_LIST_ITEM.match(line) for line in out[-1].split("\n")):
            out[-1] += "\n\n" + p
        else:
            out.append(p)
    return out


def split_markdown(text: str) -> list[tuple]:
    """[("md", text) | ("code", language, code)] in order: prose by paragraph, fenced code blocks
    whole; an unclosed fence runs to the end."""
    out: list[tuple] = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if not m:
            break
        out += [("md", p) for p in _paragraphs(text[pos:m.start()])]
        fence, lang = m.group(1), m.group(2)
        body_start = m.end() + 1
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        c = close.search(text, body_start)
        if c is None:
            out.append(("code", lang, text[body_start:]))
            return out
        out.append(("code", lang, text[body_start:c.start()].rstrip("\n")))
        pos = c.end() + 1
    out += [("md", p) for p in _paragraphs(text[pos:])]
    return out


def format_stats(stats: dict) -> str:
    if not stats:
        return ""
    parts = []
    n = stats.get("generated_tokens")
    if n is not None:
        parts.append(f"{n} tokens")
    if stats.get("decode_tps"):
        parts.append(f"{stats['decode_tps']:.1f} tok/s")
    if stats.get("ttft_s") is not None:
        parts.append(f"first token {stats['ttft_s'] * 1000:.0f} ms")
    if stats.get("reused_tokens") is not None and stats.get("computed_tokens") is not None:
        parts.append(f"prompt {stats['reused_tokens']} reused + {stats['computed_tokens']} computed")
    reason = stats.get("stop_reason", "")
    if reason in ("stopped", "cancel", "cancelled"):
        parts.append("stopped")
    elif reason in ("length", "max_tokens"):
        parts.append("hit max tokens")
    return "  ·  ".join(parts)
