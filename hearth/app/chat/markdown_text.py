"""Splitting assistant text for display, and the stats line under a reply. Qt-free.

A reply is shown as a column of segments: prose by paragraph (each a Markdown label, so a growing
reply re-renders only its last paragraph; a single newline in it is a line break) and fenced code
blocks whole (a monospace block with a Copy button). An unclosed fence - a code block still streaming - is a code block already.
"""

from __future__ import annotations

import re

from hearth.engine.chat.context_policy import POLICY_NAMES

_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)[ \t]*([\w+#.-]*)[^\n]*$", re.M)


_LIST_ITEM = re.compile(r"^[ \t]*([-*+]|\d+[.)])[ \t]")
# A line that must not get a hard break before it: a table row, or a setext underline / rule.
_NO_BREAK_BEFORE = re.compile(r"^[ \t]*\||^[ \t]{0,3}(=+|-+|\*+|_+)[ \t]*$")


def _hard_breaks(p: str) -> str:
    """A single newline inside a paragraph shown as a line break, as chat apps do (CommonMark
    would join the lines): two spaces before it. Table rows and underlines are left as they are."""
    lines = p.split("\n")
    for i in range(len(lines) - 1):
        line, nxt = lines[i], lines[i + 1]
        if (not line.strip() or not nxt.strip() or line.endswith(("  ", "\\")) or line.lstrip().startswith("|")
                or _NO_BREAK_BEFORE.match(nxt)):
            continue
        lines[i] = line + "  "
    return "\n".join(lines)


def _paragraphs(md: str) -> list[str]:
    """Prose split at blank lines, so a growing reply re-renders only its last paragraph. A list
    stays one piece (a loose list has blank lines between items, and numbering must carry on)."""
    out: list[str] = []
    for p in map(_hard_breaks, re.split(r"\n[ \t]*\n", md)):
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


def duration(ms: float) -> str:
    """A time as people read it: "740 ms", "65.4 s", "3 min 5 s"."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 100_000:
        return f"{ms / 1000:.1f} s"
    s = round(ms / 1000)
    return f"{s} s" if s < 180 else f"{s // 60} min {s % 60} s"


def tokens(n: int) -> str:
    """ "1 token", "2,683 tokens"."""
    return f"{n:,} token" + ("" if n == 1 else "s")


def format_stats(stats: dict) -> str:
    if not stats:
        return ""
    parts = []
    n = stats.get("generated_tokens")
    if n is not None:
        parts.append(tokens(n))
    if stats.get("decode_tps"):
        parts.append(f"{stats['decode_tps']:.1f} tok/s")
    if stats.get("ttft_s") is not None:
        parts.append(f"first token {duration(stats['ttft_s'] * 1000)}")
    if stats.get("reused_tokens") is not None and stats.get("computed_tokens") is not None:
        parts.append(f"prompt {stats['reused_tokens']} reused + {stats['computed_tokens']} computed")
    dropped = stats.get("dropped_messages")
    if dropped:
        how = POLICY_NAMES.get(stats.get("context_policy", ""), "context policy").lower()
        parts.append(f"{dropped} earlier message{'s' if dropped != 1 else ''} left out ({how})")
    cut = CUT_OFF.get(stats.get("stop_reason", ""))
    if cut:
        parts.append(cut)
    if stats.get("model"):
        where = f" at {stats['remote']}" if stats.get("remote") else \
            f" on {stats['backend'].upper()}" if stats.get("backend") in ("cpu", "gpu") else ""
        parts.append(f"{stats['model']}{where}")
    return "  ·  ".join(parts)


# Why a reply ended before the model finished it, in the reply's info line.
CUT_OFF = {"stopped": "stopped by you", "cancel": "stopped by you", "cancelled": "stopped by you",
           "length": "cut off: max tokens reached", "max_tokens": "cut off: max tokens reached",
           "context_full": "cut off: the context is full", "interrupted": "cut off: Hearth was closed"}
