"""The message box: grows with its text (up to 8 lines)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QPlainTextEdit


class MessageInput(QPlainTextEdit):
    """Enter sends, Shift+Enter is a new line, Ctrl+Enter sends too.

    Signals:
        sendRequested()
        filesDropped(list paths)   files dropped (or pasted) on the box: attachments, not text
        focusChanged(bool): it got or lost the keyboard focus (its frame shows it).
    """

    sendRequested = Signal()
    filesDropped = Signal(list)
    focusChanged = Signal(bool)


    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("messageInput")
        self.set_short_hint(False)
        self.setTabChangesFocus(True)
        self.setAccessibleName("Message")
        self.document().contentsChanged.connect(self._fit)
        self._fit()

    def keyPressEvent(self, e):
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if e.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.sendRequested.emit()
            return
        super().keyPressEvent(e)

    def canInsertFromMimeData(self, source) -> bool:
        return source.hasUrls() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source) -> None:
        files = [u.toLocalFile() for u in source.urls() if u.isLocalFile()] if source.hasUrls() else []
        if files:
            self.filesDropped.emit(files)
        else:
            super().insertFromMimeData(source)

    def set_short_hint(self, short: bool) -> None:
        """The placeholder in one line: the keys are left out when the box is narrow."""
        self.setPlaceholderText("Message Hearth…" if short else
                                "Message Hearth…  (Enter to send, Shift+Enter for a new line)")

    def focusInEvent(self, e) -> None:
        super().focusInEvent(e)
        self.focusChanged.emit(True)

    def focusOutEvent(self, e) -> None:
        super().focusOutEvent(e)
        self.focusChanged.emit(False)

    def _fit(self) -> None:
        lines = max(1, min(8, int(self.document().size().height())))
        self.setFixedHeight(lines * self.fontMetrics().lineSpacing() + 14)
