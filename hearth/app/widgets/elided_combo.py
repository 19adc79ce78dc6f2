"""A combo box whose closed text ends in "…" when the box is narrower than it (a stylesheet-drawn
QComboBox cuts it mid-letter instead); `shown_text()` says what is painted."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QStyle, QStyleOptionComboBox, QStylePainter


class ElidedComboBox(QComboBox):
    def _option(self) -> tuple[QStyleOptionComboBox, int]:
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        field = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, opt,
                                            QStyle.SubControl.SC_ComboBoxEditField, self)
        return opt, max(0, field.width() - 2)

    def shown_text(self) -> str:
        opt, width = self._option()
        return self.fontMetrics().elidedText(opt.currentText, Qt.TextElideMode.ElideRight, width)

    def paintEvent(self, _event) -> None:
        p = QStylePainter(self)
        opt, _width = self._option()
        p.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        opt.currentText = self.shown_text()
        p.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)
