"""The text-level pieces of tool-call parsing (parser.py's state machine uses them): where a JSON
value ends in a stream, what a fence or a marker prefix looks like, what a call's JSON looks like."""

from __future__ import annotations

from typing import Any

FENCE = "```"


class BraceScanner:
    """Finds where a JSON object that starts at index 0 ends, incrementally, strings respected."""

    def __init__(self) -> None:
        self.pos, self.depth, self.in_string, self.escape = 0, 0, False, False

    def scan(self, text: str) -> int:
        """Index of the closing brace of the object opened at text[0], or -1 if not there yet."""
        for i in range(self.pos, len(text)):
            c = text[i]
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif c == "\\":
                    self.escape = True
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.pos = i + 1
                    return i
        self.pos = len(text)
        return -1


def held_back(text: str, markers: list[str]) -> int:
    """Length of the longest end of `text` that could be the start of a marker."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:k]):
                best = k
                break
    return best


def cannot_be_call_json(text: str) -> bool:
    """True when `text` (starting with '{' or '[') already shows it is not a call or list of calls."""
    body = text[1:].lstrip()
    return bool(body) and body[0] not in ('"}' if text[0] == "{" else "{")


def unfenced(body: str) -> str:
    """`body` without a ``` or ```json fence around it (models put one inside <tool_call> too)."""
    nl = body.find("\n")
    if not body.startswith(FENCE) or nl < 0 or body[3:nl].strip().lower() not in ("", "json"):
        return body
    inner = body[nl + 1:].rstrip()
    return (inner[:-len(FENCE)] if inner.endswith(FENCE) else inner).strip()


def is_call_shaped(value: Any, lenient: bool = False) -> bool:
    """A dict naming a tool: {"name", "arguments"|"parameters"} (inside tags, "name" alone will
    do, and OpenAI's {"function": {...}} wrapper)."""
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("function"), dict) and "name" not in value:
        value = value["function"]
    if "name" not in value:
        return False
    return lenient or "arguments" in value or "parameters" in value
