"""A small MCP server for the tests, written with the official SDK.

    python tests/mcp_test_server.py                       # stdio
    python tests/mcp_test_server.py --http PORT --lifetime S   # streamable HTTP on 127.0.0.1, exits after S s

Tools: add (numbers), slow_echo (sleeps `seconds` first), huge (a result of `n` characters), crash
(the process dies mid-call), picture (an image result), fail (an error result), grow (adds the tool `grown` while running). With MCP_TEST_STATE
naming a file that holds "v2", the list also has `multiply`: a server whose tool list changes
between runs. MCP_TEST_PIDFILE: the process writes its pid there (the tests check it is gone).
MCP_TEST_TOKEN: over HTTP, the bearer token every request must carry.
Hostile variants: MCP_TEST_DEEP=N adds the tool `deep`, whose input schema nests N objects;
MCP_TEST_STDERR_BYTES=N writes N bytes to stderr at start; MCP_TEST_DESCRIPTION gives `add` that
description.
"""

from __future__ import annotations

import argparse
import base64
import os
import threading
import time
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Image, MCPServer

TOKEN = os.environ.get("MCP_TEST_TOKEN", "")


class _HostileListing(MCPServer):
    """The SDK's server, whose tool listing a hostile variant rewrites as it goes out: a 'deep' tool's
    input schema nested MCP_TEST_DEEP levels, the 'add' tool's description MCP_TEST_DESCRIPTION."""

    async def list_tools(self):
        tools = await super().list_tools()
        depth, description = int(os.environ.get("MCP_TEST_DEEP", "0")), os.environ.get("MCP_TEST_DESCRIPTION")
        for t in tools:
            if t.name == "deep" and depth:
                t.input_schema = deep_schema(depth)
            if t.name == "add" and description:
                t.description = description
        return tools


class _Verifier:
    """Over HTTP with MCP_TEST_TOKEN set, a request needs that bearer token."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(token=token, client_id="hearth-test", scopes=[]) if token == TOKEN else None


server = _HostileListing("hearth-test", token_verifier=_Verifier() if TOKEN else None,
                   auth=AuthSettings(issuer_url="http://127.0.0.1:9", resource_server_url=None) if TOKEN else None)


@server.tool(description="Add two numbers and return the sum.")
def add(a: float, b: float) -> str:
    s = a + b
    return str(int(s)) if s == int(s) else str(s)


@server.tool(description="Wait the given number of seconds, then echo the text.")
def slow_echo(text: str, seconds: float) -> str:
    time.sleep(seconds)
    return text


@server.tool(description="Return a text of n characters.")
def huge(n: int) -> str:
    return ("0123456789" * (n // 10 + 1))[:n]


@server.tool(description="Crash the server.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Return a small picture.")
def picture() -> Image:
    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    return Image(data=png, format="png")


@server.tool(description="Always fails.")
def fail(reason: str) -> str:
    raise ValueError(f"failed on purpose: {reason}")


@server.tool(description="Add the tool `grown` to this server's list.")
def grow() -> str:
    server.add_tool(lambda: "grown", name="grown", description="A tool added while running.")
    return "ok"


def multiply(a: float, b: float) -> str:
    return str(a * b)


def deep_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def hostile_variants() -> None:
    depth = int(os.environ.get("MCP_TEST_DEEP", "0"))
    if depth:
        server.add_tool(lambda x=None: "deep", name="deep", description="A tool with a deep input schema.")
    n = int(os.environ.get("MCP_TEST_STDERR_BYTES", "0"))
    line = b"log line from the test server, over and over\n"
    while n > 0:
        os.write(2, line[:n] * min(4096, max(1, n // len(line))))
        n -= len(line) * min(4096, max(1, n // len(line)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", type=int, default=0)
    ap.add_argument("--lifetime", type=float, default=120.0)
    args = ap.parse_args()
    state = os.environ.get("MCP_TEST_STATE")
    if state and Path(state).is_file() and Path(state).read_text().strip() == "v2":
        server.add_tool(multiply, description="Multiply two numbers.")
    hostile_variants()
    pidfile = os.environ.get("MCP_TEST_PIDFILE")
    if pidfile:
        Path(pidfile).write_text(str(os.getpid()))
    # A test server never outlives its test run, whatever happens to the client.
    threading.Timer(args.lifetime, lambda: os._exit(0)).start()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
