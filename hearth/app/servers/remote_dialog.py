"""The "Remote server…" dialog: a base URL, an optional API key, the server's models, one chosen.

The models are listed (GET /v1/models) on a background thread, never on the GUI thread; the answer
comes back by a queued signal, and an answer to an older request (the URL was edited since) is
dropped. Errors are shown in the dialog in engine.remote's words.

Signals:
    modelChosen(str url, str api_key, str model): the user picked a model and pressed "Use model".
"""

from __future__ import annotations

import itertools
import threading

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCompleter,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
)

from .remote_servers import RemoteServers

LIST_TIMEOUT_S = 15.0


class ModelLister(QObject):
    """Lists a server's models on a short-lived thread.

    Signals:
        listed(int request, str base_url, list model_ids)
        failed(int request, str message)
    """

    listed = Signal(int, str, list)
    failed = Signal(int, str)
    _ids = itertools.count(1)

    def start(self, url: str, api_key: str) -> int:
        rid = next(self._ids)
        # The thread holds a reference to self, so the object outlives a dialog closed meanwhile; Qt
        # drops the queued signal if its receiver is gone.
        threading.Thread(target=self._run, args=(rid, url, api_key), name="remote-models", daemon=True).start()
        return rid

    def _run(self, rid: int, url: str, api_key: str) -> None:
        from hearth.engine.remote import RemoteClient, RemoteError
        try:
            with RemoteClient(url, api_key or None, timeout=LIST_TIMEOUT_S, connect_timeout=5.0) as c:
                ids = [m.id for m in c.models()]
                base = c.base_url
        except RemoteError as e:
            self._emit(self.failed, rid, str(e))
            return
        except Exception as e:  # noqa: BLE001  anything else is still a message, not a crash
            self._emit(self.failed, rid, f"{type(e).__name__}: {e}")
            return
        if not ids:
            self._emit(self.failed, rid, f"{base} lists no models; load one on the server first")
            return
        self._emit(self.listed, rid, base, ids)

    @staticmethod
    def _emit(signal, *args) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:   # the app is quitting
            pass


