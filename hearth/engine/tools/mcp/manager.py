"""The MCP sessions: one background asyncio loop thread runs every server's session (the SDK is
async); callers on any other thread (the GUI thread starts and stops, a tool thread calls) go
through it with timeouts and never block on the loop for longer than they asked.

    mgr = McpManager()
    fut = mgr.start(config, token, on_exit=cb)   # concurrent Future -> list[mcp_types.Tool]
    mgr.call("files", "read", {"path": ...}, timeout_s=30) # ToolResult, never raises
    mgr.list_tools("files")                       # Future -> the tool list, read again
    mgr.stop("files"); mgr.close()                # close: every server stopped, the thread ended

A server that dies or stops answering ends its session: `on_exit(name, message)` is called (on the
loop thread) unless the session was stopped on purpose. A stdio server runs with the SDK's safe
default environment plus the config's env, and its stderr goes to a log file per server, capped
and rotated (stderr_log.py). A tool listing the SDK cannot read for its nesting is read again
without the over-deep tools (readable_listing.py; `left_out(name)` names them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import Callable

import anyio

from ..registry import ToolResult
from .config import McpServerConfig
from .convert import MAX_RESULT_CHARS, tool_result, with_crash_text
from .readable_listing import Unreadable, readable
from .stderr_log import StderrLog

log = logging.getLogger(__name__)

START_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 60.0
PING_EVERY_S = 5.0
PING_TIMEOUT_S = 10.0


class McpError(Exception):
    """A server could not be started or used; the message is for the user."""


class _Session:
    def __init__(self, config: McpServerConfig):
        self.config = config
        self.session = None
        self.stop: anyio.Event | None = None
        self.stopping = False
        self.failure = ""                  # why a call found the session dead
        self.refused = 0                   # an HTTP server's 401/403: the token is wrong or missing
        self.task: asyncio.Task | None = None
        self.unreadable = Unreadable()      # tools left out of its listings, or why a message was unreadable


class McpManager:
    def __init__(self, log_dir: str | Path | None = None):
        self.log_dir = Path(log_dir) if log_dir else None
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hearth-mcp", daemon=True)
        self._thread.start()

    # -- any thread -----------------------------------------------------------------------------------
    def running(self) -> list[str]:
        with self._lock:
            return [n for n, s in self._sessions.items() if s.session is not None]

    def start(self, config: McpServerConfig, token: str = "", on_exit: Callable[[str, str], None] | None = None,
              timeout_s: float = START_TIMEOUT_S) -> concurrent.futures.Future:
        """Start a server's session; the future gets its tool list, or McpError. A server of that
        name already running is stopped first."""
        return asyncio.run_coroutine_threadsafe(self._start(config, token, on_exit, timeout_s), self._loop)

    def list_tools(self, server: str, timeout_s: float = START_TIMEOUT_S) -> concurrent.futures.Future:
        """A running server's tool list, read again (it may have changed); McpError if it is not running."""
        return asyncio.run_coroutine_threadsafe(self._list(server, timeout_s), self._loop)

    def call(self, server: str, tool: str, arguments: dict, timeout_s: float = CALL_TIMEOUT_S,
             max_chars: int = MAX_RESULT_CHARS) -> ToolResult:
        """Run one tool on a running server. Every failure is an error result for the model."""
        fut = asyncio.run_coroutine_threadsafe(self._call(server, tool, arguments, timeout_s, max_chars), self._loop)
        try:
            return fut.result(timeout_s + 5)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            return ToolResult(f"Error: the MCP server {server} did not answer within {timeout_s:g} s", True)

    def stop(self, server: str, timeout_s: float = 10.0, wait: bool = True) -> None:
        """Stop a server (its process ends); `wait`: until it has, at most `timeout_s`."""
        fut = asyncio.run_coroutine_threadsafe(self._stop(server), self._loop)
        if not wait:
            return
        with contextlib.suppress(concurrent.futures.TimeoutError):
            fut.result(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop every server (their processes end) and the loop thread."""
        if not self._thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self._stop_all(), self._loop)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            fut.result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)

    # -- the loop thread ------------------------------------------------------------------------------
    async def _start(self, config, token, on_exit, timeout_s):
        await self._stop(config.name)
        s = _Session(config)
        ready: asyncio.Future = self._loop.create_future()
        with self._lock:
            self._sessions[config.name] = s
        s.task = self._loop.create_task(self._serve(s, token, ready, on_exit, timeout_s))
        return await ready

    async def _serve(self, s: _Session, token, ready, on_exit, timeout_s) -> None:
        from mcp import ClientSession
        name, message = s.config.name, ""
        s.stop = anyio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(s, token, stack))
                read = await stack.enter_async_context(readable(read, s.unreadable))
                session = await stack.enter_async_context(ClientSession(read, write))
                with anyio.fail_after(timeout_s):
                    await session.initialize()
                    tools = await _all_tools(session)
                s.session = session
                ready.set_result(tools)
                await self._watch(s)
                if not s.stopping:
                    message = s.failure or f"the MCP server {name} stopped answering"
        except Exception as e:  # noqa: BLE001  any failure of a session is the user's to read
            message = _readable(name, e, timeout_s, started=ready.done())
            if s.unreadable.reason and not ready.done():
                message = f"the MCP server {name} could not be started: {s.unreadable.reason}"
            if s.refused:
                message = (f"the MCP server {name} refused the connection (HTTP {s.refused}): its token is "
                           f"{'wrong' if token else 'missing'}")
            log.warning("MCP server %s: %s", name, message, exc_info=True)
        finally:
            s.session = None
            with self._lock:
                if self._sessions.get(name) is s:
                    del self._sessions[name]
            if not ready.done():
                ready.set_exception(McpError(message or f"the MCP server {name} did not start"))
            elif not s.stopping and on_exit is not None:
                on_exit(name, message or f"the MCP server {name} ended")

    def _transport(self, session: _Session, token: str, stack: contextlib.AsyncExitStack):
        config = session.config
        if config.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client
            headers = {"Authorization": f"Bearer {token}"} if token else None
            client = create_mcp_http_client(headers=headers)

            async def note_refusal(response) -> None:     # the SDK keeps only "an error response"
                if response.status_code in (401, 403):
                    session.refused = response.status_code
            client.event_hooks["response"].append(note_refusal)
            return streamable_http_client(config.url, http_client=client)
        from mcp import StdioServerParameters, stdio_client
        params = StdioServerParameters(command=config.command, args=list(config.args), env=dict(config.env))
        if not self.log_dir:
            return stdio_client(params)
        errlog = StderrLog(self._log_path(config.name))
        stack.callback(errlog.close_ours)
        return _closing_after_spawn(stdio_client(params, errlog=errlog.child_end), errlog)

    def _log_path(self, name: str) -> Path:
        return self.log_dir / f"mcp-{name}.log"

    def left_out(self, server: str) -> list[str]:
        """The tools of a running server left out of its list, each with its name and why."""
        with self._lock:
            s = self._sessions.get(server)
        return list(s.unreadable.left_out) if s is not None else []

    async def _watch(self, s: _Session) -> None:
        """Until stopped: ping now and then; a ping that fails or goes unanswered ends the session."""
        while not s.stop.is_set():
            with anyio.move_on_after(PING_EVERY_S):
                await s.stop.wait()
            if s.stop.is_set():
                return
            try:
                with anyio.fail_after(PING_TIMEOUT_S):
                    await s.session.send_ping()
            except TimeoutError:
                s.failure = f"the MCP server {s.config.name} stopped answering (no answer in {PING_TIMEOUT_S:g} s)"
                return
            except Exception as e:  # noqa: BLE001  the process ended or the connection broke
                s.failure = f"the MCP server {s.config.name} ended unexpectedly ({_short(e)})"
                return

    async def _list(self, server: str, timeout_s: float) -> list:
        with self._lock:
            s = self._sessions.get(server)
        if s is None or s.session is None:
            raise McpError(f"the MCP server {server} is not running")
        try:
            with anyio.fail_after(timeout_s):
                return await _all_tools(s.session)
        except Exception as e:  # noqa: BLE001
            raise McpError(f"the MCP server {server} did not list its tools ({_short(e)})") from None

    async def _call(self, server, tool, arguments, timeout_s, max_chars) -> ToolResult:
        with self._lock:
            s = self._sessions.get(server)
        if s is None or s.session is None:
            return ToolResult(f"Error: the MCP server {server} is not running", True)
        log_start = self._log_size(s.config)
        try:
            with anyio.fail_after(timeout_s):
                result = await s.session.call_tool(tool, arguments)
        except TimeoutError:
            return ToolResult(f"Error: the MCP server {server} did not answer within {timeout_s:g} s", True)
        except Exception as e:  # noqa: BLE001  a dead server, a protocol error: the model reads it
            if s.stop is not None and not s.stopping:
                s.failure = f"the MCP server {server} ended unexpectedly ({_short(e)})"
                s.stop.set()        # the session is no use any more; on_exit tells the app
            return ToolResult(f"Error: the MCP server {server} failed during the call ({_short(e)})", True)
        out = tool_result(result, max_chars)
        if out.is_error and log_start is not None:
            tail = self._log_tail(s.config, log_start)
            for _ in range(10):     # a thread copies the log from a pipe (stderr_log.py): let it catch up
                if tail:
                    break
                await anyio.sleep(0.02)
                tail = self._log_tail(s.config, log_start)
            out = with_crash_text(out, tail)
        return out

    def _log_size(self, config: McpServerConfig) -> int | None:
        """Where the server's stderr log ends now; None when it has none (an HTTP server)."""
        if not self.log_dir or config.kind != "stdio":
            return None
        try:
            return self._log_path(config.name).stat().st_size
        except OSError:
            return None

    def _log_tail(self, config: McpServerConfig, start: int) -> str:
        """What the server wrote to stderr since `start` (at most 64 KiB), written before it answered."""
        try:
            with open(self._log_path(config.name), "rb") as f:
                if os.fstat(f.fileno()).st_size < start:     # rotated since: the new file holds it
                    start = 0
                f.seek(start)
                return f.read(65536).decode("utf-8", "replace")
        except OSError:
            return ""

    async def _stop(self, name: str) -> None:
        with self._lock:
            s = self._sessions.get(name)
        if s is None or s.task is None:
            return
        s.stopping = True
        if s.stop is not None:
            s.stop.set()
        else:
            s.task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(s.task), 8.0)
        if not s.task.done():
            s.task.cancel()

    async def _stop_all(self) -> None:
        with self._lock:
            names = list(self._sessions)
        await asyncio.gather(*(self._stop(n) for n in names))


@contextlib.asynccontextmanager
async def _closing_after_spawn(transport, errlog: StderrLog):
    """The transport, with Hearth's copy of the stderr pipe closed once the process is spawned (its
    copy thread then ends when the process does)."""
    try:
        async with transport as streams:
            errlog.close_ours()
            yield streams
    finally:
        errlog.close_ours()


async def _all_tools(session) -> list:
    tools, cursor = [], None
    while True:
        from mcp_types import PaginatedRequestParams
        res = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += res.tools
        cursor = res.next_cursor
        if not cursor:
            return tools


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) < 300 else text[:300] + "…"


def _readable(name: str, e: BaseException, timeout_s: float, started: bool) -> str:
    if isinstance(e, TimeoutError) and not started:
        return f"the MCP server {name} did not answer within {timeout_s:g} s of starting"
    if isinstance(e, FileNotFoundError):
        return f"the MCP server {name} could not be started: {e.filename or 'the command'} was not found"
    if isinstance(e, BaseExceptionGroup):
        inner = e.exceptions[0] if e.exceptions else e
        return _readable(name, inner, timeout_s, started)
    if not started:
        return f"the MCP server {name} could not be started ({_short(e)})"
    return f"the MCP server {name} ended ({_short(e)})"
