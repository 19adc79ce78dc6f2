"""The preset manager (`presetManager`): create, edit, duplicate, delete, reorder, import, export.

The tool set is edited as JSON (a list of function definitions) and validated on save: a bad tool
is shown with its error and nothing is saved until it is fixed.

Edits are kept until saved: picking another preset, Close or Esc with unsaved edits asks Save /
Discard / Cancel first.

Signals:
    presetsChanged(str): a preset was added, edited, removed or moved (its id, "" for several).
"""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QListView, QMenu, QMessageBox, QPlainTextEdit, QPushButton,
                               QSplitter, QToolButton, QVBoxLayout, QWidget)

from hearth.engine.chat.context_policy import POLICIES, POLICY_NAMES
from hearth.engine.chat.preset_format import Preset, PresetError, new_id
from hearth.engine.tools import ToolSchemaError, validate_tool_set

from ..store.item_models import IdRole, PresetListModel
from ..tools.mcp_panel import McpServerList
from ..store.preset_store import RESOURCES, PresetStore
from .sampling_panel import SamplingPanel


def shipped_toolsets() -> list[dict]:
    out = []
    for p in sorted((RESOURCES / "toolsets").glob("*.json")):
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
            out.append({"name": d["name"], "description": d.get("description", ""),
                        "tools": validate_tool_set(d["tools"])})
        except (OSError, ValueError, KeyError, ToolSchemaError):
            continue
    return out


