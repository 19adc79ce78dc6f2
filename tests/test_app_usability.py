"""The window as a new user meets it: unsaved preset edits, search, the model box, text that fits,
small windows, the keyboard, a software GPU, start-up work, and the engine thread's end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from app_fixtures import open_window, wait_until
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from hearth.app.library.model_picker import OPEN_GGUF
from hearth.app.servers.remote_ui import REMOTE_DIALOG
from hearth.app.window import MIN_SIZE
from hearth.engine.chat.preset_format import Preset, check_sampling

ROOT = Path(__file__).resolve().parent.parent
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 6})
TIMEOUT = 120_000


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hearth-ux")
    return d / "data", d / "cache"


@pytest.fixture(scope="module")
def window(qapp, dirs):
    w = open_window(*dirs)
    p = w.presets.add(Preset("ux-greedy", "UX greedy", "Answer in one short sentence.", [], dict(GREEDY)))
    w._fill_presets()
    w.select_preset(p.id)
    wait_until(lambda: not w.client.busy)
    yield w
    w.close()


def send(w, text: str) -> dict:
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    w.messageInput.setPlainText(text)
    assert w.send()
    wait_until(lambda: got, 120)
    w.conversation.replyFinished.disconnect(got.append)
    w.conversation.replyFailed.disconnect(got.append)
    assert isinstance(got[0], dict), got[0]
    wait_until(lambda: not w.client.busy)
    return got[0]


def answer_box(button: QMessageBox.StandardButton, seen: list) -> None:
    """Click `button` in the next message box that opens (a modal exec() is running meanwhile)."""
    def click():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, click)
            return
        seen.append(box.text())
        box.button(button).click()
    QTimer.singleShot(20, click)


# -- 1: unsaved preset edits ------------------------------------------------------------------------
def test_preset_manager_asks_before_losing_unsaved_edits(qtbot, window):
    w = window
    dlg = w.open_preset_manager()
    qtbot.addWidget(dlg)
    first, second = w.presets.presets[0].id, w.presets.presets[1].id
    dlg.select(first)
    old_name = w.presets.get(first).name
    dlg.nameEdit.setText("Renamed but not saved")
    seen: list = []
    answer_box(QMessageBox.StandardButton.Cancel, seen)
    dlg.list.setCurrentIndex(dlg.model.index(dlg.model.row_of(second)))     # pick another preset
    assert seen and "not saved" in seen[0]
    assert dlg.current_id() == first and dlg.nameEdit.text() == "Renamed but not saved", "Cancel keeps the edit"
    assert dlg.list.currentIndex().row() == dlg.model.row_of(first)
    seen.clear()
    answer_box(QMessageBox.StandardButton.Save, seen)
    dlg.list.setCurrentIndex(dlg.model.index(dlg.model.row_of(second)))
    assert seen and dlg.current_id() == second
    on_disk = json.loads(Path(w.presets.path).read_text(encoding="utf-8"))
    assert "Renamed but not saved" in json.dumps(on_disk), "Save wrote the edit to presets.json"
    dlg.nameEdit.setText("Another unsaved name")
    seen.clear()
    answer_box(QMessageBox.StandardButton.Discard, seen)
    dlg.reject()                                          # Close / Esc
    assert seen and not dlg.isVisible()
    assert w.presets.get(second).name != "Another unsaved name"
    p = w.presets.get(first).copy()
    p.name = old_name
    w.presets.update(p)
    w._fill_presets()


def test_preset_manager_says_a_tools_error_once(qtbot, window):
    dlg = window.open_preset_manager()
    qtbot.addWidget(dlg)
    dlg.toolsEdit.setPlainText("[{not json")
    assert "not valid JSON" in dlg.toolsStatus.text() or dlg.check_tools() is False
    assert not dlg.save()
    shown = dlg.toolsStatus.text() + "\n" + dlg.errorLabel.text()
    assert shown.count("not valid JSON") == 1 and "Not saved" in dlg.errorLabel.text()
    dlg.toolsEdit.setPlainText("[]")
    dlg.check_tools()
    assert dlg.errorLabel.text() == "", "the stale error goes when the tools are edited"
    dlg._shown = dlg._editor_state()      # leave without the question
    dlg.close()


# -- 2: search --------------------------------------------------------------------------------------
def test_search_filters_without_opening_and_enter_opens(qtbot, window):
    w = window
    w.new_chat()
    send(w, "Say the word zebrafish.")
    b = w.conversation.chat_id
    w.chats.rename_chat(b, "About zebrafish")
    w.sidebar.refresh(b)
    w.conversation.new_chat(w.current_preset().id)
    send(w, "Say hello.")
    a = w.conversation.chat_id
    opened = []
    w.sidebar.chatSelected.connect(opened.append)
    w.sidebar.focus_search()
    qtbot.keyClicks(w.chatSearch, "zebrafish")
    assert w.conversation.chat_id == a and not opened, "typing a search opens nothing"
    assert w.chatFilter.rowCount() == 1 and not w.sidebar.noResults.isVisible()
    qtbot.keyClicks(w.chatSearch, "zzz")
    assert w.sidebar.noResults.isVisible() and w.chatFilter.rowCount() == 0
    for _ in range(3):
        qtbot.keyClick(w.chatSearch, Qt.Key.Key_Backspace)
    qtbot.keyClick(w.chatSearch, Qt.Key.Key_Return)       # Enter opens the match
    assert w.conversation.chat_id == b
    w.chatSearch.clear()
    assert w.chatList.currentIndex().data() == "About zebrafish", "clearing selects the open chat again"
    w.sidebar.select(a)
    assert w.conversation.chat_id == a
    w.sidebar.focus_search()
    qtbot.keyClicks(w.chatSearch, "zebrafish")
    qtbot.keyClick(w.chatSearch, Qt.Key.Key_Escape)       # Esc clears; the open chat is selected again
    assert w.chatSearch.text() == "" and w.conversation.chat_id == a
    assert w.chatList.currentIndex().data() == w.chats.chat(a).title
    w.sidebar.chatSelected.disconnect(opened.append)


# -- 3, 4: the model box and the status bar on a model switch -----------------------------------------
def test_model_box_shows_a_model_never_an_action(qtbot, window, tmp_path, default_model_path, monkeypatch):
    w = window
    other = tmp_path / "other.Q4_1.gguf"
    other.symlink_to(default_model_path)
    during = []

    def fake_dialog(*_a, **_k):
        during.append(w.modelPicker.currentData())
        return (str(other), "")
    monkeypatch.setattr("hearth.app.library.model_picker.QFileDialog.getOpenFileName", fake_dialog)
    w.statusSpeed.setText("prefill 7397 tok/s  ·  decode 152.0 tok/s")
    w.statusPrefix.setText("Computed preset prefix in 169 ms (40 tokens)")
    i = w.modelPicker.findData(OPEN_GGUF)
    w.modelPicker.setCurrentIndex(i)
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT):
        w.modelPicker.activated.emit(i)
        assert during == [""], "while the file dialog is open the box shows the running model"
        assert w.modelPicker.currentData() == str(other), "during the load it shows the model loading"
    assert w.statusSpeed.text() == "", "the previous model's speed is not shown for the new one"
    assert "169 ms" not in w.statusPrefix.text()
    wait_until(lambda: not w.client.busy)
    i = w.modelPicker.findData(REMOTE_DIALOG)
    w.modelPicker.setCurrentIndex(i)
    w.modelPicker.activated.emit(i)
    assert w.remote.dialog.isVisible() and w.modelPicker.currentData() == str(other)
    w.remote.dialog.reject()
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT):
        w.modelPicker.activated.emit(0)
    wait_until(lambda: not w.client.busy)
    assert w.model_info["path_setting"] == ""


def test_picker_api_add_model_and_model_chosen(qtbot, window, tmp_path, default_model_path):
    w = window
    other = tmp_path / "added.Q4_1.gguf"
    other.symlink_to(default_model_path)
    chosen = []
    w.picker.modelChosen.connect(chosen.append)
    w.picker.add_model(str(other))
    i = w.modelPicker.findData(str(other))
    assert i > 0 and w.model_info["path_setting"] == "", "listed, not loaded"
    with qtbot.waitSignal(w.picker.modelReady, timeout=TIMEOUT):
        w.modelPicker.activated.emit(i)
    assert chosen == [str(other)]
    wait_until(lambda: not w.client.busy)
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT):
        w.picker.load("")
    wait_until(lambda: not w.client.busy)
    w.picker.modelChosen.disconnect(chosen.append)


# -- 5, 6: sizes --------------------------------------------------------------------------------------
def test_long_texts_elide_with_their_full_text_in_a_tooltip(qtbot, window):
    w = window
    w.resize(1280, 820)
    w.new_chat()
    send(w, "Hello")
    qtbot.wait(50)
    for label in (w.modelInfo, w.messageView.findChildren(QWidget, "bubbleStats")[-1]):
        fm = label.fontMetrics()
        assert fm.horizontalAdvance(label.shown_text()) <= label.contentsRect().width()
        if label.shown_text() != label.text():
            assert label.text() in label.toolTip()
    w.modelInfo.setText("llama · 135M · Q4_1 · CPU " + "x" * 300)
    assert w.modelInfo.shown_text().endswith("…") and w.modelInfo.text() in w.modelInfo.toolTip()


def test_small_window_keeps_a_readable_layout_and_panels_collapse(qtbot, window):
    w = window
    assert w.minimumSize().width() >= 640 and w.minimumSize().height() >= 480
    w.resize(MIN_SIZE)
    qtbot.wait(50)
    assert w.width() >= MIN_SIZE.width()
    centre = w.splitter.widget(1)
    assert centre.width() >= centre.minimumSizeHint().width(), "the conversation keeps its minimum width"
    shown = [x for x in (w.sidebar, centre, w.samplingPanel) if x.isVisible()]
    for a, b in zip(shown, shown[1:]):
        assert a.geometry().right() < b.geometry().left(), "panels do not overlap"
    for box in (w.presetPicker, w.modelPicker):
        # a box is as wide as its minimum length of text (its size hint), never an empty box
        assert box.width() >= box.sizeHint().width() > 80, box.objectName()
    w.resize(1280, 820)
    qtbot.wait(50)
    assert w.samplingPanel.isVisible() == w.samplingToggle.isChecked()
    w.activateWindow()
    w.sidebarToggle.toggle()                      # Ctrl+B in the View menu
    assert not w.sidebar.isVisible() and w.settings.get("ui/sidebar") is False
    w.sidebarToggle.toggle()
    assert w.sidebar.isVisible()
    actions = {a.text(): a.shortcut().toString() for a in w.findChildren(QAction)}
    assert actions["Chat list"] == "Ctrl+B" and actions["Sampling panel"] == "Ctrl+Shift+S"


def in_window(w, widget):
    """`widget`'s rectangle in the window's coordinates."""
    r = widget.rect()
    r.moveTopLeft(widget.mapTo(w, r.topLeft()))
    return r


def test_at_the_minimum_size_in_the_dark_theme_the_top_bar_boxes_stay_apart_and_names_end_in_an_ellipsis(
        qtbot, window, tmp_path, default_model_path):
    w = window
    dark = next(a for a in w.themeGroup.actions() if a.data() == "dark")
    dark.trigger()
    try:
        w.resize(MIN_SIZE)
        qtbot.wait(100)
        row = [x for x in (w.presetPicker, w.modelPicker, w.backendPicker, w.modelsButton) if x.isVisible()]
        for a, b in zip(row, row[1:]):
            assert in_window(w, a).right() < in_window(w, b).left(), (a.objectName(), b.objectName())
        for box in (w.presetPicker, w.modelPicker):
            shown = box.shown_text()
            if shown != box.currentText():
                assert shown.endswith("…") and box.currentText().startswith(shown[:-1]), shown
            assert box.fontMetrics().horizontalAdvance(shown) < box.width() - 20, (shown, box.width())
        # a name far longer than the box: cut at a letter boundary with "…", never mid-glyph
        long = tmp_path / ("Meta-Llama-3.1-8B-Instruct-abliterated-uncensored-" + "x" * 30 + ".Q4_K_M.gguf")
        long.symlink_to(default_model_path)
        w.picker.add_model(str(long))
        shown_before = w.modelPicker.currentIndex()
        w.modelPicker.setCurrentIndex(w.modelPicker.findData(str(long)))
        shown = w.modelPicker.shown_text()
        assert shown.endswith("…") and long.name.startswith(shown[:-1]), shown
        assert w.modelPicker.fontMetrics().horizontalAdvance(shown) < w.modelPicker.width() - 20
        w.modelPicker.setCurrentIndex(shown_before)
    finally:
        next(a for a in w.themeGroup.actions() if a.data() == "light").trigger()
        w.resize(1280, 820)


def test_at_1920_px_the_conversation_keeps_a_reading_width(qtbot, window):
    from hearth.app.chat.message_view import READING_WIDTH
    w = window
    w.resize(1920, 1080)
    w.new_chat()
    send(w, "Hello")
    qtbot.wait(100)
    try:
        view = w.messageView
        rows = [in_window(w, b.parentWidget()) for b in view.bubbles()]
        column = in_window(w, view.viewport())
        for r in rows:
            assert r.width() <= READING_WIDTH, r.width()
            assert abs((r.left() - column.left()) - (column.right() - r.right())) <= 2, "centred"
        frame = in_window(w, w.findChild(QWidget, "messageInputFrame"))
        assert abs(frame.left() - rows[0].left()) <= 2 and abs(frame.right() - rows[0].right()) <= 2, (frame, rows[0])
    finally:
        w.resize(1280, 820)


def test_window_rect_comes_back_as_it_was(qtbot, dirs):
    w = open_window(*dirs)
    w.resize(1111, 700)
    w.move(40, 30)
    pos, size = w.pos(), w.size()
    w.close()
    w2 = open_window(*dirs)
    assert w2.size() == size and w2.pos() == pos
    w2.close()


# -- 7: the keyboard ----------------------------------------------------------------------------------
def test_tab_reaches_message_actions_and_focus_is_visible(qtbot, window):
    w = window
    w.new_chat()
    send(w, "Hi")
    w.activateWindow()
    w.messageInput.setFocus()
    wait_until(lambda: w.messageInput.hasFocus(), 5)
    seen = []
    for _ in range(40):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        f = QApplication.focusWidget()
        seen.append(f.objectName() if f else "")
    assert "copyMessageButton" in seen and "editMessageButton" in seen and "regenerateMessageButton" in seen
    for name in ("sendButton", "chatSearch", "presetPicker", "modelPicker"):
        assert name in seen, (name, seen)
    # Focus changes pixels: the same button, focused and not.
    b = w.newChatButton
    w.messageInput.setFocus()
    qtbot.wait(20)
    plain = b.grab().toImage()
    b.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.wait(20)
    assert b.hasFocus() and b.grab().toImage() != plain, "keyboard focus is visible"


def test_controls_have_accessible_names(window):
    w = window
    for name in ("presetPicker", "modelPicker", "backendPicker", "sendButton", "stopButton", "chatSearch",
                 "chatList", "samplingToggle", "sidebarToggle"):
        assert w.findChild(QWidget, name).accessibleName(), name
    for b in w.messageView.findChildren(QWidget, "copyMessageButton"):
        assert b.accessibleName().startswith("Copy")


# -- 8: a software GPU --------------------------------------------------------------------------------
def test_an_explicit_software_gpu_says_so(qtbot, window, monkeypatch):
    pytest.importorskip("wgpu")
    from hearth.engine.gpu import select_adapter
    if select_adapter("llvmpipe") is None:
        pytest.skip("no lavapipe adapter")
    w = window
    monkeypatch.setenv("HEARTH_GPU_ADAPTER", "llvmpipe")
    i = w.backendPicker.findData("gpu")
    w.backendPicker.setCurrentIndex(i)
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT) as blocker:
        w.backendPicker.activated.emit(i)
    assert blocker.args[0]["backend"] == "gpu" and blocker.args[0]["software_renderer"]
    wait_until(lambda: w.banner.isVisible(), 10)
    assert "software renderer" in w.bannerLabel.text() and "slower than the CPU" in w.bannerLabel.text()
    assert "software" in w.backendPicker.itemText(i)
    w.banner.hide()
    monkeypatch.delenv("HEARTH_GPU_ADAPTER")
    j = w.backendPicker.findData("cpu")
    w.backendPicker.setCurrentIndex(j)
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT):
        w.backendPicker.activated.emit(j)
    wait_until(lambda: not w.client.busy)


# -- 9: start-up work ---------------------------------------------------------------------------------
def test_startup_does_the_first_message_work_on_the_engine_thread(tmp_path):
    """What the first message would otherwise import or compute while holding the interpreter lock is
    done by the engine thread as soon as it starts, before any model is loaded or message sent."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from PySide6.QtWidgets import QApplication
        app = QApplication([])
        from app_fixtures import wait_until
        from hearth.app.chat_source import LocalBackend
        from hearth.app.worker import EngineClient
        from pathlib import Path
        assert "numpy.random._generator" not in sys.modules
        c = EngineClient(LocalBackend(Path({str(tmp_path)!r}), 1 << 20))
        from hearth.engine import build_info
        wait_until(lambda: "numpy.random._generator" in sys.modules and "machine" in build_info._cache, 60)
        assert "build" in build_info._cache
        c.shutdown()
        print("warm", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "warm" in r.stdout, r.stderr[-2000:]


# -- 10: smaller ----------------------------------------------------------------------------------------
def test_copy_says_copied(qtbot, window):
    w = window
    if not w.conversation.model.rowCount():
        send(w, "Hi")
    b = w.messageView.findChildren(QWidget, "copyMessageButton")[-1]
    qtbot.mouseClick(b, Qt.MouseButton.LeftButton)
    assert "Copied" in b.text()
    wait_until(lambda: b.text() == "Copy", 5)


def test_new_chat_reuses_an_empty_chat(window):
    w = window
    w.new_chat()
    send(w, "Hi")
    other = w.conversation.chat_id
    w.new_chat()
    empty = w.conversation.chat_id
    assert empty != other and w.conversation.model.rowCount() == 0
    w.sidebar.select(other)
    assert w.conversation.chat_id == other
    n = w.chatModel.rowCount()
    w.new_chat()
    assert w.conversation.chat_id == empty and w.chatModel.rowCount() == n


def test_empty_state_while_loading_and_about(qtbot, window):
    w = window
    info = w.picker.info
    w.picker.info = {}
    try:
        w._update_empty_hint()
        assert "Loading the model" in w.messageView.empty.text() and "the model runs" not in \
            w.messageView.empty.text()
    finally:
        w.picker.info = info
        w._update_empty_hint()
    dlg = w.open_about()
    qtbot.addWidget(dlg)
    text = dlg.text.text()
    from hearth.engine.paths import cache_dir, data_dir
    for part in ("Version", str(data_dir()), str(cache_dir()), "Apache-2.0", "LGPL"):
        assert part in text, part
    dlg.close()


def test_ctrl_n_works_after_the_preset_dialog_closes(qtbot, window):
    w = window
    dlg = w.open_preset_manager()
    qtbot.addWidget(dlg)
    dlg.reject()
    wait_until(lambda: QApplication.focusWidget() is w.messageInput, 5)
    fired = []
    w.newChatAction.triggered.connect(lambda: fired.append(1))
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert fired, "Ctrl+N works at once"


# -- 11: a dropped window -------------------------------------------------------------------------------
def test_a_dropped_window_stops_its_engine_thread(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from PySide6.QtWidgets import QApplication
        app = QApplication([])
        from app_fixtures import open_window
        w = open_window(Path({str(tmp_path)!r}) / "d", Path({str(tmp_path)!r}) / "c")
        print("loaded", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert "loaded" in r.stdout, r.stderr[-2000:]
    assert r.returncode == 0 and "Destroyed while thread" not in r.stderr, r.stderr[-2000:]


def test_the_model_list_shows_each_models_size_and_fit(window, qtbot):
    """Each local model in the picker carries its size and fits / tight / won't fit (engine.memory's
    rule at the context it would load with), shown at the right of the open list and in its tooltip."""
    from hearth.app.library.model_picker import FIT_ROLE, FIT_VALUE_ROLE, FitDelegate

    w = window
    mp = w.picker.combo
    row = mp.findData("")
    assert row >= 0
    line, value = mp.itemData(row, FIT_ROLE), mp.itemData(row, FIT_VALUE_ROLE)
    assert value in ("fits", "tight", "won't fit"), (line, value)
    assert line.endswith(value) and " MB" in line, line
    assert line in mp.itemData(row, Qt.ItemDataRole.ToolTipRole)
    assert isinstance(mp.itemDelegate(), FitDelegate)
    # an action is no model: no size, no fit
    open_row = mp.findText("Open GGUF file…")
    assert open_row >= 0 and not mp.itemData(open_row, FIT_ROLE)


def test_cycles_are_collected_on_the_gui_thread_only(window, qtbot):
    """Once a window exists the automatic collector is off (a worker thread would otherwise free
    Qt objects) and the GUI thread's timer collects cycles."""
    import gc
    import weakref

    assert not gc.isenabled()

    class Cycle:
        pass

    a = Cycle()
    a.me = a
    gone = weakref.ref(a)
    del a
    keep = [Cycle() for _ in range(2000)]   # cross the youngest generation's threshold
    wait_until(lambda: gone() is None, 5.0)
    assert keep
