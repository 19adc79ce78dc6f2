"""The window's model-library parts: the Models window (made when first opened, so
huggingface_hub is not imported at start-up), the local models in the model picker, and keeping
the registry up to date (files opened from disk, last use).

`ModelsUI(window)` is made by the MainWindow after its RemoteUI; the window calls `open`,
`picker_entries` (for the ModelPicker's `set_entries("library", …)`), `opened` (on the picker's
`fileOpened`), `shutdown`; what it asks of the window goes by signal:
    loadRequested(str path): load this local model
    modelsChanged(): the local models changed (the picker lists them again)
"""

from __future__ import annotations

import os

from PySide6.QtCore import QObject, Signal

from hearth.engine.library.file_names import display_name
from hearth.engine.library.registry import ModelRegistry


class ModelsUI(QObject):
    loadRequested = Signal(str)
    modelsChanged = Signal()

    def __init__(self, window, registry: ModelRegistry | None = None, endpoint: str | None = None):
        super().__init__(window)
        self.w = window
        self.registry = registry or ModelRegistry()
        self.endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
        self.window = None  # the ModelsWindow, once opened
        window.modelReady.connect(self._on_model_ready)
        window.settings.changed.connect(self._on_setting)

    def open(self):
        """Show the Models window (made on first use; it stays, with its downloads, when closed)."""
        if self.window is None:
            from .models_window import ModelsWindow  # noqa: PLC0415  (huggingface_hub only when asked)
            self.window = ModelsWindow(self.registry, keys=self.w.remote.servers.keys, endpoint=self.endpoint,
                                       n_ctx=self.w.settings.get("model/n_ctx"), parent=self.w,
                                       kv_dtype=self.w.settings.get("model/kv_dtype"), built_in=_built_in())
            self.window.modelChosen.connect(self._use)
            self.window.modelsChanged.connect(self.modelsChanged)
        self.window.show()
        self.window.raise_()
        self.window.activateWindow()
        return self.window

    def _on_setting(self, name: str) -> None:
        if name == "model/kv_dtype" and self.window is not None:
            self.window.set_kv_dtype(self.w.settings.get(name))

    def _use(self, path: str) -> None:
        self.loadRequested.emit(path)

    def picker_entries(self) -> list[tuple[str, str, str]]:
        """The local models Hearth can run (downloaded ones, the models folder's), by their display
        names, as the model picker's (label, path, tooltip) entries."""
        return [(f"{display_name(m.path.name)} · {m.facts.quant or '?'}", str(m.path),
                 f"{m.path}\n{m.facts.architecture}, {m.repo_id or 'on disk'}")
                for m in self.registry.models() if m.facts.runs is not False]

    def opened(self, path: str) -> None:
        """A file the user opened from disk joins the local models."""
        try:
            self.registry.add_opened(path)
        except Exception:  # noqa: BLE001  the load that follows says what is wrong with the file
            return
        if self.window is not None:
            self.window.local.refresh()

    def _on_model_ready(self, info: dict) -> None:
        path = info.get("path_setting") or ""
        if path and info.get("backend") != "remote" and os.path.isfile(path):
            self.registry.mark_used(path)
            if self.window is not None:
                self.window.local.refresh()

    def shutdown(self) -> None:
        if self.window is not None:
            self.window.shutdown()


def _built_in():
    """The default model that comes with Hearth, or None when it is not installed."""
    from hearth.engine.errors import EngineError  # noqa: PLC0415
    from hearth.engine.paths import default_model_path  # noqa: PLC0415
    try:
        p = default_model_path()
    except EngineError:
        return None
    return p if p.is_file() else None
