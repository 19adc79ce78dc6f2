"""The files attached to the message being written (`attachmentBar`): one chip a file with its
token count (counted on the engine worker), ✕ to remove it. A file refused (not text, or more
tokens than the context holds with room for the reply) never becomes a chip; `refused` says why.
Files are read on a thread of their own, one at a time in the order given, never on the GUI thread.

Signals:
    changed()          a file was added, counted or removed
    refused(str why)
"""

from __future__ import annotations

import concurrent.futures
import itertools

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QWidget

from hearth.engine.chat.context_policy import room_for_reply

from .attachments import Attachment, AttachmentError, human_size, read_attachment
from .markdown_text import tokens as count_tokens


class AttachmentBar(QWidget):
    changed = Signal()
    refused = Signal(str)
    _read = Signal(str, object)      # path, Attachment or AttachmentError (from the reading thread)

    def __init__(self, conversation, client, parent=None):
        super().__init__(parent, objectName="attachmentBar")
        self.conversation, self.client = conversation, client
        self.attachments: list[Attachment] = []
        self._chips: list[QToolButton] = []
        self._waiting: dict[str, Attachment] = {}   # count tag -> the file being counted
        self._lay = QHBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 4)
        self._lay.addStretch(1)
        self._tags = itertools.count()
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hearth-attach")
        self._read.connect(self._on_read)
        client.worker.tokensCounted.connect(self._on_counted)
        self.destroyed.connect(lambda *_: self._reader.shutdown(wait=False, cancel_futures=True))
        self.hide()

    def add_files(self, paths: list[str]) -> None:
        for path in paths:
            self._reader.submit(self._read_file, path)

    def _read_file(self, path: str) -> None:       # the reading thread
        try:
            result = read_attachment(path)
        except AttachmentError as e:
            result = e
        try:
            self._read.emit(path, result)
        except RuntimeError:                       # the bar is gone (the window closed meanwhile)
            pass

    def _on_read(self, path: str, result) -> None:
        if isinstance(result, AttachmentError):
            self.refused.emit(str(result))
            return
        tag = f"attach:{next(self._tags)}:{path}"
        self._waiting[tag] = result
        self.client.count_text(result.text, tag)

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
