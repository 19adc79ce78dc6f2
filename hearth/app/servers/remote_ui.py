"""The window's remote-server parts: the model picker's remembered servers and "Remote server…",
the dialog, what the status line says for a remote model, and keeping a failed message's text in
the input box.

`RemoteUI(window, picker)` is made by the MainWindow. With the ModelPicker it talks only through
the picker's API: it lists the remembered servers' models (`set_entries`), adds the "Remote
server…" action (`set_actions`, answered on `actionPicked`), and names the server in the picker's
info (`show_info`) on `modelReady`. What it asks of the window goes by signal:
    loadRequested(str path): load this model (a `remote:` path)
    notice(str): a sentence for the user
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal

from .remote_source import RoutingBackend, host_of, parse_remote_path, remote_path
from .remote_dialog import RemoteServerDialog
from .remote_servers import RemoteServers

REMOTE_DIALOG = "__remote__"
LOCAL_ONLY_SAMPLING = ("top_k", "min_p", "repeat_penalty")


class RemoteUI(QObject):
    loadRequested = Signal(str)
    notice = Signal(str)

    def __init__(self, window, picker):
        super().__init__(window)
        self.w = window
        self.picker = picker
        self.servers = RemoteServers(window.settings)
        self.dialog: RemoteServerDialog | None = None
        backend = window.client.worker.backend
        self.available = isinstance(backend, RoutingBackend)
        if self.available:
            # Set before any remote load is queued; read on the worker thread (KeyStore.get is thread-safe).
            backend.remote.key_for = self.servers.keys.get
        self._restored_edit: str | None = None
        self._tips: dict[str, str] = {}
        picker.modelReady.connect(self._on_model_ready)
        picker.actionPicked.connect(lambda key: self.open_dialog() if key == REMOTE_DIALOG else None)
        self.refresh_picker()
        window.client.worker.contextChanged.connect(self._on_context)
        cv = window.conversation
        cv.replyFinished.connect(self._on_reply_finished)
        cv.replyFailed.connect(self._on_reply_failed)

    @property
    def remote_active(self) -> bool:
        return self.picker.info.get("backend") == "remote"

    # -- model picker ---------------------------------------------------------------------------------
    def refresh_picker(self) -> None:
        """The remembered servers' models as picker entries, and "Remote server…" as its action."""
        if not self.available:
            return
        self.picker.set_entries("remote", [(f"{model} · {host_of(s['url'])}", remote_path(s["url"], model),
                                  f"{model} on the server {s['url']}")
                                 for s in self.servers.all() for model in s.get("models", [])])
        self.picker.set_actions([("Remote server…", REMOTE_DIALOG)])

    def open_dialog(self, url: str = "") -> RemoteServerDialog:
        if self.dialog is not None:
            self.dialog.deleteLater()
        parsed = parse_remote_path(self.picker.info.get("path_setting", ""))
        dlg = RemoteServerDialog(self.servers, self.w, url or (parsed[0] if parsed else ""))
        dlg.modelChosen.connect(self.use)
        dlg.finished.connect(lambda _r: self.refresh_picker())
        self.dialog = dlg
        dlg.open()            # window-modal: no other model is picked meanwhile
        return dlg

    def use(self, url: str, api_key: str, model: str) -> None:
        """Remember the server (and its key) and load its model through the worker."""
        where = self.servers.remember(url, model, api_key)
        self.refresh_picker()
        if where == "settings":
            self.notice.emit("No system keyring is available, so the API key for "
                             f"{host_of(url)} is saved in plain text in Hearth's settings file.")
        self.loadRequested.emit(remote_path(url, model))

    # -- what the window shows ------------------------------------------------------------------------
    def _on_model_ready(self, info: dict) -> None:
        w = self.w
        remote = info.get("backend") == "remote"
        for key in LOCAL_ONLY_SAMPLING:          # not in the OpenAI API: strict servers refuse them
            box = w.samplingPanel.boxes.get(key)
            if box is not None:
                box.setEnabled(not remote)
                tip = self._tips.setdefault(key, box.toolTip())
                box.setToolTip(f"{tip}\nNot sent to a remote server (not part of the OpenAI API)" if remote else tip)
        if not remote:
            if w.statusPrefix.text().startswith("Prefix cach"):    # a remote server's line
                w.statusPrefix.setText("")
            return
        url = info.get("adapter", "").removeprefix("server ")
        self.picker.show_info(f"remote · {host_of(url)}",
                              f"{info.get('name')} on the server {url}\n"
                              f"connected in {info.get('load_s', 0):.2f} s"
                              + (f", context {info['n_ctx']} tokens" if info.get("n_ctx") else ""))
        w.statusPrefix.setText(f"Prefix caching is done by the server ({host_of(url)})")
        w.statusSpeed.setText("")

    def _on_context(self, d: dict) -> None:
        w = self.w
        w.statusContext.setVisible(not d.get("remote") or bool(d.get("n_ctx")))

    def _on_reply_finished(self, stats: dict) -> None:
        if self._restored_edit is not None and self.w.messageInput.toPlainText() == self._restored_edit:
            self.w.cancel_edit()
        self._restored_edit = None
        if not stats.get("remote"):
            return
        w = self.w
        if "prompt_tokens" in stats:
            w.statusPrefix.setText(f"Prefix cached by server: {stats.get('reused_tokens', 0)} tokens reused "
                                   f"of {stats['prompt_tokens']}")
        else:
            w.statusPrefix.setText(f"Prefix caching is done by the server ({stats['remote']}); it reported "
                                   "no token usage")

    def _on_reply_failed(self, _message: str) -> None:
        """Nothing typed is lost: the failed turn's message goes back into the input box as an edit
        of that message, so Enter sends it again in its place (unless something new was typed)."""
        w = self.w
        if w.messageInput.toPlainText().strip() or w.editing:
            return
        msgs = w.conversation.model.messages()
        row = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "user"), None)
        if row is None:
            return
        w.edit_message(row)
        w.editHint.setText("The reply failed; your message is back here. Enter sends it again (in its "
                           "place), Esc leaves it.")
        self._restored_edit = msgs[row].content
