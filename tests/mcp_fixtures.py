"""The test MCP server (tests/mcp_test_server.py) as a stdio config, or running over streamable
HTTP on 127.0.0.1 for a bounded time; and a check that a process is gone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from hearth.engine.tools.mcp import McpServerConfig

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))


def stdio_config(name: str, tmp: Path, lifetime_s: float = 120.0) -> McpServerConfig:
    """Its pid goes to tmp/<name>.pid; tmp/<name>.state holding "v2" adds the `multiply` tool."""
    return McpServerConfig(name, sys.executable, (SERVER, "--lifetime", str(lifetime_s)),
                           {"MCP_TEST_PIDFILE": str(tmp / f"{name}.pid"),
                            "MCP_TEST_STATE": str(tmp / f"{name}.state")})


def pid_of(name: str, tmp: Path, timeout_s: float = 30.0) -> int:
    f = tmp / f"{name}.pid"
    end = time.monotonic() + timeout_s
    while not f.exists() or not f.read_text().strip():
        if time.monotonic() > end:
            raise TimeoutError(f"{name} wrote no pid")
        time.sleep(0.05)
    return int(f.read_text())


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):   # gone before or while its stat was read
        return False


def wait_gone(pid: int, timeout_s: float = 15.0) -> bool:
    end = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """The test server over streamable HTTP; it exits by itself after `lifetime_s` whatever happens."""

    def __init__(self, lifetime_s: float = 90.0, token: str = ""):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen([sys.executable, SERVER, "--http", str(self.port), "--lifetime", str(lifetime_s)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, MCP_TEST_TOKEN=token))
        end = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError("the HTTP test server did not come up") from None
                time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
