"""How a file attached to a message is written into the message's text, and where such blocks are
in a message: one rule for the app that writes them and the prompt that tokenizes them as text.

    File: notes.txt
    ```txt
    <the file's text>
    ```

The fence is longer than any run of backticks in the file, so the block ends at the first line
that is the fence alone. A block is text from outside the user's typing: control-token strings in
it (or in the file's name) never become control tokens (engine/chat/literal_text.py).
"""

from __future__ import annotations

import re
from pathlib import PurePath

_OPENING = re.compile(r"^File: [^\n]*\n(`{3,})[^`\n]*\n", re.MULTILINE)


def block(name: str, text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    lang = PurePath(name).suffix.lstrip(".").lower()
    return f"File: {name}\n{fence}{lang if lang != 'pdf' else ''}\n{text.rstrip()}\n{fence}"


def spans(content: str) -> list[tuple[int, int]]:
    """[start, end) of each attachment block in `content`, in order."""
    out, pos = [], 0
    while (m := _OPENING.search(content, pos)) is not None:
        fence = m.group(1)
        close = re.compile(rf"\n{re.escape(fence)}(?=\n|$)")
        end = close.search(content, m.end() - 1)
        if end is None:
            break
        out.append((m.start(), end.end()))
        pos = end.end()
    return out
