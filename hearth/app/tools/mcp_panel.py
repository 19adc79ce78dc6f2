"""The preset manager's MCP servers row: which of the user's MCP servers a preset's tool set
includes (checkable), adding servers (by hand or from `mcpServers` JSON) and removing them."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from .mcp_dialog import McpServerDialog
from .mcp_servers import McpServers


class McpServerList(QWidget):
    def __init__(self, servers: McpServers, parent=None):
        super().__init__(parent)
        self.servers = servers
        self.dialog: McpServerDialog | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        head.addWidget(QLabel("MCP tool servers (their tools join the preset's)", objectName="panelTitle"))
        head.addStretch(1)
        self.addButton = QPushButton("Add MCP server…", objectName="mcpAdd")
        self.removeButton = QPushButton("Remove", objectName="mcpRemove")
        head.addWidget(self.addButton)
        head.addWidget(self.removeButton)
        lay.addLayout(head)
        self.list = QListWidget(objectName="mcpServerList")
        self.list.setMaximumHeight(96)
        lay.addWidget(self.list)
        self.addButton.clicked.connect(self.open_add)
        self.removeButton.clicked.connect(self.remove_current)
        self._checked: list[str] = []

    def show_for(self, names: list[str]) -> None:
        """List every server, checked where the preset uses it (a used name no longer configured
        is kept, marked missing, so saving does not drop it silently)."""
        self._checked = list(names)
        self.list.clear()
        known = self.servers.all()
        for cfg in known:
            self._item(cfg.name, f"{cfg.name} — {cfg.command_line()}", cfg.name in names)
        for n in names:
            if n not in {c.name for c in known}:
                self._item(n, f"{n} — not configured", True)

    def _item(self, name: str, text: str, checked: bool) -> None:
        it = QListWidgetItem(text)
        it.setData(Qt.ItemDataRole.UserRole, name)
        it.setFlags(it.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        it.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
        it.setToolTip(text)
        self.list.addItem(it)

    def checked(self) -> list[str]:
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count())
                if self.list.item(i).checkState() == Qt.CheckState.Checked]

    def set_checked(self, name: str, on: bool = True) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == name:
                self.list.item(i).setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)

    def open_add(self) -> McpServerDialog:
        dlg = self.dialog = McpServerDialog(self.servers, self)
        dlg.accepted.connect(lambda: self._after_add(dlg.added))
        dlg.open()
        return dlg

    def _after_add(self, names: list[str]) -> None:
        keep = self.checked()
        self.show_for(keep + [n for n in names if n not in keep])

    def remove_current(self) -> None:
        it = self.list.currentItem()
        if it is not None:
            keep = [n for n in self.checked() if n != it.data(Qt.ItemDataRole.UserRole)]
            self.servers.remove(it.data(Qt.ItemDataRole.UserRole))
            self.show_for(keep)
