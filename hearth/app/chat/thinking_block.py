"""A reply's thinking (`thinkingBlock`): a collapsible block above the answer, its header saying
how many tokens the thinking took and how long. Open while the model thinks, closed once the
answer begins (unless the user opened or closed it), and closed for a reply loaded from the chat.

The dict it shows is the reply's stats["thinking"]: {"text", "tokens", "seconds", "done"}.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout


class ThinkingBlock(QFrame):
    """Signals: toggled(bool open)."""

    toggled = Signal(bool)

    def __init__(self, parent=None):
        super().__init__(parent, objectName="thinkingBlock")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 4, 8, 4)
        lay.setSpacing(2)
        self.header = QToolButton(objectName="thinkingHeader", checkable=True, autoRaise=True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setCursor(Qt.CursorShape.PointingHandCursor)
        self.header.clicked.connect(self._on_clicked)
        self.body = QLabel("", objectName="thinkingText", wordWrap=True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.header)
        lay.addWidget(self.body)
        self._user_chose = False
        self._seen_streaming = False
        self.hide()

    def set_thinking(self, thinking: dict | None) -> None:
        if not thinking or not (thinking.get("text") or "").strip():
            self.hide()
            return
        done = bool(thinking.get("done", True))
        self._seen_streaming |= not done
        n, s = int(thinking.get("tokens") or 0), float(thinking.get("seconds") or 0.0)
        self.header.setText(("Thinking…" if not done else "Thinking") +
                            f"  ·  {n} token{'s' if n != 1 else ''}  ·  {s:.1f} s")
        self.body.setText(thinking["text"].strip())
        if not self._user_chose:
            self._set_open(not done)
        self.show()

    @property
    def is_open(self) -> bool:
        return self.header.isChecked()

    def _set_open(self, on: bool) -> None:
        self.header.setChecked(on)
        self.header.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.body.setVisible(on)

    def _on_clicked(self, on: bool) -> None:
        self._user_chose = True
        self._set_open(on)
        self.toggled.emit(on)
