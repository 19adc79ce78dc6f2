"""The main window's own parts: its top bar, centre column and menus as built, the status line, and
the panels that step aside when the window is narrow.

MainWindow calls the builders once; each sets the widgets it makes as attributes of the window
(`w.presetPicker`, `w.statusPrefix`, ...), the names tests and scripts use. The status line and
the panel fit are objects of their own, fed by signals.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import (QComboBox, QFileDialog, QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton,
                               QToolButton, QVBoxLayout, QWidget)

from .chat.attachment_bar import AttachmentBar
from .chat.message_input import MessageInput
from .chat.message_view import MessageView
from .chat_context import chat_context_line
from .chat.markdown_text import duration, tokens
from .chat_source import human_bytes
from .widgets.elided_combo import ElidedComboBox
from .widgets.elided_label import ElidedLabel
from .library.context_length import n_ctx_for
from .library.model_picker import ModelPicker
from .servers.server_toggle import ServeToggle
from .tools.tool_confirm import ToolConfirmBar

# the Settings menu's KV cache precisions (engine/kv_cache.py's names)
KV_DTYPE_CHOICES = (("f32", "float32 (exact)"), ("f16", "float16 (half the memory)"))
WIDE = 1300     # below this the top bar drops its "Preset" and "Model" labels
NARROW = 1000   # below this the sampling panel has no room: its toggle goes too (Ctrl+Shift+S stays)


def set_state(widget: QWidget, name: str, on: bool) -> None:
    """A dynamic property the stylesheet reads, re-applied at once."""
    widget.setProperty(name, "true" if on else "false")
    widget.style().unpolish(widget)
    widget.style().polish(widget)


def _tool_button(text: str, name: str, tip: str, access: str, **kw) -> QToolButton:
    b = QToolButton(text=text, objectName=name, **kw)
    b.setToolTip(tip)
    b.setAccessibleName(access)
    b.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    return b


def build_top_bar(w) -> QWidget:
    """Preset, model, backend, model info, sampling toggle."""
    top = w.topBar = QWidget(objectName="topBar")
    tl = QHBoxLayout(top)
    tl.setContentsMargins(12, 6, 12, 6)
    w.presetPicker = ElidedComboBox(objectName="presetPicker", minimumContentsLength=10)
    w.presetPicker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    w.presetPicker.setToolTip("Preset: system prompt, tools and sampling for this chat")
    w.presetPicker.setAccessibleName("Preset")
    w.picker = ModelPicker(w.settings, w.client, w)
    # a model's own context length (Settings → Context length…) over the app-wide one
    w.picker.n_ctx_of = lambda path: n_ctx_for(w.modelSettings, path, w.settings.get("model/n_ctx"))
    # The picker's widgets, also attributes of the window for tests and scripts.
    w.modelPicker, w.backendPicker, w.modelInfo = w.picker.combo, w.picker.backendBox, w.picker.infoLabel
    w.samplingToggle = _tool_button("Sampling", "samplingToggle", "Show or hide the sampling panel (Ctrl+Shift+S)",
                                    "Sampling panel", checkable=True)
    w.sidebarToggle = _tool_button("☰", "sidebarToggle", "Show or hide the chat list (Ctrl+B)", "Chat list",
                                   checkable=True, checked=True)
    w.modelsButton = _tool_button("Models", "modelsButton", "Find, download and manage models (Ctrl+Shift+M)",
                                  "Models window")
    tl.addWidget(w.sidebarToggle)
    w.presetLabel = QLabel("Preset")
    w.presetLabel.setBuddy(w.presetPicker)
    tl.addWidget(w.presetLabel)
    tl.addWidget(w.presetPicker)
    tl.addSpacing(6)
    w.modelLabel = QLabel("Model")
    w.modelLabel.setBuddy(w.modelPicker)
    tl.addWidget(w.modelLabel)
    for widget in (w.modelPicker, w.backendPicker, w.modelsButton):
        tl.addWidget(widget)
    tl.addWidget(w.modelInfo, 1)
    tl.addWidget(w.samplingToggle)
    return top


def _build_input(w) -> QFrame:
    """The input row: Attach, the message box, its token count, Think, Send / Stop."""
    inputFrame = QFrame(objectName="messageInputFrame")
    il = QHBoxLayout(inputFrame)
    il.setContentsMargins(10, 6, 6, 6)
    w.messageInput = MessageInput()
    w.messageInput.focusChanged.connect(lambda on: set_state(inputFrame, "focused", on))
    w.sendButton = QPushButton("Send", objectName="sendButton")
    w.sendButton.setToolTip("Send (Enter or Ctrl+Enter)")
    w.sendButton.setAccessibleName("Send")
    w.stopButton = QPushButton("Stop", objectName="stopButton")
    w.stopButton.setToolTip("Stop the reply (Esc)")
    w.stopButton.setAccessibleName("Stop the reply")
    w.stopButton.hide()
    w.tokenCount = QLabel("", objectName="tokenCount")
    w.attachButton = QToolButton(text="Attach", objectName="attachButton")
    w.attachButton.setToolTip("Attach text, code or PDF files (or drop them on the message box)")
    w.attachmentBar = AttachmentBar(w.conversation, w.client)
    w.thinkingToggle = QToolButton(text="Think", objectName="thinkingToggle", checkable=True, checked=True)
    w.thinkingToggle.setToolTip("Let the model think before it answers (its template's enable_thinking)")
    w.thinkingToggle.toggled.connect(w.set_thinking)
    w.thinkingToggle.hide()
    il.addWidget(w.attachButton, 0, Qt.AlignmentFlag.AlignBottom)
    il.addWidget(w.messageInput, 1)
    for widget in (w.tokenCount, w.thinkingToggle, w.sendButton, w.stopButton):
        il.addWidget(widget, 0, Qt.AlignmentFlag.AlignBottom)
    return inputFrame


def build_centre(w, top: QWidget) -> QWidget:
    """The top bar, then the banner, the conversation, the progress bar and the input."""
    w.banner = QFrame(objectName="banner")
    bl = QHBoxLayout(w.banner)
    bl.setContentsMargins(12, 6, 6, 6)
    w.bannerLabel = QLabel("", wordWrap=True, objectName="bannerText")
    w.bannerLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    close = QToolButton(text="✕", autoRaise=True)
    close.clicked.connect(w.banner.hide)
    bl.addWidget(w.bannerLabel, 1)
    bl.addWidget(close)
    w.banner.hide()
    w.messageView = MessageView()
    w.messageView.setModel(w.conversation.model)
    w.workBar = QWidget()
    wl = QHBoxLayout(w.workBar)
    wl.setContentsMargins(24, 2, 24, 2)
    w.workLabel = QLabel("", objectName="workLabel")
    w.workProgress = QProgressBar(objectName="workProgress", textVisible=False)
    wl.addWidget(w.workLabel)
    wl.addWidget(w.workProgress, 1)
    w.workBar.hide()
    inputFrame = _build_input(w)
    w.editHint = QLabel("", objectName="hint")
    w.editHint.hide()
    centre = QWidget()
    cl = QVBoxLayout(centre)
    cl.setContentsMargins(0, 0, 0, 0)
    cl.setSpacing(0)
    for widget, stretch in ((top, 0), (w.banner, 0), (w.messageView, 1), (w.workBar, 0)):
        cl.addWidget(widget, stretch)
    bottom = QWidget(objectName="messageColumn")
    bo = QVBoxLayout(bottom)
    bo.setContentsMargins(24, 6, 24, 12)
    w.inputColumn = bottom
    w.messageView.marginChanged.connect(lambda left, right: _align_input(bottom, left, right))
    w.toolConfirm = ToolConfirmBar(w.conversation.tools)
    for widget in (w.toolConfirm, w.editHint, w.attachmentBar, inputFrame):
        bo.addWidget(widget)
    cl.addWidget(bottom)
    return centre


def _align_input(column: QWidget, left: int, right: int) -> None:
    """The input box lines up with the conversation's column where that is narrower than the window."""
    if left > 24:
        column.layout().setContentsMargins(left, 6, right, 12)
    else:
        column.layout().setContentsMargins(24, 6, 24, 12)


