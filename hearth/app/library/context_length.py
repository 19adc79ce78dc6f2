"""The context length of the loaded model (`contextLengthDialog`): a number of tokens up to the
length the model was trained for, with the memory it needs beside it.

The value lives in the per-model settings (engine/library/model_settings.py), so each model keeps
its own; the window applies it by loading the model again with a KV cache of that size. What a
context length costs is the library's estimate (`fit.fit_for`), the one the Models window shows.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QSpinBox, QVBoxLayout

from hearth.engine.library.fit import Fit, fit_for
from hearth.engine.library.model_facts import ModelFacts, read_facts
from hearth.engine.library.model_settings import ModelSettingsStore, check_n_ctx

from ..chat_source import human_bytes

MIN_CTX = 256
STEP = 256


def real_model_path(path: str) -> Path:
    """The file a model path setting names ("" is the default model)."""
    from hearth.engine.paths import default_model_path
    return Path(path) if path else Path(default_model_path())


def n_ctx_for(store: ModelSettingsStore, path: str, default: int) -> int:
    """The context length to load `path` with: the model's own setting, else the app's default,
    never more than the model was trained for."""
    real = real_model_path(path)
    n = store.get(real).n_ctx or default
    try:
        trained = read_facts(real).context_length
    except Exception:  # noqa: BLE001  an unreadable file fails in the load, with its own message
        return n
    return min(n, trained) if trained else n


def set_n_ctx(store: ModelSettingsStore, path: str, n_ctx: int) -> int:
    """Remember `n_ctx` for the model at `path`; EngineError when the model cannot take it."""
    real = real_model_path(path)
    store.set_n_ctx(real, n_ctx, read_facts(real).context_length)
    return n_ctx


def memory_text(facts: ModelFacts, n_ctx: int, kv_dtype: str = "f32") -> str:
    fit, needed = fit_for(facts, n_ctx, kv_dtype=kv_dtype)
    verdict = {Fit.FITS: "fits in memory", Fit.TIGHT: "tight: little memory left",
               Fit.WONT_FIT: "does not fit in the memory available", Fit.UNKNOWN: ""}[fit]
    return f"needs about {human_bytes(needed)}" + (f" ({verdict})" if verdict else "")


class ContextLengthDialog(QDialog):
    """Signals: chosen(int n_ctx) when the user applies a length."""

    chosen = Signal(int)

    def __init__(self, facts: ModelFacts, current: int, parent=None, kv_dtype: str = "f32"):
        super().__init__(parent, objectName="contextLengthDialog")
        self.setWindowTitle("Context length")
        self.facts = facts
        self.kv_dtype = kv_dtype
        trained = facts.context_length or max(current, 4096)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel(f"How many tokens of the chat {facts.name} sees at once. It was trained for "
                             f"{trained:,}. A longer context holds more of the chat and needs more memory; "
                             "changing it loads the model again.", wordWrap=True))
        form = QFormLayout()
        self.lengthBox = QSpinBox(objectName="contextLengthBox", minimum=min(MIN_CTX, trained),
                                  maximum=trained, singleStep=STEP, suffix=" tokens")
        self.lengthBox.setGroupSeparatorShown(True)
        self.lengthBox.setValue(min(current, trained))
        self.memoryLabel = QLabel("", objectName="contextMemory")
        form.addRow("Context length", self.lengthBox)
        form.addRow("Memory", self.memoryLabel)
        lay.addLayout(form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Apply | QDialogButtonBox.StandardButton.Cancel)
        self.applyButton = buttons.button(QDialogButtonBox.StandardButton.Apply)
        self.applyButton.clicked.connect(self.apply)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.lengthBox.valueChanged.connect(self._show_memory)
        self._show_memory(self.lengthBox.value())

    def _show_memory(self, n: int) -> None:
        self.memoryLabel.setText(memory_text(self.facts, n, self.kv_dtype))

    def apply(self) -> None:
        n = check_n_ctx(self.lengthBox.value(), self.facts.context_length)
        self.chosen.emit(n)
        self.accept()
