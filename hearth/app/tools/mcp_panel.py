"""The preset manager's MCP servers: which of the user's MCP servers a preset's tool set includes
(checkable), each server's tools under it (as the server last listed them: name, description, on
or off for this preset), adding servers (by hand or from `mcpServers` JSON) and removing them."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from .mcp_dialog import McpServerDialog
from .mcp_servers import McpServers

NAME, STATE, DESCRIPTION = range(3)


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
        self.list = QTreeWidget(objectName="mcpServerList")
        self.list.setHeaderLabels(["Server / tool", "In this preset", "Description"])
        self.list.setColumnWidth(NAME, 220)
        self.list.setColumnWidth(STATE, 110)
        self.list.setMinimumHeight(110)
        self.list.setUniformRowHeights(True)
        lay.addWidget(self.list)
        self.addButton.clicked.connect(self.open_add)
        self.removeButton.clicked.connect(self.remove_current)
        self.list.itemChanged.connect(self._on_changed)

    def show_for(self, names: list[str]) -> None:
        """List every server, checked where the preset uses it (a used name no longer configured
        is kept, marked missing, so saving does not drop it silently), and its tools under it."""
        self.list.blockSignals(True)
        self.list.clear()
        known = self.servers.all()
        for cfg in known:
            self._server(cfg.name, f"{cfg.name} — {cfg.command_line()}", cfg.name in names)
        for n in names:
            if n not in {c.name for c in known}:
                self._server(n, f"{n} — not configured", True)
        self.list.expandAll()
        self.list.blockSignals(False)

    def _server(self, name: str, text: str, checked: bool) -> None:
        it = QTreeWidgetItem([text, "", ""])
        it.setData(NAME, Qt.ItemDataRole.UserRole, name)
        it.setFlags(it.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        it.setCheckState(NAME, Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
        it.setToolTip(NAME, text)
        self.list.addTopLevelItem(it)
        tools = self.servers.tools_of(name)
        if tools is None:
            note = QTreeWidgetItem(["(its tools are listed once the server has started)", "", ""])
            it.addChild(note)
            note.setFirstColumnSpanned(True)
        for t in tools or []:
            child = QTreeWidgetItem([t["name"], "", t["description"] or "(no description)"])
            child.setData(NAME, Qt.ItemDataRole.UserRole, t.get("left_out", ""))
            child.setToolTip(DESCRIPTION, t["description"])
            it.addChild(child)
        self._states(it)

    def _states(self, server: QTreeWidgetItem) -> None:
        """Each tool's state follows its server's box: on when the preset uses the server."""
        on = server.checkState(NAME) == Qt.CheckState.Checked
        server.setText(STATE, "used" if on else "not used")
        for i in range(server.childCount()):
            child = server.child(i)
            why = child.data(NAME, Qt.ItemDataRole.UserRole)
            if child.text(DESCRIPTION) == "":
                continue                     # the "not known yet" line
            child.setText(STATE, "left out" if why else "on" if on else "off")
            child.setToolTip(STATE, f"Hearth cannot use it: {why}" if why else "")

    def _on_changed(self, item: QTreeWidgetItem, column: int) -> None:
        if item.parent() is None and column == NAME:
            self.list.blockSignals(True)
            self._states(item)
            self.list.blockSignals(False)

    def _servers(self) -> list[QTreeWidgetItem]:
        return [self.list.topLevelItem(i) for i in range(self.list.topLevelItemCount())]

    def tool_rows(self, server: str) -> list[tuple[str, str, str]]:
        """(tool, state, description) as listed under `server`."""
        it = next((s for s in self._servers() if s.data(NAME, Qt.ItemDataRole.UserRole) == server), None)
        return [] if it is None else [(it.child(i).text(NAME), it.child(i).text(STATE), it.child(i).text(DESCRIPTION))
                                      for i in range(it.childCount())]

    def checked(self) -> list[str]:
        return [s.data(NAME, Qt.ItemDataRole.UserRole) for s in self._servers()
                if s.checkState(NAME) == Qt.CheckState.Checked]

    def set_checked(self, name: str, on: bool = True) -> None:
        for s in self._servers():
            if s.data(NAME, Qt.ItemDataRole.UserRole) == name:
                s.setCheckState(NAME, Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)

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
        while it is not None and it.parent() is not None:
            it = it.parent()
        if it is not None:
            name = it.data(NAME, Qt.ItemDataRole.UserRole)
            keep = [n for n in self.checked() if n != name]
            self.servers.remove(name)
            self.show_for(keep)
