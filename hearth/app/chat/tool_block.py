"""A reply's tool calls in the conversation: one collapsible block per call.

Collapsed, a block is one line: the tool, its arguments and the result (or its state: waiting for
you, running, denied, malformed). Expanded, it shows the arguments as JSON and the whole result
(or, for a malformed call, what the model wrote and why it could not be used).

Signals (ToolBlocks):
    changed()   a block was expanded/collapsed or its content changed: the row's height changes
"""

from __future__ import annotations

import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

SUMMARY_CHARS = 110
STATES = {"pending": "waiting for you", "running": "running…", "denied": "denied",
          "malformed": "malformed call", "limit": "not run (tool-round limit)", "stopped": "stopped"}


def call_summary(rec: dict) -> str:
    """`calculator(expression="23*47") → 1081`, for the block's one line."""
    if rec.get("status") == "malformed":
        return f"{rec.get('name') or 'tool call'} · malformed: {rec.get('error', '')}"
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (rec.get("arguments") or {}).items())
    head = f"{rec.get('name', '?')}({args})"
    st = rec.get("status", "")
    if st == "allowed":
        result = " ".join((rec.get("result") or "").split())
        tail = ("error: " if rec.get("is_error") else "") + result
    else:
        tail = STATES.get(st, st)
    return f"{head} → {tail}"


def _short(text: str, n: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


class ToolBlock(QFrame):
    toggled = Signal()

    def __init__(self, rec: dict, parent=None):
        super().__init__(parent)
        self.setObjectName("toolBlock")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 4, 8, 4)
        lay.setSpacing(2)
        head = QHBoxLayout()
        head.setSpacing(4)
        self.arrow = QToolButton(objectName="toolArrow", autoRaise=True, checkable=True)
        self.arrow.setArrowType(Qt.ArrowType.RightArrow)
        self.arrow.setToolTip("Show the call and its result")
        self.arrow.toggled.connect(self._on_toggled)
        self.icon = QLabel("⚙", objectName="toolIcon")
        self.summary = QLabel("", objectName="toolSummary")
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        head.addWidget(self.arrow)
        head.addWidget(self.icon)
        head.addWidget(self.summary, 1)
        lay.addLayout(head)
        self.details = QLabel("", objectName="toolDetails", wordWrap=True)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details.setTextFormat(Qt.TextFormat.PlainText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.hide()
        lay.addWidget(self.details)
        self.rec: dict = {}
        self.set_record(rec)

    def set_record(self, rec: dict) -> None:
        self.rec = dict(rec)
        st = rec.get("status", "")
        self.setProperty("state", "error" if st in ("malformed", "denied", "limit", "stopped")
                         or (st == "allowed" and rec.get("is_error")) else st)
        self.style().unpolish(self)
        self.style().polish(self)
        full = call_summary(rec)
        self.summary.setText(_short(full))
        self.summary.setToolTip(full if len(full) > SUMMARY_CHARS else "")
        if st == "malformed":
            body = f"The model wrote:\n{rec.get('raw', '')}\n\nWhy it could not be used: {rec.get('error', '')}\n\n" \
                   f"Sent back to the model:\n{rec.get('result', '')}"
        else:
            body = f"{rec.get('name')} arguments:\n{json.dumps(rec.get('arguments') or {}, indent=2, ensure_ascii=False)}"
            if rec.get("result"):
                body += f"\n\nResult{' (error)' if rec.get('is_error') else ''}:\n{rec['result']}"
        self.details.setText(body)

    def expanded(self) -> bool:
        return self.arrow.isChecked()

    def set_expanded(self, on: bool) -> None:
        self.arrow.setChecked(on)

    def text(self) -> str:
        """Everything the block says (for tests and Copy)."""
        return self.summary.text() + "\n" + self.details.text()

    def _on_toggled(self, on: bool) -> None:
        self.arrow.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.details.setVisible(on)
        self.toggled.emit()


class ToolBlocks(QWidget):
    """The blocks of one message, in call order."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("toolBlocks")
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(0, 2, 0, 2)
        self._lay.setSpacing(4)
        self.blocks: list[ToolBlock] = []
        self.hide()

    def set_calls(self, calls: list) -> None:
        calls = list(calls or [])
        if [b.rec for b in self.blocks] == calls:
            return
        while len(self.blocks) > len(calls):
            b = self.blocks.pop()
            self._lay.removeWidget(b)
            b.deleteLater()
        for i, rec in enumerate(calls):
            if i < len(self.blocks):
                self.blocks[i].set_record(rec)
            else:
                b = ToolBlock(rec)
                b.toggled.connect(self._on_block_toggled)
                self._lay.addWidget(b)
                self.blocks.append(b)
        self.setVisible(bool(calls))
        self.changed.emit()

    def _on_block_toggled(self) -> None:
        self.updateGeometry()
        self.changed.emit()
