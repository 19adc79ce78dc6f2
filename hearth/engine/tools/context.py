"""What a tool may do in one chat (`ToolContext`) and how it says it could not (`ToolError`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Callable


class ToolError(Exception):
    """A tool could not do what was asked; the message goes back to the model as an error result."""


@dataclass
class ToolContext:
    """What the app allows for one chat. The defaults allow nothing that reaches outside."""
    allowed_files: frozenset = frozenset()          # paths the user picked; nothing else is readable
    max_file_bytes: int = 64 * 1024
    allow_fetch: bool = False                       # the user must turn "fetch URL" on
    fetch_timeout_s: float = 10.0
    fetch_max_bytes: int = 256 * 1024
    fetch_allowed_hosts: frozenset = frozenset()    # hosts (as in URLs) fetch_url may reach on any address
    now: Callable[[], dt.datetime] | None = None    # a fixed clock for tests; None is the real one
    ask_user: Callable[..., str | None] | None = None   # for tools that need the user to type a result
    extra: dict = field(default_factory=dict)
