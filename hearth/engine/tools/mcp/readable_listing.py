"""Messages the SDK could not read, read again where that keeps a server usable.

The SDK parses each JSON-RPC message with pydantic, whose JSON reader stops at about 250 levels of
nesting; one tool whose input schema nests deeper makes the whole `tools/list` answer unreadable,
and the request then waits until its timeout. Between the transport and the session, such a
message is parsed again with Python's reader (far deeper), the tools nested past MAX_TOOL_DEPTH
are taken out with a note naming each, and the rest of the answer is handed on. A message the SDK
refused for a lone surrogate (half a UTF-16 pair, which its reader rejects) is handed on with
U+FFFD in its place. What still cannot be read is kept as `Unreadable.reason`, so a start that
then times out says why.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import anyio

_SURROGATE = re.compile("[\ud800-\udfff]")   # in a str, a surrogate is always a lone one
MAX_TOOL_DEPTH = 100         # JSON levels in one tool; Hearth's own check allows 32 schema levels


class Unreadable:
    """What was taken out of, or could not be read in, a session's messages."""

    def __init__(self):
        self.left_out: list[str] = []
        self.reason = ""


def json_depth(value: Any) -> int:
    """Levels of nesting of `value` (iterative: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def read_again(error: Exception, notes: Unreadable):
    """A SessionMessage made from the raw message `error` failed on, without its over-deep tools;
    or `error` itself when that cannot be done."""
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter
    errors = getattr(error, "errors", None)
    try:
        first = errors()[0] if callable(errors) else None
    except Exception:  # noqa: BLE001  not a pydantic error after all
        first = None
    if not first or first.get("type") != "json_invalid" or not isinstance(first.get("input"), (str, bytes)):
        return error
    try:
        d = json.loads(first["input"])
    except (ValueError, RecursionError) as e:
        notes.reason = f"it sent a message that could not be read ({type(e).__name__}: {str(e)[:200]})"
        return error
    tools = d.get("result", {}).get("tools") if isinstance(d, dict) and isinstance(d.get("result"), dict) else None
    if isinstance(tools, list):
        kept = []
        for t in tools:
            depth = json_depth(t)
            if depth > MAX_TOOL_DEPTH:
                name = t.get("name") if isinstance(t, dict) else None
                notes.left_out.append(f"tool {name!r} left out: its definition nests {depth} levels deep "
                                      f"(at most {MAX_TOOL_DEPTH} are read)")
            else:
                kept.append(t)
        d["result"]["tools"] = kept
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_python(_whole_characters(d), by_name=False))
    except Exception as e:  # noqa: BLE001  still not a message: said, and the request ends by its timeout
        notes.reason = f"it sent a message that could not be read ({str(e).splitlines()[0][:200]})"
        return error


def _whole_characters(value):
    """`value` with lone surrogates (JSON may escape half a UTF-16 pair; the SDK's reader refuses
    them, Python's keeps them) replaced by U+FFFD, so that the message reads and its text can be
    tokenized and stored."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_whole_characters(k): _whole_characters(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_characters(v) for v in value]
    return value


@contextlib.asynccontextmanager
async def readable(read_stream, notes: Unreadable):
    """`read_stream` with the SDK's unreadable messages read again (see `read_again`)."""
    send, receive = anyio.create_memory_object_stream(0)

    async def pump() -> None:
        async with send:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                async for item in read_stream:
                    await send.send(read_again(item, notes) if isinstance(item, Exception) else item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        try:
            yield receive
        finally:
            tg.cancel_scope.cancel()
