"""The top bar's model choice: which model runs, on what, and loading it.

`ModelPicker(settings, client)` holds three widgets the window lays out in its top bar:
    combo       (objectName "modelPicker"): the default model, models opened from disk (the
                settings' "model/recent"), other sources' entries (remote servers' models), then the
                actions "Open GGUF file…" and those other sources add ("Remote server…").
    backendBox  (objectName "backendPicker"): Auto / GPU / CPU, labelled with what runs.
    infoLabel   (objectName "modelInfo"): arch · params · quant · where it runs (elided, full text in
                its tooltip).
The box's value is always a model, never an action: picking an action puts the box back on the
model that runs (or is loading) before the action starts.

It loads models through the EngineClient and owns the fallback: a first load that fails (a
remembered model that is gone, a GPU that is not there) falls back to the default model on the CPU;
a later failure keeps the model that runs.

Signals:
    modelChosen(str path): the user chose a model ("" = the default, a file path, or a `remote:`
        path); the picker starts loading it.
    modelReady(dict): a model finished loading (ModelInfo as a dict, plus "path_setting" and
        "backend_setting": what was asked for).
    actionPicked(str key): the user picked an entry added with `set_actions` (for example the
        remote server dialog); the box is already back on the running model.
    fileOpened(str path): a file was chosen with "Open GGUF file…" (before its load).
    problem(str text, str kind): a sentence for the banner; kind "error" or "notice".

Public methods (slots):
    refresh(): re-read the list (recent models, entries); keeps the current choice.
    add_model(path, load=False): remember a local GGUF file in the list (and load it).
    open_file(): the "Open GGUF file…" dialog; a chosen file is loaded.
    load(path): load a model (as if chosen).
    set_entries(source, list of (label, path, tooltip)): a source's models ("library": the Models
        window's local models, "remote": remembered servers'), listed after the recent files in the
        order the sources first gave entries; a path already listed is not listed twice.
    set_actions(list of (label, key)): actions listed after "Open GGUF file…".
    show_info(text, tooltip): what the info label says (a remote source names its server).
"""

from __future__ import annotations

import os

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QComboBox, QFileDialog, QLabel, QSizePolicy, QStyle, QStyledItemDelegate

from hearth.engine.library.file_names import display_name

from ..chat_source import human_bytes, human_params
from ..widgets.elided_combo import ElidedComboBox
from ..widgets.elided_label import ElidedLabel
from .model_fit import fit_line

OPEN_GGUF = "__open__"
DEFAULT_NAME = "SmolLM2-135M"
DEFAULT_LABEL = f"{DEFAULT_NAME} (default)"
BACKENDS = (("Auto", "auto"), ("GPU", "gpu"), ("CPU", "cpu"))
MAX_RECENT = 8
FIT_ROLE = Qt.ItemDataRole.UserRole + 1     # "742 MB · fits": size and fit, shown right in the list
FIT_VALUE_ROLE = Qt.ItemDataRole.UserRole + 2   # "fits", "tight", "won't fit" or ""


class FitDelegate(QStyledItemDelegate):
    """The open list shows each model's size and fit at the right of its row (the closed box shows
    the name only, to stay short in the top bar)."""

    def paint(self, painter, option, index) -> None:
        super().paint(painter, option, index)
        line = index.data(FIT_ROLE)
        if not line:
            return
        painter.save()
        selected = option.state & QStyle.StateFlag.State_Selected
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText
        if index.data(FIT_VALUE_ROLE) == "won't fit" and not selected:
            painter.setPen(Qt.GlobalColor.red)
        else:
            painter.setPen(option.palette.color(role))
        painter.drawText(option.rect.adjusted(0, 0, -8, 0),
                         int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), line)
        painter.restore()

    def sizeHint(self, option, index):
        hint = super().sizeHint(option, index)
        line = index.data(FIT_ROLE)
        if line:
            hint.setWidth(hint.width() + option.fontMetrics.horizontalAdvance(line) + 24)
        return hint


