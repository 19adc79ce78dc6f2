"""The MCP servers the user adds: kept in the settings, tokens like remote servers' API keys,
approval of local command lines, and the preset manager's row and add dialog."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from hearth.app.tools.mcp_servers import SERVICE, McpServers
from hearth.app.presets.preset_manager import PresetManager
from hearth.app.store.preset_store import PresetStore
from hearth.app.servers.remote_servers import KeyStore
from hearth.app.store.settings import Settings
from hearth.engine.tools.mcp import McpConfigError, McpServerConfig

DOC = """{"mcpServers": {
  "files": {"command": "npx", "args": ["-y", "server-files", "/tmp"], "env": {"ROOT": "/tmp"}},
  "search": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer tok-1"}}}}"""


def test_servers_are_imported_kept_and_removed(qapp):
    s = McpServers(Settings(), KeyStore(Settings(), None, service=SERVICE, setting="mcp/keys"))
    assert [c.name for c in s.import_json(DOC)] == ["files", "search"]
    again = McpServers(Settings(), KeyStore(Settings(), None, service=SERVICE, setting="mcp/keys"))
    assert again.get("files") == McpServerConfig("files", "npx", ("-y", "server-files", "/tmp"), {"ROOT": "/tmp"})
    assert again.token("search") == "tok-1" and again.token("files") == ""
    assert Settings().get("remote/keys") == []                  # apart from the remote servers' keys
    with pytest.raises(McpConfigError):
        s.import_json('{"mcpServers": {"x": {}}}')
    assert s.names() == ["files", "search"]                      # nothing half-added
    s.remove("search")
    assert s.names() == ["files"] and s.token("search") == ""


def test_a_token_goes_to_the_keyring_when_one_is_usable(qapp):
    class Mem:                           # a keyring module with a usable backend, in memory
        def __init__(self):
            self.store = {}

        def get_password(self, service, user):
            return self.store.get((service, user))

        def set_password(self, service, user, pw):
            self.store[(service, user)] = pw

        def delete_password(self, service, user):
            self.store.pop((service, user))

        def get_keyring(self):
            return self
    kr = Mem()
    s = McpServers(Settings(), KeyStore(Settings(), kr, service=SERVICE, setting="mcp/keys"))
    assert s.add(McpServerConfig("web", url="http://127.0.0.1:9/mcp"), "tok-2") == "keyring"
    assert kr.store[(SERVICE, "web")] == "tok-2" and s.token("web") == "tok-2"
    s.settings.sync()
    assert "tok-2" not in Path(s.settings._q.fileName()).read_text()


def test_a_local_command_needs_approval_of_its_exact_command_line(qapp):
    s = McpServers(Settings())
    cfg = McpServerConfig("files", "npx", ("server-files", "/tmp"))
    assert not s.approved(cfg)
    s.approve(cfg)
    assert s.approved(cfg) and McpServers(Settings()).approved(cfg)
    assert not s.approved(McpServerConfig("files", "npx", ("server-files", "/")))      # another command
    assert not s.approved(McpServerConfig("files", "npx", ("server-files", "/tmp"), {"X": "1"}))
    assert s.approved(McpServerConfig("web", url="http://127.0.0.1:9/mcp"))           # nothing runs here


def test_the_preset_manager_adds_a_server_and_a_preset_keeps_it(qtbot, qapp, tmp_path):
    store = PresetStore(tmp_path / "presets.json")
    servers = McpServers(Settings())
    dlg = PresetManager(store, None, mcp=servers)
    qtbot.addWidget(dlg)
    pid = store.presets[0].id
    dlg.select(pid)
    add = dlg.mcpServers.open_add()
    add.nameEdit.setText("notes")
    add.commandEdit.setText("uvx 'notes server' --root ~/my\\ notes")
    add.envEdit.setPlainText("API_MODE=fast\nbroken line")
    qtbot.mouseClick(add.addButton, Qt.MouseButton.LeftButton)
    assert "is not KEY=value" in add.errorLabel.text() and servers.names() == []
    add.envEdit.setPlainText("API_MODE=fast")
    qtbot.mouseClick(add.addButton, Qt.MouseButton.LeftButton)
    cfg = servers.get("notes")
    assert cfg.command == "uvx" and cfg.args == ("notes server", "--root", "~/my notes") and cfg.env == {"API_MODE": "fast"}
    assert dlg.mcpServers.checked() == ["notes"]                # a server just added is ticked
    add = dlg.mcpServers.open_add()
    add.tabs.setCurrentIndex(1)
    add.jsonEdit.setPlainText("{not json")
    assert not add.add() and "not JSON" in add.errorLabel.text()
    add.jsonEdit.setPlainText(DOC)
    assert add.add() and servers.names() == ["notes", "files", "search"]
    assert dlg.mcpServers.checked() == ["notes", "files", "search"]
    dlg.mcpServers.set_checked("files", False)
    assert dlg.save()
    assert store.get(pid).mcp_servers == ["notes", "search"]
    assert PresetStore(tmp_path / "presets.json").get(pid).mcp_servers == ["notes", "search"]
    dlg.select(pid)
    assert dlg.mcpServers.checked() == ["notes", "search"]


def test_mcp_tools_never_shadow_a_built_in_or_the_presets_own(qapp):
    from hearth.app.tools.mcp_tools import McpTools
    from hearth.engine.chat.preset_format import Preset
    t = McpTools(McpServers(Settings()))
    own = {"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}
    preset = Preset("p", "P", "", [own], mcp_servers=["srv"])
    t._preset = preset                      # as use(preset) leaves it once srv is up
    t._listed["srv"] = [{"name": n, "inputSchema": {"type": "object"}} for n in ("calculator", "lookup_order", "add")]
    names = [d["function"]["name"] for d in t.tools_for(preset)]
    assert names == ["lookup_order", "srv_calculator", "srv_lookup_order", "add"]
    assert set(t.runs()) == {"srv_calculator", "srv_lookup_order", "add"}
    assert t.origin("add") == "MCP server srv" and t.origin("lookup_order") == ""
    t.close()
