"""The preset chosen for the open chat: the top bar's preset box, the sampling panel showing it, the
preset manager opened over it, and its prefix made resident (restored or computed) on the worker.

Signals:
    changed(): another preset is shown (the window's empty-chat text names it).
    loadRequested(str): the chosen preset prefers a model file that is not the one loaded.
    problem(str, str): text and kind ("error", ...) for the window's banner.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QMessageBox

from ..store.chat_store import ChatStoreError
from .preset_manager import PresetManager


class PresetChoice(QObject):
    changed = Signal()
    loadRequested = Signal(str)
    problem = Signal(str, str)

    def __init__(self, w):
        """`w`: the main window, whose preset box (`presetPicker`), sampling panel, stores,
        conversation, MCP tools and engine client this works with."""
        super().__init__(w)
        self.w = w
        self.box = w.presetPicker
        self.box.activated.connect(self._on_picked)
        w.samplingPanel.samplingEdited.connect(self._on_sampling_edited)
        w.mcp.toolsChanged.connect(self.warm)
        w.mcp.approvalNeeded.connect(self._ask_mcp_approval)

    def fill(self) -> None:
        """The box lists the presets as the store has them; the current one stays chosen."""
        cur = self.box.currentData() or self.w.settings.get("preset/last")
        self.box.clear()
        for p in self.w.presets.presets:
            self.box.addItem(p.name, p.id)
        self.box.setCurrentIndex(max(0, self.box.findData(cur)))

    def current(self):
        return self.w.presets.get(self.box.currentData()) or self.w.presets.presets[0]

    def select(self, pid: str) -> None:
        """Use preset `pid` for the open chat (and new chats), and make its prefix resident."""
        i = self.box.findData(pid)
        if i < 0:
            return
        self.box.setCurrentIndex(i)
        self._on_picked(i)

    def show(self, pid: str) -> None:
        """Show `pid` as the open chat's preset (nothing else happens)."""
        self.box.setCurrentIndex(self.box.findData(pid))

    def _on_picked(self, index: int) -> None:
        w = self.w
        pid = self.box.itemData(index)
        w.settings.set("preset/last", pid)
        if w.conversation.chat_id is not None:
            try:
                w.chats.set_chat_preset(w.conversation.chat_id, pid)
            except ChatStoreError as e:
                self.problem.emit(f"Could not change the chat's preset: {e}. Free some space and pick it again.",
                                  "error")
        self.show_sampling()
        self.changed.emit()
        w.mcp.chosen()
        self.use_model_or_warm()

    def use_model_or_warm(self) -> None:
        """A preset with a preferred model that exists loads it (and is warmed once it is loaded);
        otherwise the current model makes the preset's prefix resident."""
        want = self.current().model
        if want and os.path.isfile(want) and want != self.w.model_info.get("path_setting"):
            self.loadRequested.emit(want)
        else:
            self.warm()

    def warm(self) -> None:
        """Ask the worker to make the current preset's prefix resident (restore or compute). Its
        MCP servers start (or stop) here; their tools are in the prefix once they are up."""
        p = self.current()
        self.w.mcp.use(p)
        if not self.w.model_info:
            return
        self.w.client.prepare_prefix(p.id, p.system_prompt, self.w.mcp.tools_for(p), p.name)

    def _ask_mcp_approval(self, name: str, command_line: str) -> None:
        """A preset's local MCP server runs a command on this computer: the user allows it once."""
        w = self.w
        box = QMessageBox(QMessageBox.Icon.Question, "Start an MCP server?",
                          f"The preset <b>{self.current().name}</b> uses the MCP tool server "
                          f"<b>{name}</b>, which runs this command on your computer:", parent=w)
        box.setObjectName("mcpApproval")
        box.setInformativeText(command_line)
        box.allowButton = box.addButton("Allow and start", QMessageBox.ButtonRole.AcceptRole)
        box.denyButton = box.addButton("Don't start", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(box.denyButton)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.buttonClicked.connect(lambda b: w.mcp.approve(name) if b is box.allowButton else w.mcp.deny(name))
        box.finished.connect(lambda _: setattr(w, "mcpApproval", None))
        w.mcpApproval = box
        box.open()

    def show_sampling(self) -> None:
        p = self.current()
        self.w.samplingPanel.set_sampling(p.sampling, p.name)

    def _on_sampling_edited(self, s: dict) -> None:
        p = self.current().copy()
        p.sampling = s
        self.w.presets.update(p)

    def open_manager(self) -> PresetManager:
        w = self.w
        dlg = PresetManager(w.presets, w, mcp=w.mcp.servers)
        dlg.select(self.current().id)
        dlg.presetsChanged.connect(self._on_presets_changed)
        dlg.finished.connect(self._focus_input)     # the window's shortcuts work again at once
        w.presetManager = dlg
        dlg.show()
        return dlg

    def _focus_input(self, *_) -> None:
        self.w.activateWindow()
        self.w.messageInput.setFocus()

    def _on_presets_changed(self, pid: str) -> None:
        before = self.box.currentData()
        self.fill()
        self.show_sampling()
        if pid == before or self.box.currentData() != before:
            self.warm()   # an edited preset has a new key: its image is computed on demand
