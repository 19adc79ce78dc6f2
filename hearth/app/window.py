"""The main window: chat list, conversation, pickers, sampling panel, status bar.

It wires widgets to the Conversation (the open chat), the stores and the EngineClient; all model work
happens on the worker thread and comes back as signals.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (QApplication, QComboBox, QFrame, QHBoxLayout, QLabel, QMainWindow, QMessageBox,
                               QProgressBar, QPushButton, QSplitter, QToolButton,
                               QVBoxLayout, QWidget)

from hearth.engine.errors import EngineError
from hearth.engine.library.model_facts import read_facts
from hearth.engine.library.model_settings import ModelSettingsStore
from hearth.engine.paths import cache_dir

from . import theme
from .chat_context import chat_context_line
from .chat_source import human_bytes
from .cache_panel import CachePanel
from .chat_sidebar import ChatSidebar
from .chat_store import ChatStore, ChatStoreError
from .context_length import ContextLengthDialog, n_ctx_for, real_model_path, set_n_ctx
from .conversation import Conversation
from .attachment_bar import AttachmentBar
from .attachments import message_text
from .draft_tokens import DraftTokens
from .export import ChatImportError, import_json
from .export import export as export_chats
from .message_input import MessageInput
from .mcp_servers import McpServers
from .mcp_tools import McpTools
from .message_view import MessageView
from .models_ui import ModelsUI
from .preset_manager import PresetManager
from .preset_store import RESOURCES, PresetStore
from .about import AboutDialog
from .elided_label import ElidedLabel
from .model_picker import ModelPicker
from .remote_ui import RemoteUI
from .sampling_panel import SamplingPanel
from .server_toggle import ServeToggle
from .tool_confirm import ToolConfirmBar
from .settings import Settings
from .worker import EngineClient

MIN_SIZE = QSize(760, 520)
# the Settings menu's KV cache precisions (engine/kv_cache.py's names)
KV_DTYPE_CHOICES = (("f32", "float32 (exact)"), ("f16", "float16 (half the memory)"))
WIDE = 1300     # below this the top bar drops its "Preset" and "Model" labels
NARROW = 1000   # below this the sampling panel has no room: its toggle goes too (Ctrl+Shift+S stays)


def _set_state(widget: QWidget, name: str, on: bool) -> None:
    """A dynamic property the stylesheet reads, re-applied at once."""
    widget.setProperty(name, "true" if on else "false")
    widget.style().unpolish(widget)
    widget.style().polish(widget)


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
        self.mcp.toolsChanged.connect(self.warm_preset)
        self.mcp.notice.connect(lambda text: self.show_banner(text, "notice"))
        self.mcp.noticeGone.connect(self.hide_banner_if)
        self.mcp.approvalNeeded.connect(self._ask_mcp_approval)
        self.library = ModelsUI(self)
        self.library.loadRequested.connect(self.load_model)
        self.library.modelsChanged.connect(self._list_library_models)
        self.picker.fileOpened.connect(self.library.opened)
        self._list_library_models()
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

        top = self._build_top_bar()
        centre = self._build_centre(top)
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
        self._auto_hidden: set[str] = set()     # panels hidden because the window is too narrow for them

        self._build_status_bar()
        self._menus()
        self.resize(1280, 820)

    def _build_top_bar(self) -> QWidget:
        """Preset, model, backend, model info, sampling toggle."""
        top = self.topBar = QWidget(objectName="topBar")
        tl = QHBoxLayout(top)
        tl.setContentsMargins(12, 6, 12, 6)
        self.presetPicker = QComboBox(objectName="presetPicker", minimumContentsLength=10)
        self.presetPicker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.presetPicker.setToolTip("Preset: system prompt, tools and sampling for this chat")
        self.presetPicker.setAccessibleName("Preset")
        self.picker = ModelPicker(self.settings, self.client, self)
        # a model's own context length (Settings → Context length…) over the app-wide one
        self.picker.n_ctx_of = lambda path: n_ctx_for(self.modelSettings, path, self.settings.get("model/n_ctx"))
        # The picker's widgets, also attributes here for tests and scripts.
        self.modelPicker, self.backendPicker, self.modelInfo = (self.picker.combo, self.picker.backendBox,
                                                                self.picker.infoLabel)
        self.samplingToggle = QToolButton(text="Sampling", objectName="samplingToggle", checkable=True)
        self.samplingToggle.setToolTip("Show or hide the sampling panel (Ctrl+Shift+S)")
        self.samplingToggle.setAccessibleName("Sampling panel")
        self.samplingToggle.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.sidebarToggle = QToolButton(text="☰", objectName="sidebarToggle", checkable=True, checked=True)
        self.sidebarToggle.setToolTip("Show or hide the chat list (Ctrl+B)")
        self.sidebarToggle.setAccessibleName("Chat list")
        self.sidebarToggle.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.modelsButton = QToolButton(text="Models", objectName="modelsButton")
        self.modelsButton.setToolTip("Find, download and manage models (Ctrl+Shift+M)")
        self.modelsButton.setAccessibleName("Models window")
        self.modelsButton.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        tl.addWidget(self.sidebarToggle)
        presetLabel = self.presetLabel = QLabel("Preset")
        presetLabel.setBuddy(self.presetPicker)
        tl.addWidget(presetLabel)
        tl.addWidget(self.presetPicker)
        tl.addSpacing(6)
        modelLabel = self.modelLabel = QLabel("Model")
        modelLabel.setBuddy(self.modelPicker)
        tl.addWidget(modelLabel)
        tl.addWidget(self.modelPicker)
        tl.addWidget(self.backendPicker)
        tl.addWidget(self.modelsButton)
        tl.addWidget(self.modelInfo, 1)
        tl.addWidget(self.samplingToggle)
        return top

    def _build_centre(self, top: QWidget) -> QWidget:
        """The top bar, then the banner, the conversation, the progress bar and the input."""
        self.banner = QFrame(objectName="banner")
        bl = QHBoxLayout(self.banner)
        bl.setContentsMargins(12, 6, 6, 6)
        self.bannerLabel = QLabel("", wordWrap=True, objectName="bannerText")
        self.bannerLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton(text="✕", autoRaise=True)
        close.clicked.connect(self.banner.hide)
        bl.addWidget(self.bannerLabel, 1)
        bl.addWidget(close)
        self.banner.hide()
        self.messageView = MessageView()
        self.messageView.setModel(self.conversation.model)
        self.workBar = QWidget()
        wl = QHBoxLayout(self.workBar)
        wl.setContentsMargins(24, 2, 24, 2)
        self.workLabel = QLabel("", objectName="workLabel")
        self.workProgress = QProgressBar(objectName="workProgress", textVisible=False)
        wl.addWidget(self.workLabel)
        wl.addWidget(self.workProgress, 1)
        self.workBar.hide()
        inputFrame = QFrame(objectName="messageInputFrame")
        il = QHBoxLayout(inputFrame)
        il.setContentsMargins(10, 6, 6, 6)
        self.messageInput = MessageInput()
        self.messageInput.focusChanged.connect(lambda on: _set_state(inputFrame, "focused", on))
        self.sendButton = QPushButton("Send", objectName="sendButton")
        self.sendButton.setToolTip("Send (Enter or Ctrl+Enter)")
        self.sendButton.setAccessibleName("Send")
        self.stopButton = QPushButton("Stop", objectName="stopButton")
        self.stopButton.setToolTip("Stop the reply (Esc)")
        self.stopButton.setAccessibleName("Stop the reply")
        self.stopButton.hide()
        self.tokenCount = QLabel("", objectName="tokenCount")
        self.attachButton = QToolButton(text="Attach", objectName="attachButton")
        self.attachButton.setToolTip("Attach text, code or PDF files (or drop them on the message box)")
        self.attachmentBar = AttachmentBar(self.conversation, self.client)
        self.thinkingToggle = QToolButton(text="Think", objectName="thinkingToggle", checkable=True, checked=True)
        self.thinkingToggle.setToolTip("Let the model think before it answers (its template's enable_thinking)")
        self.thinkingToggle.toggled.connect(self._on_thinking_toggled)
        self.thinkingToggle.hide()
        il.addWidget(self.attachButton, 0, Qt.AlignmentFlag.AlignBottom)
        il.addWidget(self.messageInput, 1)
        il.addWidget(self.tokenCount, 0, Qt.AlignmentFlag.AlignBottom)
        il.addWidget(self.thinkingToggle, 0, Qt.AlignmentFlag.AlignBottom)
        il.addWidget(self.sendButton, 0, Qt.AlignmentFlag.AlignBottom)
        il.addWidget(self.stopButton, 0, Qt.AlignmentFlag.AlignBottom)
        self.editHint = QLabel("", objectName="hint")
        self.editHint.hide()
        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(top)
        cl.addWidget(self.banner)
        cl.addWidget(self.messageView, 1)
        cl.addWidget(self.workBar)
        bottom = QWidget(objectName="messageColumn")
        bo = QVBoxLayout(bottom)
        bo.setContentsMargins(24, 6, 24, 12)
        self.toolConfirm = ToolConfirmBar(self.conversation.tools)
        bo.addWidget(self.toolConfirm)
        bo.addWidget(self.editHint)
        bo.addWidget(self.attachmentBar)
        bo.addWidget(inputFrame)
        cl.addWidget(bottom)
        return centre

    def _build_status_bar(self) -> None:
        """Prefix cache line, speed, KV memory, context used."""
        sb = self.statusBar()
        self.statusContext = QProgressBar(objectName="statusContext")
        self.statusContext.setToolTip("Context used / context size (tokens)")
        self.statusContext.setFormat("context %v / %m")
        self.statusContext.setRange(0, 1)
        self.statusContext.setValue(0)
        self.statusContext.hide()                 # until a model says its context size
        self.statusKv = QLabel("", objectName="statusKv")
        self.statusSpeed = QLabel("", objectName="statusSpeed")
        self.statusPrefix = ElidedLabel("", objectName="statusPrefix")
        sb.addWidget(self.statusPrefix, 1)
        sb.addPermanentWidget(self.statusSpeed)
        sb.addPermanentWidget(self.statusKv)
        sb.addPermanentWidget(self.statusContext)

    def _menus(self) -> None:
        mb = self.menuBar()
        f = mb.addMenu("&File")
        self.newChatAction = f.addAction("New chat", self.new_chat)
        self.newChatAction.setShortcut(QKeySequence.StandardKey.New)
        f.addAction("Open model file…", self.picker.open_file)
        f.addAction("Models…", QKeySequence("Ctrl+Shift+M"), lambda: self.library.open())
        f.addSeparator()
        f.addAction("Export chat…", lambda: self._export_dialog(False))
        f.addAction("Export all chats…", lambda: self._export_dialog(True))
        f.addAction("Import chats…", self._import_dialog)
        f.addSeparator()
        f.addAction("Quit", QKeySequence.StandardKey.Quit, self.close)
        c = mb.addMenu("&Chat")
        self.regenerateAction = c.addAction("Regenerate last reply", self.regenerate)
        self.regenerateAction.setShortcut(QKeySequence("Ctrl+R"))
        c.addAction("Rename chat", lambda: self.sidebar.rename_current(), QKeySequence("F2"))
        c.addAction("Delete chat", self._delete_current)
        p = mb.addMenu("&Presets")
        p.addAction("Manage presets…", self.open_preset_manager)
        v = mb.addMenu("&View")
        self.themeGroup = QActionGroup(self)
        for label, key in (("Follow system", "system"), ("Light", "light"), ("Dark", "dark")):
            a = QAction(f"Theme: {label}", self, checkable=True)
            a.setData(key)
            self.themeGroup.addAction(a)
            v.addAction(a)
        self.themeGroup.triggered.connect(lambda a: self.set_theme(a.data()))
        v.addSeparator()
        v.addAction("Chat list", QKeySequence("Ctrl+B"), self.sidebarToggle.toggle)
        v.addAction("Sampling panel", QKeySequence("Ctrl+Shift+S"), self.samplingToggle.toggle)
        s = mb.addMenu("&Settings")
        s.addAction("Prefix cache…", self.open_cache_panel)
        self.contextLengthAction = s.addAction("Context length…", self.open_context_length)
        kv = s.addMenu("KV cache precision")
        kv.setObjectName("kvDtypeMenu")
        self.kvDtypeGroup = QActionGroup(self)
        self.kvDtypeActions: dict[str, QAction] = {}
        for name, label in KV_DTYPE_CHOICES:
            a = kv.addAction(label)
            a.setObjectName(f"kvDtype_{name}")
            a.setCheckable(True)
            a.setChecked(self.settings.get("model/kv_dtype") == name)
            a.triggered.connect(lambda _=False, n=name: self.set_kv_dtype(n))
            self.kvDtypeGroup.addAction(a)
            self.kvDtypeActions[name] = a
        self.serveToggle = ServeToggle(self.settings, self.client, s, self.statusBar(), self)
        self.serveToggle.problem.connect(self.show_banner)
        self.modelReady.connect(self.serveToggle.on_model_ready)
        self.allowFetchAction = s.addAction("Allow tools to fetch URLs")
        self.allowFetchAction.setCheckable(True)
        self.allowFetchAction.setChecked(self.settings.get("tools/allow_fetch"))
        self.allowFetchAction.toggled.connect(lambda on: self.settings.set("tools/allow_fetch", on))
        h = mb.addMenu("&Help")
        h.addAction("About Hearth…", self.open_about)

    def _wire(self) -> None:
        w = self.client.worker
        self.picker.modelReady.connect(self._on_model_loaded)
        self.picker.problem.connect(self.show_banner)
        w.prefixReady.connect(self._on_prefix)
        w.chatContext.connect(self._on_chat_context)
        w.progress.connect(self._on_progress)
        w.contextChanged.connect(self._on_context)
        w.failed.connect(self._on_worker_failed)
        w.delta.connect(self._on_first_delta)
        self.client.busyChanged.connect(self._on_busy)
        cv = self.conversation
        cv.generatingChanged.connect(self._on_generating)
        cv.replyFinished.connect(self._on_reply_finished)
        cv.chatCreated.connect(self._on_chat_created)
        cv.chatChanged.connect(self._on_chat_changed)
        cv.storageFailed.connect(lambda message: self.show_banner(message, "error"))
        self.sidebar.storageFailed.connect(lambda message: self.show_banner(message, "error"))
        cv.storageRecovered.connect(lambda message: self.show_banner(message, "notice"))
        self.sendButton.clicked.connect(self.send)
        self.stopButton.clicked.connect(self.stop)
        self.messageInput.sendRequested.connect(self.send)
        self.draftTokens = DraftTokens(self.messageInput, self.conversation, self.client, self.tokenCount,
                                       lambda: self._edit_row, self.draft_text, self)
        self.attachmentBar.changed.connect(self.draftTokens.recount)
        self.attachmentBar.refused.connect(lambda why: self.show_banner(why, "warning"))
        self.messageInput.filesDropped.connect(self.attachmentBar.add_files)
        self.attachButton.clicked.connect(self._attach_dialog)
        self.sidebar.newChatRequested.connect(self.new_chat)
        self.sidebar.chatSelected.connect(self._on_chat_selected)
        self.sidebar.deleteRequested.connect(self.delete_chat)
        self.messageView.editRequested.connect(self.edit_message)
        self.messageView.regenerateRequested.connect(self.regenerate)
        self.messageView.versionRequested.connect(
            lambda step: self.conversation.switch_version(self.conversation.model.rowCount() - 1, step))
        self.presetPicker.activated.connect(self._on_preset_picked)
        self.samplingPanel.samplingEdited.connect(self._on_sampling_edited)
        self.samplingToggle.toggled.connect(self._on_sampling_toggled)
        self.sidebarToggle.toggled.connect(self._on_sidebar_toggled)
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

    def _on_progress(self, what: str, done: int, total: int) -> None:
        self.workLabel.setText(what + (f"  {done} / {total}" if total and done else ""))
        self.workProgress.setRange(0, total if total and done else 0)
        if total and done:
            self.workProgress.setValue(done)
        self.workBar.show()

    def _on_busy(self, busy: bool) -> None:
        if not busy:
            self.workBar.hide()

    def _on_first_delta(self, *_):
        if self.workBar.isVisible():
            self.workBar.hide()

    def _on_worker_failed(self, rid: int, message: str) -> None:
        if rid < 0:   # not tied to a reply (for example a prefix that could not be computed)
            self.show_banner(message)

    def _on_context(self, d: dict) -> None:
        n = max(1, d.get("n_ctx", 0))
        self.statusContext.setVisible(bool(d.get("n_ctx")))
        self.statusContext.setRange(0, n)
        self.statusContext.setValue(min(n, d.get("used", 0)))
        self.statusKv.setText(f"KV cache {human_bytes(d.get('kv_bytes', 0))}" if d.get("kv_bytes") else "")

    def _on_prefix(self, res: dict) -> None:
        self.last_prefix_result = res
        p = self.presets.get(res.get("preset", ""))
        name = f" “{p.name}”" if p else ""
        verb = "Restored" if res["action"] == "restored" else "Computed"
        self.statusPrefix.setText(f"{verb} preset prefix{name} in {res['ms']:.0f} ms ({res['tokens']} tokens)")
        self.prefixResult.emit(res)

    def _on_chat_context(self, res: dict) -> None:
        self.last_chat_context = res
        text = chat_context_line(res)
        if not text and res.get("saved") and self.statusPrefix.text().startswith("Chat context not saved"):
            text = f"Chat context saved ({res.get('tokens', 0):,} tokens)"   # the failure line is stale
        if text:
            self.statusPrefix.setText(text)

    # -- models ---------------------------------------------------------------------------------------
    @property
    def model_info(self) -> dict:
        """The model that runs (ModelInfo as a dict, with "path_setting" and "backend_setting"); {} before
        the first load."""
        return self.picker.info

    def load_model(self, path: str) -> None:
        self.picker.load(path)

    def _list_library_models(self) -> None:
        self.picker.set_entries("library", self.library.picker_entries())

    def _on_model_loaded(self, info: dict) -> None:
        # A new model's figures come with its first prefix and reply; the last model's are not its own.
        self.statusSpeed.setText("")
        self.statusPrefix.setText("")
        self.conversation.model_name = info.get("name", "")
        self.thinkingToggle.setVisible(bool(info.get("thinking_switch")))
        self._on_thinking_toggled(self.thinkingToggle.isChecked())
        self._update_empty_hint()
        self.modelReady.emit(info)
        self.conversation.open_context()
        self.warm_preset()

    # -- presets --------------------------------------------------------------------------------------
    def _fill_presets(self) -> None:
        pp = self.presetPicker
        cur = pp.currentData() or self.settings.get("preset/last")
        pp.clear()
        for p in self.presets.presets:
            pp.addItem(p.name, p.id)
        pp.setCurrentIndex(max(0, pp.findData(cur)))

    def current_preset(self):
        return self.presets.get(self.presetPicker.currentData()) or self.presets.presets[0]

    def select_preset(self, pid: str) -> None:
        """Use preset `pid` for the open chat (and new chats), and make its prefix resident."""
        i = self.presetPicker.findData(pid)
        if i < 0:
            return
        self.presetPicker.setCurrentIndex(i)
        self._on_preset_picked(i)

    def _on_preset_picked(self, index: int) -> None:
        pid = self.presetPicker.itemData(index)
        self.settings.set("preset/last", pid)
        if self.conversation.chat_id is not None:
            try:
                self.chats.set_chat_preset(self.conversation.chat_id, pid)
            except ChatStoreError as e:
                self.show_banner(f"Could not change the chat's preset: {e}. Free some space and pick it again.",
                                 "error")
        self._show_sampling()
        self._update_empty_hint()
        self.mcp.chosen()
        self.use_preset_model_or_warm()

    def use_preset_model_or_warm(self) -> None:
        """A preset with a preferred model that exists loads it (and is warmed once it is loaded);
        otherwise the current model makes the preset's prefix resident."""
        want = self.current_preset().model
        if want and os.path.isfile(want) and want != self.model_info.get("path_setting"):
            self.load_model(want)
        else:
            self.warm_preset()

    def warm_preset(self) -> None:
        """Ask the worker to make the current preset's prefix resident (restore or compute). Its
        MCP servers start (or stop) here; their tools are in the prefix once they are up."""
        p = self.current_preset()
        self.mcp.use(p)
        if not self.model_info:
            return
        self.client.prepare_prefix(p.id, p.system_prompt, self.mcp.tools_for(p), p.name)

    def _ask_mcp_approval(self, name: str, command_line: str) -> None:
        """A preset's local MCP server runs a command on this computer: the user allows it once."""
        box = QMessageBox(QMessageBox.Icon.Question, "Start an MCP server?",
                          f"The preset <b>{self.current_preset().name}</b> uses the MCP tool server "
                          f"<b>{name}</b>, which runs this command on your computer:", parent=self)
        box.setObjectName("mcpApproval")
        box.setInformativeText(command_line)
        box.allowButton = box.addButton("Allow and start", QMessageBox.ButtonRole.AcceptRole)
        box.denyButton = box.addButton("Don't start", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(box.denyButton)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.buttonClicked.connect(lambda b: self.mcp.approve(name) if b is box.allowButton else self.mcp.deny(name))
        box.finished.connect(lambda _: setattr(self, "mcpApproval", None))
        self.mcpApproval = box
        box.open()

    def _show_sampling(self) -> None:
        p = self.current_preset()
        self.samplingPanel.set_sampling(p.sampling, p.name)

    def _on_sampling_edited(self, s: dict) -> None:
        p = self.current_preset().copy()
        p.sampling = s
        self.presets.update(p)

    def _on_sampling_toggled(self, on: bool) -> None:
        self._auto_hidden.discard("sampling")
        self.samplingPanel.setVisible(on)
        self.settings.set("ui/sampling_panel", on)
        self._fit_panels()

    def _on_sidebar_toggled(self, on: bool) -> None:
        self._auto_hidden.discard("sidebar")
        self.sidebar.setVisible(on)
        self.settings.set("ui/sidebar", on)
        self._fit_panels()

    def _fit_panels(self) -> None:
        """The conversation keeps at least its minimum width: the sampling panel, then the chat list, are
        hidden while the window is too narrow for them, and come back when it is wide enough (the
        user's choice in View stays as it was)."""
        narrow = self.width() < WIDE
        for label in (self.presetLabel, self.modelLabel):   # the boxes say what they are (tooltip, name)
            label.setVisible(not narrow)
        self.samplingToggle.setVisible(self.width() >= NARROW)
        narrow = self.width() < NARROW
        self.messageInput.set_short_hint(narrow)
        for box, chars in ((self.presetPicker, 8 if narrow else 10), (self.modelPicker, 12 if narrow else 16)):
            if box.minimumContentsLength() != chars:
                box.setMinimumContentsLength(chars)
                box.setMinimumWidth(box.sizeHint().width())   # its minimumSizeHint keeps the first length
        self.topBar.layout().activate()
        self.splitter.widget(1).layout().activate()
        centre = self.splitter.widget(1).minimumSizeHint().width() + 8
        want = {"sidebar": self.sidebarToggle.isChecked(), "sampling": self.samplingToggle.isChecked()}
        panels = {"sidebar": self.sidebar, "sampling": self.samplingPanel}
        room = self.width() - centre
        for name in ("sidebar", "sampling"):          # the chat list has the first claim on the room
            need = max(panels[name].minimumWidth(), panels[name].minimumSizeHint().width())
            show = want[name] and room >= need
            if show:
                room -= need
            if show != panels[name].isVisible():
                panels[name].setVisible(show)
            (self._auto_hidden.add if want[name] and not show else self._auto_hidden.discard)(name)

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self._fit_panels()

    def open_preset_manager(self) -> PresetManager:
        dlg = PresetManager(self.presets, self, mcp=self.mcp.servers)
        dlg.select(self.current_preset().id)
        dlg.presetsChanged.connect(self._on_presets_changed)
        dlg.finished.connect(self._focus_input)     # the window's shortcuts work again at once
        self.presetManager = dlg
        dlg.show()
        return dlg

    def _on_presets_changed(self, pid: str) -> None:
        before = self.presetPicker.currentData()
        self._fill_presets()
        self._show_sampling()
        if pid == before or self.presetPicker.currentData() != before:
            self.warm_preset()   # an edited preset has a new key: its image is computed on demand

    def _focus_input(self, *_) -> None:
        self.activateWindow()
        self.messageInput.setFocus()

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

    def _on_thinking_toggled(self, on: bool) -> None:
        """Only a template that takes enable_thinking gets it."""
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

    def _export_dialog(self, all_chats: bool) -> None:
        path, kind = QFileDialog.getSaveFileName(self, "Export chats" if all_chats else "Export chat",
                                                 os.path.expanduser("~"),
                                                 "Markdown (*.md);;JSON, to import again (*.json)")
        if path:
            self.export_chats(path, "json" if path.endswith(".json") or "json" in kind.lower() else "markdown",
                              all_chats)

    def _import_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import chats", os.path.expanduser("~"),
                                              "Hearth chats (*.json);;All files (*)")
        if path:
            self.import_chats(path)

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

    def _on_chat_created(self, chat) -> None:
        self.sidebar.add(chat)

    def _on_chat_changed(self, chat_id: int) -> None:
        self.sidebar.refresh(chat_id)

    def _on_chat_selected(self, chat_id: int) -> None:
        if chat_id != self.conversation.chat_id:
            self._show_chat(chat_id)

    def _show_chat(self, chat_id: int | None) -> None:
        self.cancel_edit()
        self.conversation.open_chat(chat_id)
        self.sidebar.open_id = chat_id
        self.settings.set("chat/last", chat_id or 0)
        chat = self.chats.chat(chat_id) if chat_id else None
        if chat and self.presets.get(chat.preset_id):
            self.presetPicker.setCurrentIndex(self.presetPicker.findData(chat.preset_id))
        self._show_sampling()
        self._update_empty_hint()
        self.messageView.scroll_to_bottom()
        self.warm_preset()

    def _update_empty_hint(self) -> None:
        p = self.current_preset()
        if not self.model_info:
            self.messageView.set_empty_text(f"<b>{p.name}</b><br><br>Loading the model…")
            return
        model = self.model_info.get("name")
        where = ("runs entirely on this computer; nothing leaves it." if self.model_info.get("backend") != "remote"
                 else f"runs on the {self.model_info.get('adapter')}; your messages are sent there.")
        self.messageView.set_empty_text(f"<b>{p.name}</b><br><br>Ask anything. {model} {where}")

    def _delete_current(self) -> None:
        if self.conversation.chat_id is not None:
            self.delete_chat(self.conversation.chat_id)

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

    def _attach_dialog(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", os.path.expanduser("~"),
                                                "Text, code and PDF files (*);;PDF (*.pdf)")
        if paths:
            self.attachmentBar.add_files(paths)

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

    def _on_reply_finished(self, stats: dict) -> None:
        parts = []
        if stats.get("prefill_tps"):
            parts.append(f"prefill {stats['prefill_tps']:.0f} tok/s")
        if stats.get("decode_tps"):
            parts.append(f"decode {stats['decode_tps']:.1f} tok/s")
        self.statusSpeed.setText("  ·  ".join(parts))

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
