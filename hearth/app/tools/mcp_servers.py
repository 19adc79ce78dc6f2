"""The MCP tool servers the user added, their tokens and the commands they approved.

Kept in the settings: `mcp/servers` ([{name, command, args, env} or {name, url}, each with "token":
"keyring" | "settings" | ""]), `mcp/approved` (the full command lines the user allowed to run),
`mcp/tools` (each server's tools as it last listed them, for the preset editor). A
token is kept like a remote server's API key (app/remote_servers.KeyStore: the platform keyring
when usable, else the settings file, and the dialog says which).
"""

from __future__ import annotations

from hearth.engine.tools.mcp import McpConfigError, McpServerConfig, hearth_tools, parse_mcp_servers

from ..servers.remote_servers import KeyStore
from ..store.settings import Settings

SERVICE = "Hearth MCP server"


class McpServers:
    """GUI thread, except `token()` (any thread: KeyStore.get)."""

    def __init__(self, settings: Settings, keys: KeyStore | None = None):
        self.settings = settings
        self.keys = keys or KeyStore(settings, service=SERVICE, setting="mcp/keys")

    def all(self) -> list[McpServerConfig]:
        out = []
        for d in self.settings.get("mcp/servers"):
            try:
                out.append(McpServerConfig.from_json({k: v for k, v in d.items() if k != "token"}))
            except (McpConfigError, AttributeError):
                continue        # a hand-edited entry that cannot be used is not offered
        return out

    def names(self) -> list[str]:
        return [c.name for c in self.all()]

    def get(self, name: str) -> McpServerConfig | None:
        return next((c for c in self.all() if c.name == name), None)

    def token(self, name: str) -> str:
        return self.keys.get(name) or ""

    def add(self, config: McpServerConfig, token: str = "") -> str:
        """Add or replace the server of that name; returns where its token went."""
        where = self.keys.set(config.name, token) if config.url else ""
        entries = [d for d in self.settings.get("mcp/servers") if d.get("name") != config.name]
        self.settings.set("mcp/servers", entries + [dict(config.to_json(), token=where)])
        return where

    def import_json(self, text: str) -> list[McpServerConfig]:
        """Every server of an `mcpServers` document; raises McpConfigError (none added) if one is bad."""
        found = parse_mcp_servers(text)
        for config, token in found:
            self.add(config, token)
        return [c for c, _ in found]

    def remove(self, name: str) -> None:
        self.settings.set("mcp/tools", [r for r in self.settings.get("mcp/tools") if r.get("server") != name])
        self.keys.forget(name)
        self.settings.set("mcp/servers", [d for d in self.settings.get("mcp/servers") if d.get("name") != name])

    # -- approval of local commands -------------------------------------------------------------------
    def remember_tools(self, name: str, listed: list) -> None:
        """Keep a server's tool list as it last listed it (mcp_types.Tool or dicts), so the preset
        editor can show it while the server is not running; a tool Hearth cannot use says why."""
        _, notes = hearth_tools(name, listed, set())
        rows = []
        for t in listed:
            d = t if isinstance(t, dict) else t.model_dump(by_alias=True, exclude_none=True)
            mark = f"tool {d.get('name', '')!r} left out "
            why = next((n.split(mark, 1)[1].strip("()") for n in notes if mark in n), "")
            rows.append({"server": name, "name": d.get("name", ""),
                         "description": d.get("description") or d.get("title") or "", "left_out": why})
        others = [r for r in self.settings.get("mcp/tools") if r.get("server") != name]
        self.settings.set("mcp/tools", others + rows)

    def tools_of(self, name: str) -> list[dict] | None:
        """A server's tools as last listed ({name, description, left_out}); None if never listed."""
        rows = [r for r in self.settings.get("mcp/tools") if r.get("server") == name]
        return rows or None

    def approved(self, config: McpServerConfig) -> bool:
        return config.kind == "http" or config.command_line() in self.settings.get("mcp/approved")

    def approve(self, config: McpServerConfig) -> None:
        line = config.command_line()
        if line not in (ok := self.settings.get("mcp/approved")):
            self.settings.set("mcp/approved", ok + [line])
