"""The files attached to the message being written (`attachmentBar`): one chip a file with its
token count (counted on the engine worker), ✕ to remove it. A file refused (not text, or more
tokens than the context holds with room for the reply) never becomes a chip; `refused` says why.

Signals:
    changed()          a file was added, counted or removed
    refused(str why)
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QWidget

from hearth.engine.context_policy import room_for_reply

from .attachments import Attachment, AttachmentError, human_size, read_attachment
from .markdown_text import tokens as count_tokens


class AttachmentBar(QWidget):
    changed = Signal()
    refused = Signal(str)

    def __init__(self, conversation, client, parent=None):
        super().__init__(parent, objectName="attachmentBar")
        self.conversation, self.client = conversation, client
        self.attachments: list[Attachment] = []
        self._chips: list[QToolButton] = []
        self._waiting: dict[str, Attachment] = {}   # count tag -> the file being counted
        self._lay = QHBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 4)
        self._lay.addStretch(1)
        client.worker.tokensCounted.connect(self._on_counted)
        self.hide()

    def add_files(self, paths: list[str]) -> None:
        for path in paths:
            try:
                a = read_attachment(path)
            except AttachmentError as e:
                self.refused.emit(str(e))
                continue
            tag = f"attach:{len(self._waiting)}:{path}"
            self._waiting[tag] = a
            self.client.count_text(a.text, tag)

    def _on_counted(self, res: dict) -> None:
        a = self._waiting.pop(res.get("tag") or "", None)
        if a is None:
            return
        n_ctx = int(res.get("n_ctx") or 0)
        a.tokens = res.get("message")
        room = room_for_reply(n_ctx, int(self.conversation.preset().sampling.get("max_tokens", 512))) if n_ctx else 0
        if n_ctx and a.tokens is not None and a.tokens + room > n_ctx:
            self.refused.emit(f"{a.name} is {human_size(a.size)} ({a.tokens:,} tokens): more than the context "
                              f"holds with room for the reply ({n_ctx:,} tokens). Attach a smaller file or "
                              "choose a larger context length.")
            return
        self.attachments.append(a)
        chip = QToolButton(objectName="attachmentChip", autoRaise=False)
        tokens = count_tokens(a.tokens) if a.tokens is not None else human_size(a.size)
        chip.setText(f"{a.name} · {tokens}  ✕")
        chip.setToolTip(f"{a.path} ({human_size(a.size)}): click to remove")
        chip.clicked.connect(lambda _=False, c=chip: self._remove(c))
        self._lay.insertWidget(len(self._chips), chip)
        self._chips.append(chip)
        self.show()
        self.changed.emit()

    def _remove(self, chip: QToolButton) -> None:
        i = self._chips.index(chip)
        self._chips.pop(i).deleteLater()
        self.attachments.pop(i)
        self.setVisible(bool(self.attachments))
        self.changed.emit()

    def chips(self) -> list[QToolButton]:
        return list(self._chips)

    def clear(self) -> None:
        for c in self._chips:
            c.deleteLater()
        self._chips, self.attachments = [], []
        self.hide()
        self.changed.emit()
