"""The Models window's "On this computer" tab: every model in the models folder and every file
opened from disk, with size, architecture, quantization, context length and last use; use one,
remove it from the list, delete it from disk (after a confirmation), reveal it in the file manager,
pick the models folder. The default model that comes with Hearth is listed too, marked so; it
can be used and revealed, not removed or deleted (it belongs to the installed package).

Signals:
    modelChosen(str path): "Use" on a model Hearth can run
    modelsChanged(): the list changed (a model removed, deleted, the folder changed)
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QMessageBox, QPushButton, QVBoxLayout, QWidget

from hearth.engine.errors import EngineError
from hearth.engine.library.registry import LocalModel, ModelRegistry

from ..chat_source import human_bytes
from .hub_search_tab import _item, _table

COLUMNS = ("Name", "Size", "Architecture", "Quant", "Context", "Last used")


def human_when(t: float | None, now: float | None = None) -> str:
    if not t:
        return "never"
    d = (now or time.time()) - t
    if d < 60:
        return "just now"
    if d < 3600:
        return f"{int(d // 60)} min ago"
    if d < 86400:
        return f"{int(d // 3600)} h ago"
    return time.strftime("%Y-%m-%d", time.localtime(t))


class LocalModelsTab(QWidget):
    modelChosen = Signal(str)
    modelsChanged = Signal()

    def __init__(self, registry: ModelRegistry, parent=None, built_in: Path | None = None):
        super().__init__(parent)
        self.registry = registry
        self.built_in = Path(built_in).resolve() if built_in else None
        self._models: list[LocalModel] = []
        self.table = _table(COLUMNS)
        self.table.setObjectName("localModels")
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.itemDoubleClicked.connect(lambda *_: self.use())
        self.use_button = QPushButton("Use", objectName="localUse", enabled=False)
        self.remove_button = QPushButton("Remove from list", enabled=False)
        self.delete_button = QPushButton("Delete…", enabled=False)
        self.reveal_button = QPushButton("Show in folder", enabled=False)
        self.use_button.clicked.connect(self.use)
        self.remove_button.clicked.connect(self.remove)
        self.delete_button.clicked.connect(self.delete)
        self.reveal_button.clicked.connect(self.reveal)
        self.reason = QLabel("", objectName="hint", wordWrap=True)
        self.folder = QLabel("", objectName="hint")
        change = QPushButton("Change folder…")
        change.clicked.connect(self._choose_folder)
        buttons = QHBoxLayout()
        for b in (self.use_button, self.remove_button, self.delete_button, self.reveal_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(change)
        lay = QVBoxLayout(self)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.reason)
        lay.addLayout(buttons)
        lay.addLayout(folder_row)
        self.refresh()

    def refresh(self) -> None:
        self._models = self._with_built_in(self.registry.models())
        self.table.setRowCount(0)
        for m in self._models:
            f = m.facts
            i = self.table.rowCount()
            self.table.insertRow(i)
            mark = ("" if f.runs is not False else "  ⚠") + ("  (built in)" if m.source == "built-in" else "")
            self.table.setItem(i, 0, _item(f.name + mark, f"{m.path}\n{f.reason}".strip()))
            self.table.setItem(i, 1, _item(human_bytes(f.size), align_right=True))
            self.table.setItem(i, 2, _item(f.architecture or "?"))
            self.table.setItem(i, 3, _item(f.quant or "?"))
            self.table.setItem(i, 4, _item(f"{f.context_length:,}" if f.context_length else "?", align_right=True))
            self.table.setItem(i, 5, _item(human_when(m.last_used)))
        self.folder.setText(f"Models folder: {self.registry.models_dir}")
        self._selection_changed()

    def _with_built_in(self, models: list[LocalModel]) -> list[LocalModel]:
        if self.built_in is None:
            return models
        mine = [m for m in models if m.path.resolve() == self.built_in]
        rest = [m for m in models if m not in mine]
        last = mine[0].last_used if mine else None
        m = LocalModel(self.built_in, self.registry.facts(self.built_in), "built-in", None, last)
        return sorted(rest + [m], key=lambda m: (-(m.last_used or 0), m.path.name.lower()))

    def selected(self) -> LocalModel | None:
        rows = self.table.selectionModel().selectedRows()
        return self._models[rows[0].row()] if rows else None

    def select_path(self, path: Path) -> None:
        for i, m in enumerate(self._models):
            if m.path == Path(path):
                self.table.selectRow(i)

    def _selection_changed(self) -> None:
        m = self.selected()
        for b in (self.remove_button, self.delete_button):
            b.setEnabled(m is not None and m.source != "built-in")
        self.reveal_button.setEnabled(m is not None)
        self.use_button.setEnabled(m is not None and m.facts.runs is not False)
        self.reason.setText(f"Hearth cannot run this model: {m.facts.reason}"
                            if m is not None and m.facts.runs is False else "")

    def use(self) -> None:
        m = self.selected()
        if m is not None and m.facts.runs is not False:
            self.modelChosen.emit(str(m.path))

    def remove(self) -> None:
        m = self.selected()
        if m is None:
            return
        self.registry.remove(m.path)
        self.refresh()
        self.modelsChanged.emit()

    def confirm_delete(self, m: LocalModel) -> bool:
        box = QMessageBox(QMessageBox.Icon.Warning, "Delete model",
                          f"Delete {m.path.name} ({human_bytes(m.facts.size)}) from disk?\n\n{m.path}",
                          QMessageBox.StandardButton.Cancel, self)
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is delete

    def delete(self) -> None:
        m = self.selected()
        if m is None or not self.confirm_delete(m):
            return
        try:
            self.registry.delete(m.path)
        except EngineError as e:
            self.reason.setText(str(e))
            return
        self.refresh()
        self.modelsChanged.emit()

    def reveal(self) -> None:
        m = self.selected()
        if m is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(m.path.parent)))

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Models folder", str(self.registry.models_dir))
        if folder:
            self.set_folder(Path(folder))

    def set_folder(self, folder: Path) -> None:
        try:
            self.registry.set_models_dir(folder)
        except EngineError as e:
            self.reason.setText(str(e))
            return
        self.refresh()
        self.modelsChanged.emit()
