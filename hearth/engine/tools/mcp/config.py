"""MCP server configurations: one server is a local command (stdio) or a URL (streamable HTTP).

The `mcpServers` JSON other apps use is imported as it is:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "some-server", "/tmp"], "env": {"KEY": "v"}},
        "search": {"url": "http://127.0.0.1:8765/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A bare mapping of names to servers (without the "mcpServers" wrapper) is accepted too. A bearer
token in `headers.Authorization` is taken out as the server's token (the app keeps tokens apart
from the settings, like remote servers' API keys).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field

from ...errors import EngineError

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class McpConfigError(EngineError, ValueError):
    """A server configuration that cannot be used; the message names the server and the field."""


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    command: str = ""                              # stdio: the executable ...
    args: tuple[str, ...] = ()                     # ... and its arguments
    env: dict = field(default_factory=dict)        # stdio: extra environment variables
    url: str = ""                                  # streamable HTTP: the endpoint

    @property
    def kind(self) -> str:
        return "http" if self.url else "stdio"

    def command_line(self) -> str:
        """The full command line, environment included, as the user approves it."""
        if self.url:
            return self.url
        env = [f"{k}={shlex.quote(str(v))}" for k, v in sorted(self.env.items())]
        return " ".join(env + [shlex.join([self.command, *self.args])])

    def to_json(self) -> dict:
        d = asdict(self)
        d["args"] = list(self.args)
        return {k: v for k, v in d.items() if v or k == "name"}

    @classmethod
    def from_json(cls, d, where: str = "server") -> "McpServerConfig":
        if not isinstance(d, dict):
            raise McpConfigError(f"{where}: expected an object")
        return _config(d.get("name"), d, where)[0]


def _config(name, d: dict, where: str) -> tuple[McpServerConfig, str]:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise McpConfigError(f"{where}: the name {name!r} must be 1-32 letters, digits, '_' or '-'")
    command, url = d.get("command", ""), d.get("url", "") or d.get("serverUrl", "")
    if bool(command) == bool(url):
        raise McpConfigError(f"{where}: give either a command (a local server) or a url, not "
                             f"{'both' if command else 'neither'}")
    if command and not isinstance(command, str):
        raise McpConfigError(f"{where}.command: must be a string")
    if url and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise McpConfigError(f"{where}.url: must be an http:// or https:// URL")
    args = d.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise McpConfigError(f"{where}.args: must be a list of strings")
    env = d.get("env", {}) or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                            for k, v in env.items()):
        raise McpConfigError(f"{where}.env: must map variable names to strings")
    token = ""
    headers = d.get("headers", {}) or {}
    auth = headers.get("Authorization", "") if isinstance(headers, dict) else ""
    if isinstance(auth, str) and auth.lower().startswith("bearer "):
        token = auth[7:].strip()
    cfg = McpServerConfig(name, command or "", tuple(str(a) for a in args),
                          {k: str(v) for k, v in env.items()}, url or "")
    return cfg, token


def parse_mcp_servers(text_or_doc) -> list[tuple[McpServerConfig, str]]:
    """(config, token) for every server of an `mcpServers` document (text or parsed JSON).
    Raises McpConfigError naming the first bad server; nothing is returned half-read."""
    doc = text_or_doc
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError as e:
            raise McpConfigError(f"not JSON: {e}") from None
    if isinstance(doc, dict) and "mcpServers" in doc:
        doc = doc["mcpServers"]
    if not isinstance(doc, dict) or not doc:
        raise McpConfigError('expected {"mcpServers": {"name": {"command": ...} or {"url": ...}}}')
    out = []
    for name, d in doc.items():
        if not isinstance(d, dict):
            raise McpConfigError(f"mcpServers.{name}: expected an object")
        out.append(_config(name, d, f"mcpServers.{name}"))
    return out