class ModelPicker(QObject):
    modelChosen = Signal(str)
    modelReady = Signal(dict)
    actionPicked = Signal(str)
    fileOpened = Signal(str)
    problem = Signal(str, str)

    def __init__(self, settings, client, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.client = client
        self.info: dict = {}
        self._loading_path: str | None = None
        self._loading_backend = "auto"
        self._entries: dict[str, list[tuple[str, str, str]]] = {}
        self._actions: list[tuple[str, str]] = []
        self._info_text = ""
        # n_ctx for a model about to load; the window sets a per-model rule (its settings store)
        self.n_ctx_of = lambda path: self.settings.get("model/n_ctx")

        self.combo = ElidedComboBox(objectName="modelPicker", minimumContentsLength=16)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setAccessibleName("Model")
        self.combo.setItemDelegate(FitDelegate(self.combo))
        self.combo.setToolTip("The model that answers")
        self.backendBox = QComboBox(objectName="backendPicker")
        self.backendBox.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.backendBox.setAccessibleName("Runs on")
        for label, data in BACKENDS:
            self.backendBox.addItem(label, data)
        self.backendBox.setCurrentIndex(max(0, self.backendBox.findData(settings.get("model/backend"))))
        self.infoLabel = ElidedLabel("", objectName="modelInfo")
        # It may be long (the adapter, the auto choice): it elides instead of widening the window.
        self.infoLabel.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.infoLabel.setMinimumWidth(40)

        self.combo.activated.connect(self._on_picked)
        self.backendBox.activated.connect(self._on_backend_picked)
        client.worker.modelLoaded.connect(self._on_loaded)
        client.worker.modelFailed.connect(self._on_failed)

    # -- the list -------------------------------------------------------------------------------------
    @property
    def running_path(self) -> str:
        """What the box should show: the model loading, else the one that runs."""
        if self._loading_path is not None:
            return self._loading_path
        return self.info.get("path_setting", self.settings.get("model/path"))

    @Slot()
    def refresh(self) -> None:
        current = self.running_path
        mp = self.combo
        mp.clear()
        mp.addItem(DEFAULT_LABEL, "")
        self._mark_fit(0, "", "The default model: SmolLM2-135M-Instruct Q4_1, installed with Hearth")
        for r in self.settings.get("model/recent"):
            if r.get("path") and os.path.exists(r["path"]):
                self._add(os.path.basename(r["path"]), r["path"], r["path"])
        for entries in self._entries.values():
            for label, path, tip in entries:
                if mp.findData(path) < 0:
                    self._add(label, path, tip)
        if current and mp.findData(current) < 0:     # a file being loaded that is not remembered yet
            self._add(os.path.basename(current), current, current)
        mp.insertSeparator(mp.count())
        mp.addItem("Open GGUF file…", OPEN_GGUF)
        for label, key in self._actions:
            mp.addItem(label, key)
        mp.setCurrentIndex(max(0, mp.findData(current)))
        # the open list is wide enough for a name and its size and fit side by side
        fm = mp.fontMetrics()
        widest = max((fm.horizontalAdvance(mp.itemText(i) + "    " + (mp.itemData(i, FIT_ROLE) or ""))
                      for i in range(mp.count())), default=0)
        mp.view().setMinimumWidth(widest + 48)

    def _add(self, label: str, path: str, tip: str) -> None:
        self.combo.addItem(label, path)
        self._mark_fit(self.combo.count() - 1, path, tip)

    def _mark_fit(self, row: int, path: str, tip: str) -> None:
        """Size and fit (fits / tight / won't fit at the context it would load with) of a local model."""
        line, value = fit_line(path, self.n_ctx_of(path), self.settings.get("model/kv_dtype"))
        self.combo.setItemData(row, line, FIT_ROLE)
        self.combo.setItemData(row, value, FIT_VALUE_ROLE)
        if line:
            tip = f"{tip}\n{line} on this machine"
        self.combo.setItemData(row, tip, Qt.ItemDataRole.ToolTipRole)

    def set_entries(self, source: str, entries: list[tuple[str, str, str]]) -> None:
        self._entries[source] = list(entries)
        self.refresh()

    def set_actions(self, actions: list[tuple[str, str]]) -> None:
        self._actions = list(actions)
        self.refresh()

    @Slot(str)
    def add_model(self, path: str, load: bool = False) -> None:
        path = str(path)
        recent = [r for r in self.settings.get("model/recent") if r.get("path") != path]
        known = next((r for r in self.settings.get("model/recent") if r.get("path") == path), {"path": path})
        self.settings.set("model/recent", [known] + recent[:MAX_RECENT - 1])
        if load:
            self.load(path)
        else:
            self.refresh()

    def _on_picked(self, index: int) -> None:
        data = self.combo.itemData(index)
        if data == OPEN_GGUF or data in {key for _label, key in self._actions}:
            self.combo.setCurrentIndex(max(0, self.combo.findData(self.running_path)))
            if data == OPEN_GGUF:
                self.open_file()
            else:
                self.actionPicked.emit(data)
        elif data != self.running_path:
            self.modelChosen.emit(data)
            self.load(data)

    @Slot()
    def open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.combo.window(), "Open a GGUF model", os.path.expanduser("~"),
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.fileOpened.emit(path)
            self.modelChosen.emit(path)
            self.load(path)

    # -- loading --------------------------------------------------------------------------------------
    @Slot(str)
    def load(self, path: str) -> None:
        self._loading_path = path
        if self.infoLabel.text() != "loading…":
            self._info_text = self.infoLabel.text()
        self.infoLabel.setText("loading…")
        self._loading_backend = self.backendBox.currentData()
        self.refresh()
        self.client.load_model(path, self._loading_backend, self.n_ctx_of(path), self.settings.get("model/kv_dtype"))

    def _on_backend_picked(self, index: int) -> None:
        self.settings.set("model/backend", self.backendBox.itemData(index))
        self.load(self.info.get("path_setting", self.settings.get("model/path")))

    def _on_loaded(self, info: dict) -> None:
        path = self._loading_path or ""
        self._loading_path = None
        info["path_setting"] = path
        info["backend_setting"] = self._loading_backend
        # The name the window uses (replies, the empty chat): the model box's, not the GGUF's general.name.
        if info.get("backend") != "remote":
            info["label"] = display_name(os.path.basename(path)) if path else DEFAULT_NAME
        self.info = info
        self.settings.set("model/path", path)
        remote = info.get("backend") == "remote"
        if path and not remote:
            recent = [r for r in self.settings.get("model/recent") if r.get("path") != path]
            recent.insert(0, {"path": path, "name": info.get("name"), "arch": info.get("arch"),
                              "quant": info.get("quant"), "size": info.get("size_bytes")})
            self.settings.set("model/recent", recent[:MAX_RECENT])
        self.refresh()
        self.backendBox.setVisible(not remote)    # Auto/GPU/CPU: a server decides what runs its model
        if not remote:
            self._show_local(info)
        self.modelReady.emit(info)

    def _show_local(self, info: dict) -> None:
        runs_on = "GPU" if info.get("backend") == "gpu" else "CPU"
        adapter = info.get("adapter", "")
        self.show_info(f"{info.get('arch', '?')} · {human_params(info.get('params', 0))} · "
                       f"{info.get('quant', '?')} · {runs_on}",
                       f"{info.get('path')} ({human_bytes(info.get('size_bytes', 0))})\n"
                       f"runs on {adapter}\n"
                       f"loaded in {info.get('load_s', 0):.2f} s, context {info.get('n_ctx')} tokens, "
                       f"KV cache {'float16' if info.get('kv_dtype') == 'f16' else 'float32'}")
        self.backendBox.setToolTip(f"Running on: {adapter}")
        # The box names what runs: "Auto (CPU)", "GPU · <adapter>".
        device = adapter.removeprefix("GPU: ").split(" [")[0]
        if info.get("software_renderer"):
            device += " (software renderer)"
        for i, (label, data) in enumerate(BACKENDS):
            text = label
            if data == info.get("backend_setting"):
                text = f"Auto ({runs_on})" if data == "auto" else f"GPU · {device}" if data == "gpu" else label
            self.backendBox.setItemText(i, text)
        if info.get("software_renderer"):
            self.problem.emit(f"The GPU adapter {device.split(' (')[0]} is a software renderer: it runs the GPU "
                              "backend on the CPU, much slower than the CPU backend. Choose CPU or Auto for speed.",
                              "notice")

    def show_info(self, text: str, tooltip: str = "") -> None:
        self.infoLabel.setText(text)
        self.infoLabel.setToolTip(tooltip or text)

    def _on_failed(self, message: str) -> None:
        asked, self._loading_path = self._loading_path, None
        still = self.info.get("name")
        if self.info:   # the boxes go back to what is really running
            self.backendBox.setCurrentIndex(max(0, self.backendBox.findData(self.info["backend_setting"])))
            self.settings.set("model/backend", self.info["backend_setting"])
        elif asked or self._loading_backend != "cpu":
            # Nothing loaded yet (a remembered model that is gone, a GPU that is not there): fall back to
            # the default model on the CPU so the app is usable, and say why.
            self.problem.emit(f"Could not load the model: {message}  Falling back to the default model on the CPU.",
                              "error")
            self.backendBox.setCurrentIndex(self.backendBox.findData("cpu"))
            self.load("")
            return
        self.problem.emit(f"Could not load the model: {message}" + (f"  {still} is still loaded." if still else ""),
                          "error")
        self.infoLabel.setText(self._info_text if still else "no model loaded")
        self.refresh()
