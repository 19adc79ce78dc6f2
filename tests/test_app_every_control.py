"""Every control a user can reach works: each QAction of each menu of the main window is triggered,
each button of the window and of the dialogs and windows they open is clicked, and not one slot
raises. File dialogs are answered by the test (real files in a temporary folder); message boxes
opened with exec() are answered with Escape; every dialog is closed again.

Exceptions raised in slots reach sys.excepthook, which pytest-qt replaces during a test unless
`qt_no_exception_capture` is set; each step runs under `qtbot.captureExceptions()` so that a failure
names the control that raised."""

from __future__ import annotations

import json
import os
import sys

import pytest
from app_fixtures import open_window, wait_until
from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer
from PySide6.QtWidgets import (QAbstractButton, QApplication, QFileDialog, QMenu, QMessageBox, QTabWidget, QWidget)

from hearth.app.library.model_picker import OPEN_GGUF
from hearth.engine.chat.preset_format import Preset, check_sampling

GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.1,
                         "max_tokens": 4})
# Top-level widgets that are not windows a user works in.
NOT_WINDOWS = ("QTipLabel", "QComboBoxPrivateContainer", "QMenu", "QCompleter")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("every-control")
    (d / "note.txt").write_text("a line to attach\n", encoding="utf-8")
    (d / "models").mkdir()
    return d


@pytest.fixture(scope="module")
def window(qapp, files):
    # Nothing the Models window asks of the Hub leaves this computer: a closed local port.
    old = os.environ.get("HF_ENDPOINT")
    os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
    try:
        w = open_window(files / "data", files / "cache")
    finally:
        os.environ.pop("HF_ENDPOINT") if old is None else os.environ.__setitem__("HF_ENDPOINT", old)
    w.settings.set("server/port", 0)       # Settings → Serve takes a free port, not a fixed one
    p = w.presets.add(Preset("controls", "Controls", "Answer in one word.", [], dict(GREEDY)))
    w._fill_presets()
    w.select_preset(p.id)
    wait_until(lambda: not w.client.busy)
    yield w
    w.close()


class FileDialogs:
    """QFileDialog's static getters, answered from a table of window titles (a title not in it is
    answered as a cancelled dialog); every question is recorded."""

    def __init__(self, folder, default_model_path):
        self.asked: list[str] = []
        self.answers = {
            "Export chat": str(folder / "chat.json"),
            "Export chats": str(folder / "all.md"),
            "Import chats": str(folder / "chat.json"),
            "Attach files": [str(folder / "note.txt")],
            "Open a GGUF model": str(default_model_path),
            "Export preset": str(folder / "preset.hearth-presets.json"),
            "Import presets": str(folder / "preset.hearth-presets.json"),
            "Models folder": str(folder / "models"),
            "Pick the file the assistant may read": str(folder / "note.txt"),
        }

    def _answer(self, title: str):
        self.asked.append(title)
        return self.answers.get(title, "")

    def save(self, _parent=None, title="", *_a, **_k):
        path = self._answer(title)
        return path, ("JSON (*.json)" if str(path).endswith(".json") else "Markdown (*.md)")

    def open(self, _parent=None, title="", *_a, **_k):
        path = self._answer(title)
        return (path[0] if isinstance(path, list) else path), ""

    def open_many(self, _parent=None, title="", *_a, **_k):
        path = self._answer(title)
        return (path if isinstance(path, list) else [path] if path else []), ""

    def folder(self, _parent=None, title="", *_a, **_k):
        return self._answer(title)

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(self.save))
        monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(self.open))
        monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(self.open_many))
        monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(self.folder))


class MessageBoxes:
    """Answers each message box that runs modally (exec(), the static helpers, open()) with Escape."""

    def __init__(self):
        self.seen: list[str] = []
        self.timer = QTimer(interval=30)
        self.timer.timeout.connect(self._close)
        self.timer.start()

    def _close(self) -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox) and box.isVisible():
            self.seen.append(box.windowTitle() or box.text())
            box.reject()

    def stop(self) -> None:
        self.timer.stop()


def settle(w, ms: int = 150) -> None:
    """Let queued work run: the events of `ms`, then until the engine and any reply are done."""
    QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, ms)
    wait_until(lambda: not w.client.busy and not w.conversation.generating, 120)
    QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)


def windows(w) -> list[QWidget]:
    return [t for t in QApplication.topLevelWidgets()
            if t is not w and t.isVisible() and t.isWindow() and type(t).__name__ not in NOT_WINDOWS
            and not isinstance(t, QMenu)]


def menu_actions(menu: QMenu, path: str = ""):
    for a in menu.actions():
        if a.isSeparator():
            continue
        name = f"{path} → {a.text().replace('&', '')}"
        if a.menu() is not None:
            yield from menu_actions(a.menu(), name)
        else:
            yield name, a


def button_key(b: QAbstractButton) -> tuple:
    return type(b).__name__, b.objectName(), b.text(), b.toolTip()


def buttons(root: QWidget) -> list[QAbstractButton]:
    return [b for b in root.findChildren(QAbstractButton)
            if b.isVisibleTo(root) and b.isEnabled() and b.window() is root]


def next_tab(dlg: QWidget, seen: set) -> bool:
    """Show the next tab not yet shown of a tab widget in `dlg` (its buttons become visible)."""
    for tabs in dlg.findChildren(QTabWidget):
        for i in range(tabs.count()):
            if (id(tabs), i) not in seen and tabs.isTabEnabled(i):
                seen.add((id(tabs), i))
                if i != tabs.currentIndex():
                    tabs.setCurrentIndex(i)
                    return True
    return False


