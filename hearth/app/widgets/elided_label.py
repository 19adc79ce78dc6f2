"""A one-line label that elides its text at the right ("…") when it is narrower than the text;
the full text is then its tooltip, so nothing is lost at a small window width."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent=None, **kwargs):
        super().__init__(text, parent, **kwargs)
        self._tip = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setToolTip(self, tip: str) -> None:
        self._tip = tip
        self._update_tip()

    def setText(self, text: str) -> None:
        super().setText(text)
        self._update_tip()

    def is_elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()

    def shown_text(self) -> str:
        """The text as painted (elided to the width)."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def _update_tip(self) -> None:
        tip = self._tip
        if self.is_elided() and self.text() not in tip:
            tip = self.text() + (f"\n{tip}" if tip else "")
        super().setToolTip(tip)

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self._update_tip()

    def paintEvent(self, _e) -> None:
        p = QPainter(self)
        p.setPen(self.palette().color(self.foregroundRole()))
        p.drawText(self.contentsRect(), int(self.alignment()) | int(Qt.AlignmentFlag.AlignVCenter),
                   self.shown_text())