class RemoteServerDialog(QDialog):
    modelChosen = Signal(str, str, str)

    def __init__(self, servers: RemoteServers, parent=None, url: str = ""):
        super().__init__(parent)
        self.setObjectName("remoteServerDialog")
        self.setWindowTitle("Remote server")
        self.setMinimumWidth(520)
        self.servers = servers
        self.base_url = ""           # the normalized URL the listed models came from
        self._request = 0
        self._lister = ModelLister()
        self._lister.listed.connect(self._on_listed)
        self._lister.failed.connect(self._on_failed)

        intro = QLabel("Chat with a model on an OpenAI-compatible server: vLLM, llama.cpp's llama-server, "
                       "Ollama, LM Studio, or another Hearth (<code>python -m hearth.engine serve</code>). "
                       "Your messages are sent to that server.", wordWrap=True)
        self.urlEdit = QLineEdit(objectName="remoteUrl", placeholderText="http://127.0.0.1:8080")
        known = [s["url"] for s in servers.all()]
        self.urlEdit.setCompleter(QCompleter(known, self))
        self.keyEdit = QLineEdit(objectName="remoteKey", placeholderText="optional")
        self.keyEdit.setEchoMode(QLineEdit.EchoMode.Password)
        self.keyNote = QLabel("", objectName="remoteKeyNote", wordWrap=True)
        self.listButton = QPushButton("List models", objectName="remoteListButton")
        row = QHBoxLayout()
        row.addWidget(self.urlEdit, 1)
        row.addWidget(self.listButton)
        form = QFormLayout()
        form.addRow("Server address", row)
        form.addRow("API key", self.keyEdit)
        form.addRow("", self.keyNote)
        self.status = QLabel("", objectName="remoteStatus", wordWrap=True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.modelList = QListWidget(objectName="remoteModels")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.useButton = self.buttons.addButton("Use model", QDialogButtonBox.ButtonRole.AcceptRole)
        self.useButton.setObjectName("remoteUseButton")
        self.useButton.setEnabled(False)
        self.forgetButton = self.buttons.addButton("Forget server", QDialogButtonBox.ButtonRole.DestructiveRole)
        self.forgetButton.setObjectName("remoteForgetButton")
        lay = QVBoxLayout(self)
        lay.addWidget(intro)
        lay.addLayout(form)
        lay.addWidget(self.status)
        lay.addWidget(QLabel("Models on the server"))
        lay.addWidget(self.modelList, 1)
        lay.addWidget(self.buttons)

        self.listButton.clicked.connect(self.list_models)
        self.urlEdit.returnPressed.connect(self.list_models)
        self.urlEdit.textEdited.connect(self._on_url_edited)
        self.keyEdit.textChanged.connect(self._update_key_note)
        self.modelList.currentItemChanged.connect(lambda *_: self.useButton.setEnabled(self.chosen_model() != ""))
        self.modelList.itemDoubleClicked.connect(lambda *_: self.accept())
        self.buttons.rejected.connect(self.reject)
        self.useButton.clicked.connect(self.accept)
        self.forgetButton.clicked.connect(self._forget)
        self._prefill(url or (known[0] if known else ""))

    # -- state ----------------------------------------------------------------------------------------
    def _prefill(self, url: str) -> None:
        self.urlEdit.setText(url)
        self.keyEdit.setText(self.servers.keys.get(url) or "" if url else "")
        self.forgetButton.setVisible(bool(url and self.servers.get(url)))
        self._update_key_note()
        if url:
            QTimer.singleShot(0, self.list_models)

    def _update_key_note(self) -> None:
        keys = self.servers.keys
        if keys.secure:
            self.keyNote.setText(f"The key is kept in {keys.where()}.")
            self.keyNote.setProperty("kind", "")
        elif self.keyEdit.text():
            self.keyNote.setText("⚠ No system keyring is available (install the <code>keyring</code> package "
                                 "and run a Secret Service, Keychain or Credential Locker): the key will be "
                                 "saved in plain text in Hearth's settings file.")
            self.keyNote.setProperty("kind", "warning")
        else:
            self.keyNote.setText("")
        self.keyNote.setStyleSheet("color: #b25e00;" if self.keyNote.property("kind") == "warning" else "")
        self.keyNote.setVisible(bool(self.keyNote.text()))

    def _on_url_edited(self, _text: str) -> None:
        self._request = 0               # an answer for the old address is no longer wanted
        self.base_url = ""
        self.modelList.clear()
        self.useButton.setEnabled(False)
        self.status.setText("")

    def chosen_model(self) -> str:
        item = self.modelList.currentItem()
        return item.text() if item is not None else ""

    # -- listing --------------------------------------------------------------------------------------
    def list_models(self) -> None:
        url = self.urlEdit.text().strip()
        if not url:
            self._show_error("Give the server's address, like http://127.0.0.1:8080")
            return
        self.modelList.clear()
        self.useButton.setEnabled(False)
        self.status.setProperty("kind", "")
        self.status.setStyleSheet("")
        self.status.setText(f"Asking {url} for its models…")
        self._request = self._lister.start(url, self.keyEdit.text().strip())

    def _on_listed(self, rid: int, base_url: str, ids: list) -> None:
        if rid != self._request:
            return
        self.base_url = base_url
        used = (self.servers.get(base_url) or {}).get("models", [])
        for mid in ids:
            QListWidgetItem(mid, self.modelList)
        self.status.setText(f"{len(ids)} model{'s' if len(ids) != 1 else ''} on {base_url}")
        pick = next((i for i, m in enumerate(ids) if m in used), 0)
        self.modelList.setCurrentRow(pick)

    def _on_failed(self, rid: int, message: str) -> None:
        if rid == self._request:
            self._show_error(message)

    def _show_error(self, message: str) -> None:
        self.status.setProperty("kind", "error")
        self.status.setStyleSheet("color: #c62828;")
        self.status.setText(message)

    # -- closing --------------------------------------------------------------------------------------
    def accept(self) -> None:
        model = self.chosen_model()
        if not model or not self.base_url:
            return
        self.modelChosen.emit(self.base_url, self.keyEdit.text().strip(), model)
        super().accept()

    def _forget(self) -> None:
        url = self.urlEdit.text().strip()
        for s in self.servers.all():
            if url and (s["url"] == url or s["url"] == self.base_url):
                self.servers.forget(s["url"])
        self.forgetButton.hide()
        self.status.setText(f"Forgot {url}" if url else "")