def build_menus(w) -> None:
    mb = w.menuBar()
    f = mb.addMenu("&File")
    w.newChatAction = f.addAction("New chat", w.new_chat)
    w.newChatAction.setShortcut(QKeySequence.StandardKey.New)
    f.addAction("Open model file…", w.picker.open_file)
    f.addAction("Models…", QKeySequence("Ctrl+Shift+M"), lambda: w.library.open())
    f.addSeparator()
    f.addAction("Export chat…", lambda: export_dialog(w, False))
    f.addAction("Export all chats…", lambda: export_dialog(w, True))
    f.addAction("Import chats…", lambda: import_dialog(w))
    f.addSeparator()
    f.addAction("Quit", QKeySequence.StandardKey.Quit, w.close)
    c = mb.addMenu("&Chat")
    w.regenerateAction = c.addAction("Regenerate last reply", w.regenerate)
    w.regenerateAction.setShortcut(QKeySequence("Ctrl+R"))
    c.addAction("Rename chat", lambda: w.sidebar.rename_current(), QKeySequence("F2"))
    c.addAction("Delete chat", lambda: w.conversation.chat_id is not None and w.delete_chat(w.conversation.chat_id))
    p = mb.addMenu("&Presets")
    p.addAction("Manage presets…", w.open_preset_manager)
    v = mb.addMenu("&View")
    w.themeGroup = QActionGroup(w)
    for label, key in (("Follow system", "system"), ("Light", "light"), ("Dark", "dark")):
        a = QAction(f"Theme: {label}", w, checkable=True)
        a.setData(key)
        w.themeGroup.addAction(a)
        v.addAction(a)
    w.themeGroup.triggered.connect(lambda a: w.set_theme(a.data()))
    v.addSeparator()
    v.addAction("Chat list", QKeySequence("Ctrl+B"), w.sidebarToggle.toggle)
    v.addAction("Sampling panel", QKeySequence("Ctrl+Shift+S"), w.samplingToggle.toggle)
    _settings_menu(w, mb.addMenu("&Settings"))
    h = mb.addMenu("&Help")
    h.addAction("About Hearth…", w.open_about)


