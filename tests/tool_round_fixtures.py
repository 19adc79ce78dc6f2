"""Driving a tool round in the real window (tests/test_app_tools.py and tests/test_app_mcp.py): a
greedy, short-reply preset, a message typed and sent, the confirmation bar awaited, the round awaited,
and what the engine last read."""

from __future__ import annotations

import app_fixtures
from PySide6.QtCore import Qt

from hearth.engine.chat.preset_format import check_sampling

SYSTEM = "You are a helpful assistant."
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 6})


def wait_until(pred, timeout_s: float = 120.0) -> None:
    """The shared wait, with a longer default (each step may run a generation)."""
    app_fixtures.wait_until(pred, timeout_s)


def ask(qtbot, w, text: str, *prefixes: str) -> None:
    """A new chat; the next replies begin with `prefixes`; type `text` and press Enter."""
    w.new_chat()
    w.conversation.reply_prefixes = list(prefixes)
    qtbot.keyClicks(w.messageInput, text)
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)


def wait_confirm(w) -> None:
    wait_until(lambda: w.toolConfirm.isVisible() or not w.conversation.generating)
    assert w.toolConfirm.isVisible(), "no confirmation was asked"


def wait_done(w) -> None:
    wait_until(lambda: not w.conversation.generating)
    wait_until(lambda: not w.client.busy)


def prompt_text(w) -> str:
    """What the engine last read and wrote (its resident tokens), as text."""
    eng = w.client.worker.backend.engine
    return eng.detokenize(eng.tokens)
