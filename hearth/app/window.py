"""The main window: it assembles the subsystems and connects their signals.

The parts: the chat list and the open conversation (`chat/`), the model picker and the Models
window (`library/`), the preset choice and its dialogs (`presets/`), MCP tools (`tools/`), remote
and local servers (`servers/`), the stores and settings (`store/`); the top bar, menus, status line
and panel fit are built by `window_parts.py`. All model work happens on the worker thread
(`worker.py`) and comes back as signals.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QSize, Signal
from PySide6.QtGui import QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QMainWindow, QSplitter

from hearth.engine.errors import EngineError
from hearth.engine.library.model_facts import read_facts
from hearth.engine.library.model_settings import ModelSettingsStore
from hearth.engine.paths import cache_dir

from . import theme, window_parts
from .chat.attachments import message_text
from .chat.chat_sidebar import ChatSidebar
from .chat.conversation import Conversation
from .chat.draft_tokens import DraftTokens
from .about import AboutDialog
from .library.context_length import ContextLengthDialog, real_model_path, set_n_ctx
from .library.models_ui import ModelsUI
from .presets.cache_panel import CachePanel
from .presets.preset_choice import PresetChoice
from .presets.preset_manager import PresetManager
from .presets.sampling_panel import SamplingPanel
from .servers.remote_ui import RemoteUI
from .store.chat_store import ChatStore
from .store.export import ChatImportError, import_json
from .store.export import export as export_chats
from .store.preset_store import RESOURCES, PresetStore
from .store.settings import Settings
from .tools.mcp_servers import McpServers
from .tools.mcp_tools import McpTools
from .worker import EngineClient

MIN_SIZE = QSize(760, 520)
KV_DTYPE_CHOICES = window_parts.KV_DTYPE_CHOICES


class MainWindow(QMainWindow):
    """Signals:
        modelReady(dict): a model finished loading (ModelInfo as a dict).
        prefixResult(dict): what the prefix store did for a preset ({"action", "ms", "tokens", ...}).
    """

    modelReady = Signal(dict)
    prefixResult = Signal(dict)

    def __init__(self, settings: Settings, chats: ChatStore, presets: PresetStore, backend):
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("Hearth")
        self.setWindowIcon(QIcon(str(RESOURCES / "hearth.svg")))
        self.settings = settings
        self.chats = chats
        self.presets = presets
        self.client = EngineClient(backend, self)
        self.modelSettings = ModelSettingsStore()
        self.conversation = Conversation(chats, presets, self.client, self)
        self.conversation.tools.use_settings(settings)
        self.mcp = McpTools(McpServers(settings), log_dir=cache_dir() / "logs", parent=self)
        self.conversation.tools_of = self.mcp.tools_for
        self.conversation.tools.runs = self.mcp.runs
        self.conversation.tools.origin = self.mcp.origin
        self.mcpApproval = None
        self.last_prefix_result: dict | None = None
        self.last_chat_context: dict | None = None
        self.last_error = ""
        self._edit_row: int | None = None
        self._closed = False

        self._build()
        self._wire()
        self.remote = RemoteUI(self, self.picker)
        self.remote.loadRequested.connect(self.load_model)
        self.remote.notice.connect(lambda text: self.show_banner(text, "notice"))
        self.mcp.notice.connect(lambda text: self.show_banner(text, "notice"))
        self.mcp.noticeGone.connect(self.hide_banner_if)
        self.library = ModelsUI(self)
        self.library.loadRequested.connect(self.load_model)
        self.library.modelsChanged.connect(lambda: self.picker.set_entries("library", self.library.picker_entries()))
        self.picker.fileOpened.connect(self.library.opened)
        self.picker.set_entries("library", self.library.picker_entries())
        self.modelsButton.clicked.connect(self.library.open)
        self._restore()
        if presets.notice:
            self.show_banner(presets.notice, "notice")

    # -- construction ---------------------------------------------------------------------------------
    def _build(self) -> None:
        # Sidebar: new chat, search, chat list, undo bar. Its widgets are also attributes here, for
        # tests and scripts.
        side = self.sidebar = ChatSidebar(self.chats)
        for name in ("newChatButton", "chatSearch", "chatModel", "chatFilter", "chatList", "undoBar",
                     "undoLabel", "undoButton"):
            setattr(self, name, getattr(side, name))

        top = window_parts.build_top_bar(self)
        centre = window_parts.build_centre(self, top)
        self.samplingPanel = SamplingPanel()
        self.samplingPanel.setMinimumWidth(230)
        self.splitter = QSplitter(objectName="mainSplitter")
        self.splitter.addWidget(side)
        self.splitter.addWidget(centre)
        self.splitter.addWidget(self.samplingPanel)
        self.splitter.setHandleWidth(1)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(1, False)
        self.splitter.setSizes([210, 840, 230])
        self.setCentralWidget(self.splitter)
        self.setMinimumSize(MIN_SIZE)
        self.status = window_parts.StatusLine(self)
        self.panels = window_parts.PanelFit(self)
        self.presetChoice = PresetChoice(self)
        window_parts.build_menus(self)
        self.resize(1280, 820)

    def _wire(self) -> None:
        self.picker.modelReady.connect(self._on_model_loaded)
        self.picker.problem.connect(self.show_banner)
        self.status.connect_worker(self.client)
        self.status.problem.connect(self.show_banner)
        self.status.prefixShown.connect(self.prefixResult)
        self.presetChoice.changed.connect(self._update_empty_hint)
        self.presetChoice.loadRequested.connect(self.load_model)
        self.presetChoice.problem.connect(self.show_banner)
        cv = self.conversation
        cv.generatingChanged.connect(self._on_generating)
        cv.replyFinished.connect(self.status.on_reply_finished)
        cv.chatCreated.connect(self.sidebar.add)
        cv.chatChanged.connect(self.sidebar.refresh)
        cv.storageFailed.connect(lambda message: self.show_banner(message, "error"))
        self.sidebar.storageFailed.connect(lambda message: self.show_banner(message, "error"))
        cv.storageRecovered.connect(lambda message: self.show_banner(message, "notice"))
        self.sendButton.clicked.connect(self.send)
        self.stopButton.clicked.connect(self.stop)
        self.messageInput.sendRequested.connect(self.send)
        self.draftTokens = DraftTokens(self.messageInput, self.conversation, self.client, self.tokenCount,
                                       lambda: self._edit_row, self.draft_text, self, lambda: self.model_info)
        self.presetPicker.activated.connect(self.draftTokens.schedule)
        self.modelReady.connect(self.draftTokens.schedule)
        self.attachmentBar.changed.connect(self.draftTokens.recount)
        self.attachmentBar.refused.connect(lambda why: self.show_banner(why, "warning"))
        self.messageInput.filesDropped.connect(self.attachmentBar.add_files)
        self.attachButton.clicked.connect(lambda: window_parts.attach_dialog(self))
        self.sidebar.newChatRequested.connect(self.new_chat)
        self.sidebar.chatSelected.connect(lambda cid: cid != self.conversation.chat_id and self._show_chat(cid))
        self.sidebar.deleteRequested.connect(self.delete_chat)
        self.messageView.editRequested.connect(self.edit_message)
        self.messageView.regenerateRequested.connect(self.regenerate)
        self.messageView.versionRequested.connect(
            lambda step: self.conversation.switch_version(self.conversation.model.rowCount() - 1, step))
        QShortcut(QKeySequence("Ctrl+Return"), self, self.send)
        QShortcut(QKeySequence("Ctrl+Enter"), self, self.send)
        QShortcut(QKeySequence("Escape"), self, self._on_escape)
        QShortcut(QKeySequence("Ctrl+K"), self, self.sidebar.focus_search)
        QApplication.styleHints().colorSchemeChanged.connect(lambda _: self._apply_theme())

    def _restore(self) -> None:
        s = self.settings
        rect = s.get("window/rect")
        if len(rect) == 4:
            # The frame's position and the client's size: both come back as they were under a window
            # manager (restoreGeometry adds the frame once more on X11: a shift and a smaller window).
            self.resize(max(MIN_SIZE.width(), int(rect[2])), max(MIN_SIZE.height(), int(rect[3])))
            self.move(int(rect[0]), int(rect[1]))
        if s.get("window/splitter"):
            self.splitter.restoreState(s.get("window/splitter"))
        for a in self.themeGroup.actions():
            a.setChecked(a.data() == s.get("ui/theme"))
        self._apply_theme()
        self.samplingToggle.setChecked(s.get("ui/sampling_panel"))
        self.samplingPanel.setVisible(s.get("ui/sampling_panel"))
        self.sidebarToggle.setChecked(s.get("ui/sidebar"))
        self.sidebar.setVisible(s.get("ui/sidebar"))
        self._fill_presets()
        self.picker.refresh()
        last = s.get("chat/last")
        chat_id = last if last and self.sidebar.has(last) else self.sidebar.first_id()
        if chat_id is None or not self.sidebar.select(chat_id):
            self._show_chat(chat_id)
        self.load_model(s.get("model/path"))

    # -- theme ----------------------------------------------------------------------------------------
    def set_theme(self, choice: str) -> None:
        self.settings.set("ui/theme", choice)
        for a in self.themeGroup.actions():
            a.setChecked(a.data() == choice)
        self._apply_theme()

    def _apply_theme(self) -> None:
        self.dark = theme.apply(QApplication.instance(), self.settings.get("ui/theme"))

    # -- banner and progress --------------------------------------------------------------------------
    def show_banner(self, text: str, kind: str = "error") -> None:
        self.banner.setProperty("kind", kind)
        self.banner.style().unpolish(self.banner)
        self.banner.style().polish(self.banner)
        self.bannerLabel.setText(text)
        self.banner.show()
        if kind == "error":
            self.last_error = text

    def hide_banner_if(self, text: str) -> None:
        """The banner goes if it still shows `text`, a sentence that no longer holds."""
        if self.bannerLabel.text() == text:
            self.banner.hide()

    # -- models ---------------------------------------------------------------------------------------
    @property
    def model_info(self) -> dict:
        """The model that runs (ModelInfo as a dict, with "path_setting" and "backend_setting"); {} before
        the first load."""
        return self.picker.info

    def load_model(self, path: str) -> None:
        self.picker.load(path)

    def _on_model_loaded(self, info: dict) -> None:
        self.status.clear()
        self.conversation.model_name = info.get("label") or info.get("name", "")
        self.thinkingToggle.setVisible(bool(info.get("thinking_switch")))
        self.messageView.set_waiting_text("waiting for the server" if info.get("backend") == "remote" else "")
        self.set_thinking(self.thinkingToggle.isChecked())
        self._update_empty_hint()
        self.modelReady.emit(info)
        self.conversation.open_context()
        self.presetChoice.warm()

    # -- presets --------------------------------------------------------------------------------------
    def _fill_presets(self) -> None:
        self.presetChoice.fill()

    def current_preset(self):
        return self.presetChoice.current()

    def select_preset(self, pid: str) -> None:
        """Use preset `pid` for the open chat (and new chats), and make its prefix resident."""
        self.presetChoice.select(pid)

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self.panels.fit()

    def open_preset_manager(self) -> PresetManager:
        return self.presetChoice.open_manager()

    def open_about(self) -> AboutDialog:
        dlg = AboutDialog(self)
        self.aboutDialog = dlg
        dlg.show()
        return dlg

    def open_cache_panel(self) -> CachePanel:
        dlg = CachePanel(self.client, self.settings, self)
        self.cachePanel = dlg
        dlg.refresh()
        dlg.show()
        return dlg

    def open_context_length(self) -> ContextLengthDialog | None:
        """The loaded model's context length, with the memory it needs; Apply reloads the model."""
        if self.model_info.get("backend") == "remote":
            self.show_banner("The context length of a model on a server is set on that server.")
            return None
        try:
            facts = read_facts(real_model_path(self.model_info.get("path_setting", "")))
        except Exception as e:  # noqa: BLE001  the file went away or broke since it was loaded
            self.show_banner(f"Cannot read the model file: {e}")
            return None
        dlg = ContextLengthDialog(facts, int(self.model_info.get("n_ctx") or 0), self,
                                  self.settings.get("model/kv_dtype"))
        dlg.chosen.connect(self.set_context_length)
        self.contextLengthDialog = dlg
        dlg.show()
        return dlg

    def set_thinking(self, on: bool) -> None:
        """Think on or off for the next replies; only a template that takes enable_thinking gets it."""
        self.conversation.template_vars = {"enable_thinking": on} if self.model_info.get("thinking_switch") else {}

    def set_context_length(self, n_ctx: int) -> None:
        """Remember `n_ctx` for the loaded model and load it again with a KV cache that size."""
        if self.conversation.generating:
            self.show_banner("Wait for the reply to finish before changing the context length.")
            return
        path = self.model_info.get("path_setting", "")
        try:
            set_n_ctx(self.modelSettings, path, n_ctx)
        except EngineError as e:
            self.show_banner(str(e))
            return
        self.load_model(path)

    def set_kv_dtype(self, name: str) -> None:
        """Remember the KV cache precision ("f32" or "f16") and load the model again with a cache of it.
        The chat stays: its context is restored from images of that precision, or computed again."""
        if self.conversation.generating:
            self.kvDtypeActions[self.settings.get("model/kv_dtype")].setChecked(True)
            self.show_banner("Wait for the reply to finish before changing the KV cache precision.")
            return
        if name == self.settings.get("model/kv_dtype"):
            return
        self.settings.set("model/kv_dtype", name)
        self.kvDtypeActions[name].setChecked(True)
        if self.model_info and self.model_info.get("backend") != "remote":
            self.load_model(self.model_info.get("path_setting", ""))

    # -- export and import ----------------------------------------------------------------------------
    def export_chats(self, path: str, fmt: str, all_chats: bool = False) -> bool:
        """The open chat (or every chat) to `path` as "json" or "markdown"."""
        ids = [c.id for c in self.chats.chats()] if all_chats else \
            [self.conversation.chat_id] if self.conversation.chat_id else []
        if not ids:
            self.show_banner("There is no chat to export.", "warning")
            return False
        try:
            export_chats(self.chats, ids, path, fmt)
        except OSError as e:
            self.show_banner(f"Could not export to {path}: {e.strerror or e}")
            return False
        return True

    def import_chats(self, path: str) -> list:
        """The chats of a Hearth JSON export, added as new chats; the first is opened."""
        try:
            with open(path, encoding="utf-8") as f:
                added = import_json(self.chats, f.read(), os.path.basename(path))
        except (OSError, UnicodeDecodeError, ChatImportError) as e:
            self.show_banner(f"Could not import {path}: {e}")
            return []
        for chat in added:
            self.sidebar.add(chat)
        if added:
            self.sidebar.select(added[0].id)
            self._show_chat(added[0].id)
        return added

    # -- chats ----------------------------------------------------------------------------------------
    def new_chat(self) -> None:
        """A new chat, or the empty one already there (empty chats do not pile up)."""
        cv = self.conversation
        if cv.chat_id is not None and cv.model.rowCount() == 0:
            self.messageInput.setFocus()
            return
        empty = self.chats.empty_chat()
        if empty is not None and self.sidebar.has(empty):
            self.chats.set_chat_preset(empty, self.current_preset().id)
            self.sidebar.clear_search()
            self.sidebar.select(empty)
        else:
            cv.new_chat(self.current_preset().id)
        self.messageInput.setFocus()

    def _show_chat(self, chat_id: int | None) -> None:
        self.cancel_edit()
        self.conversation.open_chat(chat_id)
        self.sidebar.open_id = chat_id
        self.settings.set("chat/last", chat_id or 0)
        chat = self.chats.chat(chat_id) if chat_id else None
        if chat and self.presets.get(chat.preset_id):
            self.presetChoice.show(chat.preset_id)
        self.presetChoice.show_sampling()
        self._update_empty_hint()
        self.messageView.scroll_to_bottom()
        self.presetChoice.warm()

    def _update_empty_hint(self) -> None:
        p = self.current_preset()
        if not self.model_info:
            self.messageView.set_empty_text(f"<b>{p.name}</b><br><br>Loading the model…")
            return
        model = self.model_info.get("label") or self.model_info.get("name")
        where = ("runs entirely on this computer; nothing leaves it." if self.model_info.get("backend") != "remote"
                 else f"runs on the {self.model_info.get('adapter')}; your messages are sent there.")
        self.messageView.set_empty_text(f"<b>{p.name}</b><br><br>Ask anything. {model} {where}")

    def delete_chat(self, chat_id: int) -> None:
        """Delete a chat (Undo in the sidebar brings it back). A chat still replying is stopped first."""
        if self.conversation.generating and self.conversation.replying_chat() == chat_id:
            self.conversation.stop()
            return
        was_open = self.conversation.chat_id == chat_id
        nxt = self.sidebar.remove(chat_id)
        self.client.forget_chat(chat_id)
        if was_open and (nxt is None or not self.sidebar.select(nxt)):
            self._show_chat(nxt)

    def undo_delete(self) -> None:
        self.sidebar.undo()

    # -- sending --------------------------------------------------------------------------------------
    def draft_text(self) -> str:
        """The message as Send would send it: the attached files, then the typed text."""
        return message_text(self.messageInput.toPlainText(), self.attachmentBar.attachments)

    def send(self) -> bool:
        text = self.draft_text()
        if not text.strip() or self.conversation.generating:
            return False
        refusal = self.draftTokens.refusal(text)
        if refusal:
            self.show_banner(refusal, "warning")
            return False
        had_chat = self.conversation.chat_id is not None
        ok = self.conversation.send(text, self.current_preset().id, self._edit_row)
        if ok:
            self.messageInput.clear()
            self.attachmentBar.clear()
            self.cancel_edit()
            self.messageView.scroll_to_bottom()
            if not had_chat:
                self.sidebar.select(self.conversation.chat_id)
        return ok

    def stop(self) -> None:
        self.conversation.stop()

    def regenerate(self) -> bool:
        return self.conversation.regenerate()

    def edit_message(self, row: int) -> None:
        """Put a user message in the input box; sending replaces it and everything after it."""
        if self.conversation.generating:
            return
        m = self.conversation.model.message(row)
        self._edit_row = row
        self.messageInput.setPlainText(m.content)
        self.editHint.setText("Editing a message: Enter resends from there (later messages are replaced), "
                              "Esc cancels.")
        self.editHint.show()
        self.messageInput.setFocus()

    @property
    def editing(self) -> bool:
        """A user message is in the input box as an edit (sending replaces it)."""
        return self._edit_row is not None

    def cancel_edit(self) -> None:
        if self._edit_row is not None:
            self._edit_row = None
            self.messageInput.clear()
        self.editHint.hide()

    def _on_escape(self) -> None:
        if self.chatSearch.hasFocus() and self.sidebar.clear_search():
            return
        if self.conversation.generating:
            self.stop()
        elif self._edit_row is not None:
            self.cancel_edit()

    def _on_generating(self, on: bool) -> None:
        self.sendButton.setVisible(not on)
        self.stopButton.setVisible(on)
        self.regenerateAction.setEnabled(not on)

    # -- quitting -------------------------------------------------------------------------------------
    def closeEvent(self, e) -> None:
        if not self._closed:
            self._closed = True
            s = self.settings
            s.set("window/rect", [self.pos().x(), self.pos().y(), self.width(), self.height()])
            s.set("window/splitter", bytes(self.splitter.saveState().data()))
            self.serveToggle.stop()
            self.library.shutdown()
            self.statusPrefix.setText("Saving chat context…")
            self.statusPrefix.repaint()
            self.client.shutdown()
            self.conversation.close()
            self.mcp.close()
            s.sync()
        super().closeEvent(e)

    def sizeHint(self) -> QSize:
        return QSize(1280, 820)
