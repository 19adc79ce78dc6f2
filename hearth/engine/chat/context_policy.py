"""What to do when a conversation no longer fits the model's context: a preset's choice.

- "stop": the turn is refused with a readable ContextFullError (how many tokens, how many fit,
  what the user can do).
- "truncate_middle": keep the system prompt (the preset's prefix) and the first exchange, drop the
  oldest exchanges after it until the prompt fits.
- "rolling_window": keep the system prompt and the most recent exchanges that fit.

An exchange is a user message and every assistant and tool message after it, so a tool call is
never separated from its result. Messages are only ever dropped after the system prompt, so the
rendered prompt still starts with the preset's prefix and its prefix image stays valid: what is
recomputed is the part of the conversation after the first dropped message.

`room_for_reply` tokens are kept free for the reply (the preset's max tokens, at most half the
context), so a trimmed prompt does not fill the context at its first generated token.

Qt-free; the app's local chat source uses it, and anything that renders a chat turn can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import ContextFullError, EngineError

POLICIES = ("stop", "truncate_middle", "rolling_window")
POLICY_NAMES = {"stop": "Stop with a message", "truncate_middle": "Truncate the middle",
                "rolling_window": "Rolling window"}
DEFAULT_POLICY = "stop"


def check_policy(policy) -> str:
    if policy not in POLICIES:
        raise EngineError(f"context policy {policy!r} is not one of {', '.join(POLICIES)}")
    return policy


def room_for_reply(n_ctx: int, max_tokens: int) -> int:
    """Tokens kept free for the reply: its max tokens, at most half the context, at least one."""
    return max(1, min(int(max_tokens), n_ctx // 2))


@dataclass
class Fitted:
    messages: list[dict]     # what the prompt is rendered from
    n_tokens: int            # the prompt's tokens
    dropped: int = 0         # messages left out


def exchanges(messages: list[dict]) -> tuple[list[dict], list[list[dict]]]:
    """(the leading system messages, the exchanges after them). Messages before the first user
    message that are not system messages count as an exchange of their own."""
    head = []
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        head.append(messages[i])
        i += 1
    groups: list[list[dict]] = []
    for m in messages[i:]:
        if m.get("role") == "user" or not groups:
            groups.append([m])
        else:
            groups[-1].append(m)
    return head, groups


def fit_messages(messages: list[dict], count: Callable[[list[dict]], int], n_ctx: int, reply_room: int,
                 policy: str) -> Fitted:
    """The messages to render so that the prompt (`count(messages)` tokens) leaves `reply_room`
    tokens free in a context of `n_ctx`. Raises ContextFullError when the policy is "stop" and it
    does not fit, or when even the last exchange alone (with the system prompt) does not fit."""
    check_policy(policy)
    budget = n_ctx - reply_room
    total = count(messages)
    if total <= budget:
        return Fitted(list(messages), total)
    if policy == "stop":
        raise ContextFullError(_full_message(total, n_ctx, reply_room, "this chat"))
    head, groups = exchanges(messages)
    first = groups[:1] if policy == "truncate_middle" and len(groups) > 2 else []
    # The first exchange too is given up before the turn is refused.
    for fixed in ([first, []] if first else [[]]):
        movable = groups[len(fixed):]
        best = _most_recent_that_fit(head, fixed, movable, count, budget)
        if best is not None:
            break
    if best is None:
        n = count(head + groups[-1])
        raise ContextFullError(_full_message(n, n_ctx, reply_room, "the last message"))
    kept = best[0]
    return Fitted(kept, best[1], len(messages) - len(kept))


def _most_recent_that_fit(head, fixed, movable, count, budget):
    """(messages, tokens) with the most of `movable`'s latest exchanges kept that fit, or None.
    Fewer exchanges kept never makes the prompt longer: a binary search."""
    def keep(k: int) -> list[dict]:
        return head + [m for g in fixed + movable[len(movable) - k:] for m in g]

    lo, hi, best = 1, len(movable) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        n = count(keep(mid))
        if n <= budget:
            best, lo = (keep(mid), n), mid + 1
        else:
            hi = mid - 1
    if best is None:
        n = count(keep(1))
        best = (keep(1), n) if n <= budget else None
    return best


def _full_message(tokens: int, n_ctx: int, reply_room: int, what: str) -> str:
    return (f"The context is full: {what} needs {tokens:,} tokens and {reply_room:,} more are kept for "
            f"the reply, but the model's context holds {n_ctx:,}. Start a new chat, shorten or delete "
            "earlier messages, choose a larger context length for this model, or set the preset's "
            "context policy to truncate the middle or to a rolling window")


def fit_turn(engine, turn, tool_format: str, policy: str, max_tokens: int):
    """(prompt text, its token ids, the reply's head, messages dropped) for a chat turn on
    `engine` under `policy`: chat_turn's prompt, with the conversation trimmed to fit."""
    from .chat_turn import ChatTurn, prompt_ids
    tools = list(turn.tools or [])
    template_vars = dict(getattr(turn, "template_vars", None) or {})
    rendered: dict[int, tuple[str, list[int], str]] = {}

    def render(msgs: list[dict]) -> tuple[str, list[int], str]:
        key = tuple(map(id, msgs))
        if key not in rendered:
            ids, prompt, _, head = prompt_ids(engine, ChatTurn(msgs, tools, template_vars), tool_format)
            rendered[key] = (prompt, list(ids), head)
        return rendered[key]

    fitted = fit_messages(list(turn.messages), lambda msgs: len(render(msgs)[1]), int(engine.n_ctx),
                          room_for_reply(int(engine.n_ctx), max_tokens), policy)
    prompt, ids, head = render(fitted.messages)
    return prompt, ids, head, fitted.dropped


def draft_verdict(prompt_tokens: int, alone_tokens: int, n_ctx: int, max_tokens: int, policy: str) -> tuple[str, str]:
    """Before sending: ("fits" | "trimmed" | "too_long", a sentence for the user) for a draft whose
    prompt would be `prompt_tokens` with the whole chat and `alone_tokens` with only the system
    prompt, under `policy`."""
    room = room_for_reply(n_ctx, max_tokens)
    if prompt_tokens + room <= n_ctx:
        return "fits", ""
    if policy != "stop" and alone_tokens + room <= n_ctx:
        return "trimmed", (f"The chat is longer than the context ({n_ctx:,} tokens): older messages will be "
                           f"left out ({POLICY_NAMES[policy].lower()}).")
    if policy != "stop" or alone_tokens + room > n_ctx:
        return "too_long", (f"This message does not fit: it needs {alone_tokens:,} tokens with the system "
                            f"prompt and {room:,} for the reply, and the context holds {n_ctx:,}. Shorten "
                            "it or choose a larger context length.")
    return "too_long", (f"This will not fit: the chat and this message need {prompt_tokens:,} tokens and "
                        f"{room:,} for the reply, and the context holds {n_ctx:,}. Start a new chat, or set "
                        "the preset's context policy to truncate the middle or to a rolling window.")
