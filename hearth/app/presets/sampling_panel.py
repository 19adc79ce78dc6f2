"""The sampling settings of one preset, as spin boxes.

Signals:
    samplingEdited(dict): the user changed a value (the full, valid sampling dict).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QDoubleSpinBox, QFormLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout,
                               QWidget)

from hearth.engine.chat.preset_format import DEFAULT_SAMPLING

# name: (label, kind, min, max, step, decimals, tooltip)
FIELDS = {
    "temperature": ("Temperature", float, 0.0, 2.0, 0.05, 2, "0 = greedy (always the most likely token)"),
    "top_p": ("Top-p", float, 0.0, 1.0, 0.01, 2, "keep the most likely tokens up to this total probability"),
    "top_k": ("Top-k", int, 0, 1000, 1, 0, "keep only the k most likely tokens (0 = off)"),
    "min_p": ("Min-p", float, 0.0, 1.0, 0.01, 2, "drop tokens less likely than min-p × the best one"),
    "repeat_penalty": ("Repetition penalty", float, 0.5, 2.0, 0.01, 2, "1 = off; above 1 discourages repeats"),
    "max_tokens": ("Max tokens", int, 1, 32768, 16, 0, "the longest reply"),
    "seed": ("Seed", int, -1, 2**31 - 1, 1, 0, "-1 = a new random seed each time"),
}


class SamplingPanel(QWidget):
    samplingEdited = Signal(dict)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("samplingPanel")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 12, 14, 12)
        self.title = QLabel("Sampling", objectName="panelTitle")
        lay.addWidget(self.title)
        self.presetLabel = QLabel("", objectName="hint", wordWrap=True)
        lay.addWidget(self.presetLabel)
        form = QFormLayout()
        form.setContentsMargins(0, 8, 0, 8)
        self.boxes: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for name, (label, kind, lo, hi, step, dec, tip) in FIELDS.items():
            if kind is float:
                box = QDoubleSpinBox(decimals=dec, minimum=lo, maximum=hi, singleStep=step)
            else:
                box = QSpinBox(minimum=lo, maximum=hi, singleStep=step)
            if name == "seed":
                box.setSpecialValueText("random")
            box.setObjectName(f"sampling_{name}")
            box.setToolTip(tip)
            box.setKeyboardTracking(False)
            box.valueChanged.connect(self._on_changed)
            self.boxes[name] = box
            form.addRow(label, box)
        lay.addLayout(form)
        self.resetButton = QPushButton("Reset to defaults", objectName="samplingReset")
        self.resetButton.clicked.connect(lambda: (self.set_sampling(DEFAULT_SAMPLING), self._on_changed()))
        lay.addWidget(self.resetButton)
        lay.addStretch(1)
        self._loading = False

    def set_sampling(self, s: dict, preset_name: str = "") -> None:
        self._loading = True
        try:
            for name, box in self.boxes.items():
                box.setValue(s.get(name, DEFAULT_SAMPLING[name]))
        finally:
            self._loading = False
        if preset_name:
            self.presetLabel.setText(f"Saved with the preset “{preset_name}”.")

    def sampling(self) -> dict:
        return {n: (float(b.value()) if FIELDS[n][1] is float else int(b.value())) for n, b in self.boxes.items()}

    def _on_changed(self, *_):
        if not self._loading:
            self.samplingEdited.emit(self.sampling())