def _settings_menu(w, s) -> None:
    s.addAction("Prefix cache…", w.open_cache_panel)
    w.contextLengthAction = s.addAction("Context length…", w.open_context_length)
    kv = s.addMenu("KV cache precision")
    kv.setObjectName("kvDtypeMenu")
    w.kvDtypeGroup = QActionGroup(w)
    w.kvDtypeActions = {}
    for name, label in KV_DTYPE_CHOICES:
        a = kv.addAction(label)
        a.setObjectName(f"kvDtype_{name}")
        a.setCheckable(True)
        a.setChecked(w.settings.get("model/kv_dtype") == name)
        a.triggered.connect(lambda _=False, n=name: w.set_kv_dtype(n))
        w.kvDtypeGroup.addAction(a)
        w.kvDtypeActions[name] = a
    w.serveToggle = ServeToggle(w.settings, w.client, s, w.statusBar(), w)
    w.serveToggle.problem.connect(w.show_banner)
    w.modelReady.connect(w.serveToggle.on_model_ready)
    w.allowFetchAction = s.addAction("Allow tools to fetch URLs")
    w.allowFetchAction.setCheckable(True)
    w.allowFetchAction.setChecked(w.settings.get("tools/allow_fetch"))
    w.allowFetchAction.toggled.connect(lambda on: w.settings.set("tools/allow_fetch", on))