class Exerciser:
    """Runs one step at a time under exception capture; a dialog a step opens has each of its
    buttons clicked (the dialog is opened again by the same step when a button closed it)."""

    def __init__(self, qtbot, w):
        self.qtbot, self.w = qtbot, w
        self.done: list[str] = []
        self.failures: list[str] = []

    def step(self, name: str, fn) -> None:
        with self.qtbot.captureExceptions() as raised:
            try:
                fn()
            except Exception as e:  # noqa: BLE001  a slot called straight from Python raises here
                raised.append((type(e), e, e.__traceback__))
            settle(self.w)
        self.done.append(name)
        for kind, value, _tb in raised:
            self.failures.append(f"{name}: {kind.__name__}: {value}")

    def run(self, name: str, fn, depth: int = 0) -> None:
        """Do `fn` (a trigger or click), then exercise what it opened and close it."""
        before = set(map(id, windows(self.w)))
        self.step(name, fn)
        opened = [t for t in windows(self.w) if id(t) not in before]
        for dlg in opened:
            if depth < 2:
                self.exercise(name, fn, dlg, depth)
            dlg.close()
            settle(self.w)

    def exercise(self, name: str, opener, dlg: QWidget, depth: int) -> None:
        title = dlg.windowTitle() or type(dlg).__name__
        clicked: set[tuple] = set()
        tabs_seen: set[tuple] = set()
        for _round in range(60):                          # a bound: a dialog whose buttons keep changing
            if not dlg.isVisible():
                before = set(map(id, windows(self.w)))
                self.step(f"{name} (again)", opener)
                again = [t for t in windows(self.w) if id(t) not in before and type(t) is type(dlg)]
                if not again and not dlg.isVisible():
                    return
                dlg = again[0] if again else dlg
            todo = [b for b in buttons(dlg) if button_key(b) not in clicked]
            if not todo and not next_tab(dlg, tabs_seen):
                return
            if not todo:
                continue
            b = todo[0]
            clicked.add(button_key(b))
            label = b.text() or b.toolTip() or b.objectName() or type(b).__name__
            self.run(f"{name} → [{title}] {label}", b.click, depth + 1)


def click_window_buttons(ex: Exerciser, w, clicked: set) -> None:
    for _round in range(80):
        todo = [b for b in buttons(w) if button_key(b) not in clicked]
        if not todo:
            return
        b = todo[0]
        clicked.add(button_key(b))
        ex.run(f"window → {b.text() or b.toolTip() or b.objectName()}", b.click)


def test_every_menu_action_and_every_button_runs_without_an_error(qtbot, window, files, default_model_path,
                                                                monkeypatch, request):
    w = window
    assert not request.config.getini("qt_no_exception_capture"), "pytest-qt must capture slot exceptions"
    hook = sys.excepthook                 # the app must not install its own hook, which would swallow them
    owner = getattr(getattr(hook, "func", hook), "__module__", "")
    assert hook is sys.__excepthook__ or owner.startswith("pytestqt"), hook
    # The harness sees an exception raised in a slot (a self-check: without it the test proves nothing).
    with qtbot.captureExceptions() as raised:
        QTimer.singleShot(0, lambda: 1 / 0)
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
    assert raised and raised[0][0] is ZeroDivisionError, "slot exceptions are swallowed"

    dialogs = FileDialogs(files, default_model_path)
    dialogs.install(monkeypatch)
    boxes = MessageBoxes()
    try:
        # A chat with a reply: its bubbles' Copy / Edit / Regenerate are buttons of the window too.
        w.messageInput.setPlainText("Say hello.")
        w.sendButton.click()
        settle(w)
        assert w.conversation.model.rowCount() == 2

        ex = Exerciser(qtbot, w)
        clicked: set[tuple] = set()
        click_window_buttons(ex, w, clicked)
        quit_action = None
        for name, action in menu_actions(w.menuBar(), "menu"):
            if action.text().replace("&", "") == "Quit":
                quit_action = action
                continue
            if action.isEnabled():
                ex.run(name, action.trigger)
        # The model box's own entries (open a file, connect to a server).
        combo = w.modelPicker
        for i in range(combo.count()):
            data = combo.itemData(i)
            if data == OPEN_GGUF or data in {key for _label, key in w.picker._actions}:
                ex.run(f"model box → {combo.itemText(i)}", lambda i=i: combo.activated.emit(i))
        click_window_buttons(ex, w, clicked)     # those the menus brought (Undo after Delete chat)
        assert quit_action is not None
        ex.run("menu → File → Quit", quit_action.trigger)
        assert not w.isVisible()
    finally:
        boxes.stop()

    assert not ex.failures, "\n".join(ex.failures)
    # What was reached, so that a control that stops being reached shows up here.
    for title in ("Export chat", "Export chats", "Import chats", "Attach files", "Open a GGUF model"):
        assert title in dialogs.asked, f"no file dialog {title!r} was asked for; asked: {dialogs.asked}"
    assert json.loads((files / "chat.json").read_text(encoding="utf-8"))
    assert any("Prefix cache" in d for d in ex.done) and any("Manage presets" in d for d in ex.done)
    assert len(ex.done) > 40, ex.done
