"""The bar above the message box that asks before a tool runs.

    Allow / Deny / Always allow for this chat     a built-in tool (calculator, date, units, fetch)
    Pick a file… / Deny                           read_file: only the file picked can be read
    Read it / Pick another… / Deny                read_file, when the file picked is a link: the bar
                                                  says where it leads before anything is read
    [type the result] Send result / Deny          a custom tool with no implementation

It follows a ToolFlow: shown on confirmRequested, hidden on confirmCleared; its buttons answer
the flow. Enter in the result box sends; Esc is the window's (Stop ends the round).
"""

from __future__ import annotations

import json
import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from hearth.engine.system.files import link_target

from .tool_flow import ToolFlow


class ToolConfirmBar(QFrame):
    def __init__(self, flow: ToolFlow, parent=None):
        super().__init__(parent)
        self.setObjectName("toolConfirm")
        self.flow = flow
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        lay.setSpacing(6)
        self.text = QLabel("", objectName="toolConfirmText", wordWrap=True)
        self.text.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.text)
        row = QHBoxLayout()
        row.setSpacing(6)
        self.resultEdit = QLineEdit(objectName="toolResultEdit", placeholderText="Type the tool's result…")
        self.resultEdit.returnPressed.connect(self._on_send_result)
        self.sendResultButton = QPushButton("Send result", objectName="toolSendResultButton")
        self.sendResultButton.clicked.connect(self._on_send_result)
        self.pickFileButton = QPushButton("Pick a file…", objectName="toolPickFileButton")
        self.pickFileButton.clicked.connect(self._on_pick_file)
        self.allowButton = QPushButton("Allow", objectName="toolAllowButton")
        self.allowButton.clicked.connect(self._on_allow)
        self.alwaysButton = QPushButton("Always allow for this chat", objectName="toolAlwaysButton")
        self.alwaysButton.setToolTip("Run this tool without asking again in this chat")
        self.alwaysButton.clicked.connect(lambda: flow.allow(always=True))
        self.denyButton = QPushButton("Deny", objectName="toolDenyButton")
        self.denyButton.setToolTip("Do not run it; the model is told it was not allowed")
        self.denyButton.clicked.connect(flow.deny)
        row.addWidget(self.resultEdit, 1)
        row.addStretch(0)
        for b in (self.sendResultButton, self.pickFileButton, self.allowButton, self.alwaysButton, self.denyButton):
            row.addWidget(b)
        lay.addLayout(row)
        self.kind = ""
        self.picked = ""          # a picked link waiting for "Read it"
        self.hide()
        flow.confirmRequested.connect(self._on_request)
        flow.confirmCleared.connect(self._on_cleared)

    def _on_request(self, rec: dict, kind: str) -> None:
        self.kind, self.picked = kind, ""
        self.allowButton.setText("Allow")
        self.pickFileButton.setText("Pick a file…")
        name = rec.get("name", "?")
        args = rec.get("arguments") or {}
        shown = "<br>".join(f"&nbsp;&nbsp;<code>{_esc(k)}</code> = <code>{_esc(json.dumps(v, ensure_ascii=False))}</code>"
                            for k, v in args.items()) or "&nbsp;&nbsp;(no arguments)"
        what = {"run": "Run it?",
                "file": "It may read only the file you pick now.",
                "type": "This tool has no implementation in Hearth: type its result."}[kind]
        origin = self.flow.origin(name)
        src = f" of the {_esc(origin)}" if origin else ""
        self.text.setText(f"The assistant wants to use the tool <b>{_esc(name)}</b>{src} with:<br>{shown}<br>{what}")
        self.resultEdit.setVisible(kind == "type")
        self.sendResultButton.setVisible(kind == "type")
        self.pickFileButton.setVisible(kind == "file")
        self.allowButton.setVisible(kind == "run")
        self.alwaysButton.setVisible(kind == "run")
        self.resultEdit.clear()
        self.show()
        (self.resultEdit if kind == "type" else self.pickFileButton if kind == "file" else self.allowButton).setFocus()

    def _on_cleared(self) -> None:
        self.hide()

    def _on_send_result(self) -> None:
        if self.kind == "type":
            self.flow.give_result(self.resultEdit.text())

    def _on_allow(self) -> None:
        if self.kind == "link":
            self.flow.allow_file(self.picked)
        else:
            self.flow.allow()

    def _on_pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Pick the file the assistant may read", os.path.expanduser("~"))
        if path:
            self.take_pick(path)

    def take_pick(self, path: str) -> None:
        """The file the user picked. A link is not read through unseen: the bar names its target and
        waits for "Read it"."""
        target = link_target(path)
        if target is None:
            self.flow.allow_file(path)
            return
        self.kind, self.picked = "link", path
        self.text.setText(f"<b>{_esc(os.path.basename(path))}</b> is a link to <b>{_esc(str(target))}</b>.<br>"
                          "The assistant will read that file. Read it?")
        self.allowButton.setText("Read it")
        self.pickFileButton.setText("Pick another…")
        self.allowButton.setVisible(True)
        self.allowButton.setFocus()


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