def export_dialog(w, all_chats: bool) -> None:
    path, kind = QFileDialog.getSaveFileName(w, "Export chats" if all_chats else "Export chat",
                                             os.path.expanduser("~"),
                                             "Markdown (*.md);;JSON, to import again (*.json)")
    if path:
        w.export_chats(path, "json" if path.endswith(".json") or "json" in kind.lower() else "markdown", all_chats)


def import_dialog(w) -> None:
    path, _ = QFileDialog.getOpenFileName(w, "Import chats", os.path.expanduser("~"),
                                          "Hearth chats (*.json);;All files (*)")
    if path:
        w.import_chats(path)


def attach_dialog(w) -> None:
    paths, _ = QFileDialog.getOpenFileNames(w, "Attach files", os.path.expanduser("~"),
                                            "Text, code and PDF files (*);;PDF (*.pdf)")
    if paths:
        w.attachmentBar.add_files(paths)


class StatusLine(QObject):
    """The status bar (prefix cache line, speed, KV memory, context used) and the work bar above
    the input, fed by the worker's signals.

    Signals:
        problem(str): a worker failure not tied to a reply (a prefix that could not be computed).
        prefixShown(dict): what the prefix store did for a preset, as shown.
    """

    problem = Signal(str)
    prefixShown = Signal(dict)

    def __init__(self, w):
        super().__init__(w)
        self.w = w
        sb = w.statusBar()
        w.statusContext = QProgressBar(objectName="statusContext")
        w.statusContext.setToolTip("Context used / context size (tokens)")
        w.statusContext.setFormat("context %v / %m")
        w.statusContext.setRange(0, 1)
        w.statusContext.setValue(0)
        w.statusContext.hide()                 # until a model says its context size
        w.statusKv = QLabel("", objectName="statusKv")
        w.statusSpeed = QLabel("", objectName="statusSpeed")
        w.statusPrefix = ElidedLabel("", objectName="statusPrefix")
        sb.addWidget(w.statusPrefix, 1)
        sb.addPermanentWidget(w.statusSpeed)
        sb.addPermanentWidget(w.statusKv)
        sb.addPermanentWidget(w.statusContext)

    def connect_worker(self, client) -> None:
        wk = client.worker
        wk.prefixReady.connect(self.on_prefix)
        wk.chatContext.connect(self.on_chat_context)
        wk.progress.connect(self.on_progress)
        wk.contextChanged.connect(self.on_context)
        wk.failed.connect(self.on_failed)
        wk.delta.connect(self.on_first_delta)
        client.busyChanged.connect(self.on_busy)

    # Bound methods, not lambdas: the worker's signals cross threads, and a QObject's slot runs on
    # the GUI thread this object lives on.
    def on_failed(self, rid: int, message: str) -> None:
        if rid < 0:   # not tied to a reply (for example a prefix that could not be computed)
            self.problem.emit(message)

    def on_first_delta(self, *_) -> None:
        if self.w.workBar.isVisible():
            self.w.workBar.hide()

    def on_busy(self, busy: bool) -> None:
        if not busy:
            self.w.workBar.hide()

    def clear(self) -> None:
        """A new model's figures come with its first prefix and reply; the last model's are not its own."""
        self.w.statusSpeed.setText("")
        self.w.statusPrefix.setText("")

    def on_progress(self, what: str, done: int, total: int) -> None:
        w = self.w
        w.workLabel.setText(what + (f"  {done} / {total}" if total and done else ""))
        w.workProgress.setRange(0, total if total and done else 0)
        if total and done:
            w.workProgress.setValue(done)
        w.workBar.show()

    def on_context(self, d: dict) -> None:
        n = max(1, d.get("n_ctx", 0))
        self.w.statusContext.setVisible(bool(d.get("n_ctx")))
        self.w.statusContext.setRange(0, n)
        self.w.statusContext.setValue(min(n, d.get("used", 0)))
        self.w.statusKv.setText(f"KV cache {human_bytes(d.get('kv_bytes', 0))}" if d.get("kv_bytes") else "")

    def on_prefix(self, res: dict) -> None:
        self.w.last_prefix_result = res
        p = self.w.presets.get(res.get("preset", ""))
        name = f" “{p.name}”" if p else ""
        verb = "Restored" if res["action"] == "restored" else "Computed"
        self.w.statusPrefix.setText(f"{verb} preset prefix{name} in {duration(res['ms'])} ({tokens(res['tokens'])})")
        self.prefixShown.emit(res)

    def on_chat_context(self, res: dict) -> None:
        self.w.last_chat_context = res
        text = chat_context_line(res)
        if not text and res.get("saved") and self.w.statusPrefix.text().startswith("Chat context not saved"):
            text = f"Chat context saved ({res.get('tokens', 0):,} tokens)"   # the failure line is stale
        if text:
            self.w.statusPrefix.setText(text)

    def on_reply_finished(self, stats: dict) -> None:
        parts = []
        if stats.get("prefill_tps"):
            parts.append(f"prefill {stats['prefill_tps']:.0f} tok/s")
        if stats.get("decode_tps"):
            parts.append(f"decode {stats['decode_tps']:.1f} tok/s")
        self.w.statusSpeed.setText("  ·  ".join(parts))


