"""Adding MCP tool servers: one by hand (a command line or a URL, environment variables, a token),
or every server of a pasted `mcpServers` JSON document (the format other apps use)."""

from __future__ import annotations

import shlex

from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QPlainTextEdit,
                               QTabWidget, QVBoxLayout, QWidget)

from hearth.engine.tools.mcp import McpConfigError, McpServerConfig

from .mcp_servers import McpServers


class McpServerDialog(QDialog):
    def __init__(self, servers: McpServers, parent=None):
        super().__init__(parent)
        self.setObjectName("mcpServerDialog")
        self.setWindowTitle("Add MCP servers")
        self.resize(620, 420)
        self.servers = servers
        self.added: list[str] = []
        self.tabs = QTabWidget()
        one = QWidget()
        form = QFormLayout(one)
        self.nameEdit = QLineEdit(objectName="mcpName", placeholderText="files")
        self.commandEdit = QLineEdit(objectName="mcpCommand",
                                     placeholderText="npx -y @modelcontextprotocol/server-filesystem ~/notes  "
                                                     "or  http://127.0.0.1:8000/mcp")
        self.envEdit = QPlainTextEdit(objectName="mcpEnv", placeholderText="KEY=value, one a line")
        self.envEdit.setMaximumHeight(90)
        self.tokenEdit = QLineEdit(objectName="mcpToken", echoMode=QLineEdit.EchoMode.Password,
                                   placeholderText="only for a URL; sent as a bearer token")
        form.addRow("Name", self.nameEdit)
        form.addRow("Command or URL", self.commandEdit)
        form.addRow("Environment", self.envEdit)
        form.addRow("Token", self.tokenEdit)
        form.addRow(QLabel(f"A token is kept in {servers.keys.where()}. A local command runs only after "
                           "you approve it, the first time a preset that uses it is chosen.",
                           wordWrap=True, objectName="hint"))
        self.tabs.addTab(one, "One server")
        self.jsonEdit = QPlainTextEdit(objectName="mcpJson",
                                       placeholderText='{"mcpServers": {"files": {"command": "npx", "args": '
                                                       '["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}}}')
        self.tabs.addTab(self.jsonEdit, "Paste mcpServers JSON")
        self.errorLabel = QLabel("", objectName="presetError", wordWrap=True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.addButton = buttons.addButton("Add", QDialogButtonBox.ButtonRole.AcceptRole)
        self.addButton.clicked.connect(self.add)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.tabs, 1)
        lay.addWidget(self.errorLabel)
        lay.addWidget(buttons)

    def config(self) -> tuple[McpServerConfig, str]:
        """The server of the first tab; raises McpConfigError naming the field."""
        line = self.commandEdit.text().strip()
        env = {}
        for row in self.envEdit.toPlainText().splitlines():
            if row.strip():
                k, eq, v = row.partition("=")
                if not eq or not k.strip():
                    raise McpConfigError(f"Environment: {row.strip()!r} is not KEY=value")
                env[k.strip()] = v.strip()
        if line.startswith(("http://", "https://")):
            d = {"name": self.nameEdit.text().strip(), "url": line}
        else:
            try:
                parts = shlex.split(line)
            except ValueError as e:
                raise McpConfigError(f"Command: {e}") from None
            d = {"name": self.nameEdit.text().strip(), "command": parts[0] if parts else "", "args": parts[1:],
                 "env": env}
        return McpServerConfig.from_json(d), self.tokenEdit.text().strip()

    def add(self) -> bool:
        try:
            if self.tabs.currentIndex() == 0:
                cfg, token = self.config()
                self.servers.add(cfg, token)
                self.added = [cfg.name]
            else:
                self.added = [c.name for c in self.servers.import_json(self.jsonEdit.toPlainText())]
        except McpConfigError as e:
            self.errorLabel.setText(str(e))
            return False
        self.accept()
        return True
