"""The chosen preset's MCP servers, GUI side: approve, start, stop, and their tools for the chat.

A stdio server starts only after the user approved its full command line once (remembered), and
only while the chosen preset uses it; choosing a preset that does not stops it, and so does quit.
Starting happens on the McpManager's loop thread; the result comes back by a queued signal. Until
a server is up (or when it failed, crashed or hung) the preset works without its tools.

    tools.use(preset)            # the preset chosen: start what it needs, stop the rest
    tools.tools_for(preset)      # its tool definitions: its own, then its running servers' (in the prefix)
    tools.runs()                 # {tool name: run(args, ctx)} for ToolRegistry.for_tool_set

Signals:
    toolsChanged()               a server's tool list joined or left: the preset's prefix changes
    notice(str)                  a readable sentence for the chat (a start failure, a crash)
    noticeGone(str)              that sentence no longer holds: the chosen preset does not use the
                                 server, or the server started; the banner showing it can go
    approvalNeeded(str, str)     (server name, full command line): ask the user, then approve()/deny()
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from hearth.engine.tools import BUILTIN_TOOLS, ToolError
from hearth.engine.tools.mcp import CALL_TIMEOUT_S, MAX_RESULT_CHARS, McpManager, hearth_tools

from .mcp_servers import McpServers


class McpTools(QObject):
    toolsChanged = Signal()
    notice = Signal(str)
    noticeGone = Signal(str)
    approvalNeeded = Signal(str, str)
    _started = Signal(str, int, object, str)    # (name, serial, tool list or None, error) from the loop
    _exited = Signal(str, int, str)
    _relisted = Signal(str, int, object)

    def __init__(self, servers: McpServers, log_dir=None, parent=None):
        super().__init__(parent)
        self.servers = servers
        self.log_dir = log_dir
        self.call_timeout_s = CALL_TIMEOUT_S
        self.max_result_chars = MAX_RESULT_CHARS
        self._manager: McpManager | None = None
        self._listed: dict[str, list] = {}     # running server -> its MCP tool list
        self._starting: dict[str, int] = {}    # server -> serial of its start in flight
        self._asked: set[str] = set()          # waiting for the user's approval
        self._denied: set[str] = set()         # not approved (asked again next run of the app)
        self._wanted: list[str] = []
        self._preset = None
        self._serial = 0
        self._serial_of: dict[str, int] = {}   # running server -> the start it came from
        self._closed = False
        self._notices: dict[str, str] = {}     # server -> the notice about it still standing
        self._started.connect(self._on_started)
        self._exited.connect(self._on_exited)
        self._relisted.connect(self._on_relisted)

    @property
    def manager(self) -> McpManager:
        if self._manager is None:
            self._manager = McpManager(self.log_dir)
        return self._manager

    def running(self) -> list[str]:
        return list(self._listed)

    # -- the chosen preset ----------------------------------------------------------------------------
    def use(self, preset) -> None:
        known = set(self.servers.names())
        self._preset = preset
        self._wanted = [n for n in preset.mcp_servers if n in known]
        for n in [n for n in self._notices if n not in self._wanted]:
            self.noticeGone.emit(self._notices.pop(n))
        gone = [n for n in list(self._listed) + list(self._starting) if n not in self._wanted]
        for n in gone:
            self._stop(n)
        if any(n in self._listed for n in gone):
            self.toolsChanged.emit()
        for n in self._wanted:
            if n in self._listed or n in self._starting or n in self._asked or n in self._denied:
                continue
            cfg = self.servers.get(n)
            if not self.servers.approved(cfg):
                self._asked.add(n)
                self.approvalNeeded.emit(n, cfg.command_line())
            else:
                self._start(n)

    def approve(self, name: str) -> None:
        self._asked.discard(name)
        cfg = self.servers.get(name)
        if cfg is None:
            return
        self.servers.approve(cfg)
        if name in self._wanted:
            self._start(name)

    def deny(self, name: str) -> None:
        self._asked.discard(name)
        self._denied.add(name)
        self._notify(name, f"The MCP server {name} was not started; the preset works without its tools.")

    def tools_for(self, preset) -> list[dict]:
        return list(preset.tools) + [t.definition for t in self._mcp_tools(preset)]

    def runs(self) -> dict:
        """Implementations of the chosen preset's MCP tools, by the names tools_for gives them."""
        if self._preset is None:
            return {}
        return {t.name: self._runner(t.server, t.mcp_name) for t in self._mcp_tools(self._preset)}

    def origin(self, tool_name: str) -> str:
        """Where a tool of the chosen preset runs, in words; "" for the app's own."""
        t = next((t for t in self._mcp_tools(self._preset) if t.name == tool_name), None) if self._preset else None
        return f"MCP server {t.server}" if t else ""

    def _mcp_tools(self, preset) -> list:
        taken = set(BUILTIN_TOOLS) | {t["function"]["name"] for t in preset.tools}   # never shadow a built-in
        out = []
        for n in preset.mcp_servers:
            if n in self._listed:
                out += hearth_tools(n, self._listed[n], taken)[0]
        return out

    def _runner(self, server: str, mcp_name: str):
        def run(args: dict, context) -> str:       # a tool thread: blocks on the loop thread, bounded
            r = self.manager.call(server, mcp_name, args, self.call_timeout_s, self.max_result_chars)
            if r.is_error:
                raise ToolError(r.content.removeprefix("Error: "))
            return r.content
        return run

    # -- starting and stopping ------------------------------------------------------------------------
    def _start(self, name: str) -> None:
        if self._closed:
            return
        cfg = self.servers.get(name)
        self._serial += 1
        serial = self._serial
        self._starting[name] = serial
        token = self.servers.token(name) if cfg.url else ""

        def done(fut) -> None:         # the loop thread
            e = fut.exception()
            self._started.emit(name, serial, None if e else fut.result(), str(e) if e else "")
        fut = self.manager.start(cfg, token, on_exit=lambda n, msg: self._exited.emit(n, serial, msg))
        fut.add_done_callback(done)

    def _on_started(self, name: str, serial: int, tools, error: str) -> None:
        if self._starting.get(name) != serial:
            return          # stopped (or restarted) meanwhile
        del self._starting[name]
        if tools is None:
            self._notify(name, f"{error[0].upper()}{error[1:]}. The preset works without its tools.")
            self._denied.add(name)      # not retried until the preset is chosen again
            return
        self._listed[name] = list(tools)
        self._serial_of[name] = serial
        self.servers.remember_tools(name, tools)
        if name in self._notices:
            self.noticeGone.emit(self._notices.pop(name))
        self.toolsChanged.emit()

    def _on_exited(self, name: str, serial: int, message: str) -> None:
        if name not in self._listed or self._serial_of.get(name) != serial:
            return
        del self._listed[name]
        self._denied.add(name)
        self._notify(name, f"{message[0].upper()}{message[1:]}. Its tools are gone from this chat until the "
                           "preset is chosen again.")
        self.toolsChanged.emit()

    def _notify(self, name: str, text: str) -> None:
        self._notices[name] = text
        self.notice.emit(text)

    def _stop(self, name: str) -> None:
        self._starting.pop(name, None)
        self._listed.pop(name, None)
        if self._manager is not None:
            self._manager.stop(name, wait=False)

    def chosen(self) -> None:
        """The user chose a preset: its servers that failed or were denied are tried again, and the
        running ones list their tools again (a changed list changes the prefix: toolsChanged)."""
        self._denied.clear()
        for name in self.running():
            serial = self._serial_of.get(name)

            def done(fut, name=name, serial=serial) -> None:     # the loop thread
                if fut.exception() is None:
                    self._relisted.emit(name, serial, fut.result())
            self.manager.list_tools(name).add_done_callback(done)

    def _on_relisted(self, name: str, serial: int, tools) -> None:
        if self._serial_of.get(name) != serial or name not in self._listed:
            return
        before = [t.model_dump() for t in self._listed[name]]
        if [t.model_dump() for t in tools] != before:
            self._listed[name] = list(tools)
            self.servers.remember_tools(name, tools)
            self.toolsChanged.emit()

    def close(self) -> None:
        """At quit: every server stops (its process ends)."""
        self._closed = True
        self._starting.clear()
        self._listed.clear()
        if self._manager is not None:
            self._manager.close()