class PanelFit(QObject):
    """The chat list and the sampling panel beside the conversation: shown or hidden as View says,
    and stepping aside while the window is too narrow for them."""

    def __init__(self, w):
        super().__init__(w)
        self.w = w
        self.auto_hidden: set[str] = set()     # panels hidden because the window is too narrow for them
        w.samplingToggle.toggled.connect(lambda on: self.toggled("sampling", w.samplingPanel, "ui/sampling_panel", on))
        w.sidebarToggle.toggled.connect(lambda on: self.toggled("sidebar", w.sidebar, "ui/sidebar", on))

    def toggled(self, name: str, panel: QWidget, key: str, on: bool) -> None:
        self.auto_hidden.discard(name)
        panel.setVisible(on)
        self.w.settings.set(key, on)
        self.fit()

    def fit(self) -> None:
        """The conversation keeps at least its minimum width: the sampling panel, then the chat list, are
        hidden while the window is too narrow for them, and come back when it is wide enough (the
        user's choice in View stays as it was)."""
        w = self.w
        narrow = w.width() < WIDE
        for label in (w.presetLabel, w.modelLabel):   # the boxes say what they are (tooltip, name)
            label.setVisible(not narrow)
        w.samplingToggle.setVisible(w.width() >= NARROW)
        narrow = w.width() < NARROW
        w.messageInput.set_short_hint(narrow)
        for box, chars in ((w.presetPicker, 8 if narrow else 10), (w.modelPicker, 12 if narrow else 22)):
            if box.minimumContentsLength() != chars:
                box.setMinimumContentsLength(chars)
                box.setMinimumWidth(box.sizeHint().width())   # its minimumSizeHint keeps the first length
        w.topBar.layout().activate()
        w.splitter.widget(1).layout().activate()
        centre = w.splitter.widget(1).minimumSizeHint().width() + 8
        want = {"sidebar": w.sidebarToggle.isChecked(), "sampling": w.samplingToggle.isChecked()}
        panels = {"sidebar": w.sidebar, "sampling": w.samplingPanel}
        room = w.width() - centre
        for name in ("sidebar", "sampling"):          # the chat list has the first claim on the room
            need = max(panels[name].minimumWidth(), panels[name].minimumSizeHint().width())
            show = want[name] and room >= need
            if show:
                room -= need
            if show != panels[name].isVisible():
                panels[name].setVisible(show)
            (self.auto_hidden.add if want[name] and not show else self.auto_hidden.discard)(name)