class PresetManager(QDialog):
    presetsChanged = Signal(str)

    def __init__(self, store: PresetStore, parent=None, mcp=None):
        super().__init__(parent)
        self.setObjectName("presetManager")
        self.setWindowTitle("Presets")
        self.resize(980, 640)
        self.store = store
        self.model = PresetListModel(store, self)
        self._current: str = ""
        self._shown: tuple = ()          # the editor's state when the preset was shown (unsaved = differs)
        self.unsavedBox: QMessageBox | None = None

        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        self.list = QListView(objectName="presetList")
        self.list.setModel(self.model)
        self.list.selectionModel().currentChanged.connect(self._on_current)
        ll.addWidget(self.list, 1)
        row1 = QHBoxLayout()
        self.newButton = QPushButton("New", objectName="presetNew")
        self.duplicateButton = QPushButton("Duplicate", objectName="presetDuplicate")
        self.deleteButton = QPushButton("Delete", objectName="presetDelete")
        for b in (self.newButton, self.duplicateButton, self.deleteButton):
            row1.addWidget(b)
        ll.addLayout(row1)
        row2 = QHBoxLayout()
        self.upButton = QToolButton(text="▲ Up", objectName="presetUp")
        self.downButton = QToolButton(text="▼ Down", objectName="presetDown")
        self.importButton = QPushButton("Import…", objectName="presetImport")
        self.exportButton = QPushButton("Export…", objectName="presetExport")
        for b in (self.upButton, self.downButton, self.importButton, self.exportButton):
            row2.addWidget(b)
        ll.addLayout(row2)
        self.newButton.clicked.connect(self.new_preset)
        self.duplicateButton.clicked.connect(lambda: self.duplicate(self._current))
        self.deleteButton.clicked.connect(self._on_delete)
        self.upButton.clicked.connect(lambda: self.move(self._current, -1))
        self.downButton.clicked.connect(lambda: self.move(self._current, +1))
        self.importButton.clicked.connect(self._on_import)
        self.exportButton.clicked.connect(self._on_export)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(8, 0, 0, 0)
        form = QFormLayout()
        self.nameEdit = QLineEdit(objectName="presetName")
        self.systemEdit = QPlainTextEdit(objectName="presetSystemPrompt")
        self.systemEdit.setPlaceholderText("The system prompt: who the assistant is and how it answers.")
        self.modelEdit = QLineEdit(objectName="presetModel", placeholderText="any model")
        form.addRow("Name", self.nameEdit)
        form.addRow("System prompt", self.systemEdit)
        form.addRow("Preferred model", self.modelEdit)
        self.policyPicker = QComboBox(objectName="presetContextPolicy")
        for key in POLICIES:
            self.policyPicker.addItem(POLICY_NAMES[key], key)
        self.policyPicker.setToolTip("When the chat no longer fits the model's context: stop with a message, "
                                     "leave out the oldest exchanges after the first one, or keep only the "
                                     "latest ones. The system prompt is always kept.")
        form.addRow("When the context is full", self.policyPicker)
        self.reasoningPicker = QComboBox(objectName="presetReasoningEffort")
        for key, label in (("", "The model's default"), ("low", "Low"), ("medium", "Medium"), ("high", "High")):
            self.reasoningPicker.addItem(label, key)
        self.reasoningPicker.setToolTip("How long a reasoning model thinks before it answers, for models whose "
                                        "chat template takes a reasoning effort (gpt-oss); others ignore it.")
        form.addRow("Reasoning effort", self.reasoningPicker)
        rl.addLayout(form, 3)
        toolsHead = QHBoxLayout()
        toolsHead.addWidget(QLabel("Tools (JSON list of function definitions)", objectName="panelTitle"))
        toolsHead.addStretch(1)
        self.addToolsetButton = QToolButton(text="Add tool set ▾", objectName="addToolset",
                                            popupMode=QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.addToolsetButton)
        for ts in shipped_toolsets():
            a = menu.addAction(ts["name"])
            a.setToolTip(ts["description"])
            a.triggered.connect(lambda _=False, tools=ts["tools"]: self.add_tools(tools))
        self.addToolsetButton.setMenu(menu)
        toolsHead.addWidget(self.addToolsetButton)
        rl.addLayout(toolsHead)
        self.toolsEdit = QPlainTextEdit(objectName="presetTools")
        self.toolsEdit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.toolsEdit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.toolsEdit.setPlaceholderText('[]  — for example [{"type": "function", "function": {"name": '
                                          '"calculator", "parameters": {"type": "object", "properties": '
                                          '{"expression": {"type": "string"}}}}}]')
        rl.addWidget(self.toolsEdit, 4)
        self.toolsStatus = QLabel("", objectName="toolsStatus", wordWrap=True)
        self.toolsStatus.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        rl.addWidget(self.toolsStatus)
        self._check_timer = QTimer(self, singleShot=True, interval=250)
        self._check_timer.timeout.connect(self.check_tools)
        self.toolsEdit.textChanged.connect(self._check_timer.start)
        self.mcpServers = McpServerList(mcp) if mcp is not None else None
        if self.mcpServers is not None:
            rl.addWidget(self.mcpServers, 3)
        self.errorLabel = QLabel("", objectName="presetError", wordWrap=True)
        rl.addWidget(self.errorLabel)
        self.sampling = SamplingPanel()
        self.sampling.title.setText("Sampling")

        split = QSplitter()
        split.addWidget(left)
        split.addWidget(right)
        split.addWidget(self.sampling)
        split.setSizes([240, 520, 240])
        buttons = QDialogButtonBox()
        self.saveButton = buttons.addButton("Save preset", QDialogButtonBox.ButtonRole.ApplyRole)
        self.saveButton.setObjectName("presetSave")
        self.saveButton.setDefault(True)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.saveButton.clicked.connect(self.save)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(split, 1)
        bottom = QHBoxLayout()
        self.infoLabel = QLabel("", objectName="hint")
        bottom.addWidget(self.infoLabel, 1)
        bottom.addWidget(buttons)
        lay.addLayout(bottom)
        if self.model.rowCount():
            self.select(self.store.presets[0].id)

    # -- selection ------------------------------------------------------------------------------------
    def select(self, pid: str) -> None:
        row = self.model.row_of(pid)
        if row < 0:
            return
        # Going to another preset passes through _on_current, which asks about unsaved edits.
        self.list.selectionModel().setCurrentIndex(self.model.index(row), QItemSelectionModel.SelectionFlag.ClearAndSelect)
        if self.list.currentIndex().row() == row and not (pid == self._current and self.has_unsaved_edits()):
            self._show(pid)

    def _on_current(self, cur, _prev) -> None:
        if not cur.isValid() or cur.data(IdRole) == self._current:
            return
        pid = cur.data(IdRole)
        ok = self.resolve_unsaved()        # a save reloads the list: `cur` is not valid after it
        sm = self.list.selectionModel()
        row = self.model.row_of(pid if ok else self._current)
        if sm.currentIndex().row() != row:   # Cancel: back on the edited preset
            sm.blockSignals(True)
            sm.setCurrentIndex(self.model.index(row), QItemSelectionModel.SelectionFlag.ClearAndSelect)
            sm.blockSignals(False)
        if ok:
            self._show(pid)

    def _editor_state(self) -> tuple:
        return (self.nameEdit.text(), self.systemEdit.toPlainText(), self.modelEdit.text(),
                self.toolsEdit.toPlainText(), json.dumps(self.sampling.sampling(), sort_keys=True),
                self.reasoningPicker.currentData())

    def has_unsaved_edits(self) -> bool:
        return bool(self._current) and self.store.get(self._current) is not None \
            and self._editor_state() != self._shown

    def resolve_unsaved(self) -> bool:
        """Unsaved edits: ask Save / Discard / Cancel. True when the caller may go on (saved, discarded
        or nothing to ask), False on Cancel or a save that failed."""
        if not self.has_unsaved_edits():
            return True
        name = self.store.get(self._current).name
        box = QMessageBox(QMessageBox.Icon.Question, "Unsaved changes",
                          f"The preset “{name}” has changes that are not saved.",
                          QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                          | QMessageBox.StandardButton.Cancel, self)
        box.setObjectName("unsavedPresetBox")
        box.setDefaultButton(QMessageBox.StandardButton.Save)
        self.unsavedBox = box
        answer = box.exec()
        self.unsavedBox = None
        if answer == QMessageBox.StandardButton.Save:
            return self.save(select=False)
        if answer == QMessageBox.StandardButton.Discard:
            self._shown = self._editor_state()
            return True
        return False

    def reject(self) -> None:
        if self.resolve_unsaved():
            super().reject()

    def closeEvent(self, e) -> None:
        if self.resolve_unsaved():
            super().closeEvent(e)
        else:
            e.ignore()

    def _show(self, pid: str) -> None:
        p = self.store.get(pid)
        if p is None:
            return
        self._current = pid
        self.nameEdit.setText(p.name)
        self.systemEdit.setPlainText(p.system_prompt)
        self.modelEdit.setText(p.model)
        self.policyPicker.setCurrentIndex(max(0, self.policyPicker.findData(p.context_policy)))
        self.reasoningPicker.setCurrentIndex(max(0, self.reasoningPicker.findData(p.reasoning_effort)))
        self.toolsEdit.setPlainText(json.dumps(p.tools, indent=2) if p.tools else "[]")
        self.sampling.set_sampling(p.sampling)
        if self.mcpServers is not None:
            self.mcpServers.show_for(p.mcp_servers)
        self.errorLabel.clear()
        self.check_tools()
        self._shown = self._editor_state()

    def current_id(self) -> str:
        return self._current

    # -- actions --------------------------------------------------------------------------------------
    def add_tools(self, tools: list[dict]) -> None:
        try:
            cur = json.loads(self.toolsEdit.toPlainText() or "[]")
            if not isinstance(cur, list):
                cur = []
        except ValueError:
            cur = []
        names = {t.get("function", t).get("name") for t in cur if isinstance(t, dict)}
        cur += [t for t in tools if t["function"]["name"] not in names]
        self.toolsEdit.setPlainText(json.dumps(cur, indent=2))

    def parsed_tools(self) -> list[dict]:
        """The tools in the editor, validated; raises PresetError naming the bad part."""
        text = self.toolsEdit.toPlainText().strip() or "[]"
        try:
            tools = json.loads(text)
        except json.JSONDecodeError as e:
            raise PresetError(f"Tools: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
        try:
            return validate_tool_set(tools)
        except ToolSchemaError as e:
            raise PresetError(f"Tool definition error: {e}") from None

    def check_tools(self) -> bool:
        """Validate the tools as they are typed and say so under the editor."""
        try:
            tools = self.parsed_tools()
            names = ", ".join(t["function"]["name"] for t in tools)
            none = "No tools of its own; its MCP servers' tools are listed below." if getattr(self, "mcpServers", None) else "No tools."
            text, ok = (f"✓ {len(tools)} valid tool(s): {names}" if tools else none), True
        except PresetError as e:
            text, ok = f"✗ {e}", False
        self._set_tools_status(text, ok)
        if self.errorLabel.text().startswith("Not saved. Tool"):   # a failed save's tools error is now stale
            self.errorLabel.clear()
        return ok

    def _set_tools_status(self, text: str, ok: bool) -> None:
        self.toolsStatus.setText(text)
        self.toolsStatus.setProperty("ok", "true" if ok else "false")
        self.toolsStatus.style().unpolish(self.toolsStatus)
        self.toolsStatus.style().polish(self.toolsStatus)

    def edited_preset(self) -> Preset:
        """The preset as the editor shows it, validated; raises PresetError with a readable message."""
        tools = self.parsed_tools()
        return Preset.from_json({"id": self._current or new_id(), "name": self.nameEdit.text(),
                                 "system_prompt": self.systemEdit.toPlainText(), "tools": tools,
                                 "sampling": self.sampling.sampling(), "model": self.modelEdit.text().strip(),
                                 "context_policy": self.policyPicker.currentData(),
                                 "reasoning_effort": self.reasoningPicker.currentData(),
                                 "mcp_servers": self.mcpServers.checked() if self.mcpServers is not None
                                 else self.store.get(self._current).mcp_servers if self.store.get(self._current)
                                 else []})

    def save(self, select: bool = True) -> bool:
        """Validate and save the edited preset; on error show it and save nothing."""
        try:
            p = self.edited_preset()
            self.store.update(p)
        except PresetError as e:
            if not self.check_tools():    # the error is said once: below, not also under the editor
                self._set_tools_status("✗ Not valid: see below.", False)
            self.errorLabel.setText(f"Not saved. {e}")
            return False
        self.errorLabel.setText("")
        self._shown = self._editor_state()
        self.model.reload()
        if select:
            self.select(p.id)
        self.presetsChanged.emit(p.id)
        return True

    def new_preset(self) -> str:
        p = self.store.add(Preset(new_id(), "New preset", "You are a helpful assistant."))
        self.model.reload()
        self.select(p.id)
        self.presetsChanged.emit(p.id)
        self.nameEdit.setFocus()
        self.nameEdit.selectAll()
        return p.id

    def duplicate(self, pid: str) -> str:
        if not pid:
            return ""
        p = self.store.duplicate(pid)
        self.model.reload()
        self.select(p.id)
        self.presetsChanged.emit(p.id)
        return p.id

    def delete(self, pid: str) -> None:
        if len(self.store.presets) <= 1:
            self.errorLabel.setText("Keep at least one preset.")
            return
        row = self.store.index(pid)
        self.store.remove(pid)
        self.model.reload()
        nxt = self.store.presets[min(row, len(self.store.presets) - 1)]
        self.select(nxt.id)
        self.presetsChanged.emit(pid)

    def _on_delete(self) -> None:
        p = self.store.get(self._current)
        if p is None:
            return
        ok = QMessageBox.question(self, "Delete preset", f"Delete the preset “{p.name}”? Chats using it "
                                  "keep their messages and switch to the first preset.")
        if ok == QMessageBox.StandardButton.Yes:
            self.delete(p.id)

    def move(self, pid: str, step: int) -> None:
        i = self.store.index(pid)
        if i < 0 or not 0 <= i + step < len(self.store.presets):
            return
        self.store.move(pid, i + step)
        self.model.reload()
        self.select(pid)
        self.presetsChanged.emit("")

    def export_to(self, path: str, pids: list[str] | None = None) -> None:
        self.store.export(pids if pids is not None else [self._current], path)
        self.infoLabel.setText(f"Exported to {path}")

    def import_from(self, path: str) -> list[Preset]:
        try:
            added = self.store.import_file(path)
        except PresetError as e:
            self.errorLabel.setText(f"Import failed: {e}")
            return []
        self.model.reload()
        if added:
            self.select(added[0].id)
        self.errorLabel.clear()
        self.infoLabel.setText(f"Imported {len(added)} preset(s) from {Path(path).name}.")
        self.presetsChanged.emit("")
        return added

    def _on_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import presets", "", "Hearth presets (*.json)")
        if path:
            self.import_from(path)

    def _on_export(self) -> None:
        p = self.store.get(self._current)
        if p is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export preset", f"{p.name}.hearth-presets.json",
                                              "Hearth presets (*.json)")
        if path:
            self.export_to(path)
