"""The real window on the real engine (default model, greedy, short replies), driven like a user.

One window (and one loaded engine) is shared by the module; tests that need a fresh start or a
restart open their own on the same or on new data directories.
"""

from __future__ import annotations

import time

import pytest
from app_fixtures import STREAMING_PROMPT, open_window, wait_until
from PySide6.QtCore import Qt

from hearth.app.store.chat_store import ChatStore
from hearth.engine.chat.preset_format import Preset, check_sampling

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 10})
TIMEOUT = 120_000


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hearth")
    return d / "data", d / "cache"


@pytest.fixture(scope="module")
def window(qapp, dirs):
    w = open_window(*dirs)
    p = w.presets.add(Preset("test-greedy", "Test greedy", SYSTEM, [], dict(GREEDY)))
    w._fill_presets()
    w.select_preset(p.id)
    wait_until(lambda: not w.client.busy)
    yield w
    w.close()


def send(qtbot, w, text: str, timeout_s: float = 120) -> dict:
    """Type `text`, press Enter, wait for the reply; returns its stats."""
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    try:
        qtbot.keyClicks(w.messageInput, text)
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
        wait_until(lambda: got, timeout_s)
    finally:
        w.conversation.replyFinished.disconnect(got.append)
        w.conversation.replyFailed.disconnect(got.append)
    assert isinstance(got[0], dict), f"the reply failed: {got[0]}"
    return got[0]


def set_max_tokens(w, n: int) -> None:
    w.samplingPanel.boxes["max_tokens"].setValue(n)
    assert w.current_preset().sampling["max_tokens"] == n


# -- conversation -------------------------------------------------------------------------------------
def test_send_streams_the_reply_into_the_view(qtbot, window):
    w = window
    w.new_chat()
    seen = []
    w.conversation.model.dataChanged.connect(
        lambda a, b, roles: seen.append(w.conversation.model.index(a.row()).data()))
    # A reply of many tokens spans several of the view's flushes (every 30 ms) even when decoding is
    # fast and the event loop is busy; an eight-token answer could arrive in one piece.
    set_max_tokens(w, 48)
    stats = send(qtbot, w, STREAMING_PROMPT)
    model = w.conversation.model
    assert model.rowCount() == 2
    reply = model.message(1).content
    assert reply.strip()
    grown = [t for t in seen if t and t != reply]
    assert grown and all(reply.startswith(t) for t in grown), "the text should arrive in pieces, in order"
    assert stats["generated_tokens"] > 1 and stats["decode_tps"] > 0
    assert w.conversation.model.rowCount() == 2
    bubble = w.messageView.bubbles()[1]
    assert bubble.text() == reply and "tok/s" in bubble.stats.text()
    stored = w.chats.messages(w.conversation.chat_id)
    assert [m.content for m in stored] == [STREAMING_PROMPT, reply]
    assert w.statusContext.value() > 0 and w.statusContext.maximum() == w.model_info["n_ctx"]
    assert "KV cache" in w.statusKv.text() and "decode" in w.statusSpeed.text()
    assert w.chatModel.chat(0).title.startswith("Write a short poem")
    set_max_tokens(w, GREEDY["max_tokens"])


def test_stop_mid_reply_keeps_the_partial_reply(qtbot, window):
    w = window
    w.new_chat()
    set_max_tokens(w, 400)
    qtbot.keyClicks(w.messageInput, "Write a long story about a dragon who learns to bake bread.")
    deltas = []
    w.client.worker.delta.connect(lambda rid, t: deltas.append(t))
    with qtbot.waitSignal(w.conversation.generatingChanged, timeout=TIMEOUT):
        qtbot.mouseClick(w.sendButton, Qt.MouseButton.LeftButton)
    assert w.stopButton.isVisible() and not w.sendButton.isVisible()
    wait_until(lambda: len(deltas) >= 3)
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT) as blocker:
        qtbot.mouseClick(w.stopButton, Qt.MouseButton.LeftButton)
    stats = blocker.args[0]
    assert stats["stop_reason"] in ("cancelled", "stopped")
    assert stats["generated_tokens"] < 100
    assert w.sendButton.isVisible() and not w.stopButton.isVisible()
    partial = w.conversation.model.message(1).content
    assert partial and w.chats.messages(w.conversation.chat_id)[1].content == partial
    assert "stopped" in w.messageView.bubbles()[1].stats.text()
    set_max_tokens(w, GREEDY["max_tokens"])


def test_escape_stops_too(qtbot, window):
    w = window
    w.new_chat()
    set_max_tokens(w, 400)
    deltas = []
    w.client.worker.delta.connect(lambda rid, t: deltas.append(t))
    qtbot.keyClicks(w.messageInput, "Count from one to one hundred in words.")
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    wait_until(lambda: len(deltas) >= 2)
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT) as blocker:
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Escape)
    assert blocker.args[0]["stop_reason"] in ("cancelled", "stopped")
    set_max_tokens(w, GREEDY["max_tokens"])


def test_regenerate_replaces_the_last_reply(qtbot, window):
    w = window
    w.new_chat()
    send(qtbot, w, "Name a color.")
    first = w.conversation.model.message(1).content
    bubble = w.messageView.bubbles()[1]
    assert bubble.regenerateButton.isVisible()
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.mouseClick(bubble.regenerateButton, Qt.MouseButton.LeftButton)
    assert w.conversation.model.rowCount() == 2
    assert w.conversation.model.message(1).content == first  # greedy: the same reply
    assert [m.role for m in w.chats.messages(w.conversation.chat_id)] == ["user", "assistant"]


def test_edit_a_user_message_and_resend(qtbot, window):
    w = window
    w.new_chat()
    s1 = send(qtbot, w, "Say hello.")
    s2 = send(qtbot, w, "Say goodbye.")
    assert w.conversation.model.rowCount() == 4
    # Continuing the chat reuses what is resident: the first prompt and reply (less the end token,
    # never fed); only the new user turn is computed.
    first_turn = s1["reused_tokens"] + s1["computed_tokens"] + s1["generated_tokens"]
    assert s2["reused_tokens"] >= first_turn - 2, (s1, s2)
    assert s2["computed_tokens"] < 20, s2
    qtbot.mouseClick(w.messageView.bubbles()[0].editButton, Qt.MouseButton.LeftButton)
    assert w.messageInput.toPlainText() == "Say hello." and w.editHint.isVisible()
    w.messageInput.selectAll()
    qtbot.keyClicks(w.messageInput, "Say thanks.")
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    msgs = w.chats.messages(w.conversation.chat_id)
    assert [m.content for m in msgs][0] == "Say thanks." and len(msgs) == 2
    assert w.conversation.model.rowCount() == 2 and not w.editHint.isVisible()


def test_markdown_code_block_has_a_copy_button(qtbot, window):
    w = window
    w.new_chat()
    set_max_tokens(w, 40)
    send(qtbot, w, "Write a Python hello world program in a code block.")
    set_max_tokens(w, GREEDY["max_tokens"])
    bubble = w.messageView.bubbles()[1]
    from hearth.app.chat.bubbles import CodeBlock
    blocks = bubble.findChildren(CodeBlock)
    assert blocks, f"expected a code block in {bubble.text()!r}"
    qtbot.mouseClick(blocks[0].copy, Qt.MouseButton.LeftButton)
    from PySide6.QtGui import QGuiApplication
    assert QGuiApplication.clipboard().text() == blocks[0].code()


# -- chat list ----------------------------------------------------------------------------------------
def test_chat_list_new_rename_search_delete_undo(qtbot, window):
    w = window
    n = w.chatModel.rowCount()
    w.new_chat()   # the open chat has messages, so this makes one
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)  # empty chat: reused
    assert w.chatModel.rowCount() == n + 1
    cid = w.conversation.chat_id
    assert w.chatModel.setData(w.chatModel.index(0), "Zebra facts")
    assert w.chats.chat(cid).title == "Zebra facts"
    qtbot.keyClick(w, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    assert w.chatSearch.hasFocus()
    qtbot.keyClicks(w.chatSearch, "zebra")
    assert w.chatFilter.rowCount() == 1
    w.chatSearch.clear()
    assert w.chatFilter.rowCount() == n + 1
    w.delete_chat(cid)
    assert w.chatModel.rowCount() == n and w.undoBar.isVisible()
    assert w.conversation.chat_id != cid
    qtbot.mouseClick(w.undoButton, Qt.MouseButton.LeftButton)
    assert w.chatModel.row_of(cid) >= 0 and w.conversation.chat_id == cid
    assert w.chats.chat(cid) is not None


# -- presets and prefix images ------------------------------------------------------------------------
def _wait_prefix(qtbot, w, pid) -> dict:
    with qtbot.waitSignal(w.prefixResult, timeout=TIMEOUT) as blocker:
        w.select_preset(pid)
    return blocker.args[0]


def test_preset_prefix_is_computed_then_restored_then_recomputed_after_corruption(qtbot, window, dirs):
    w = window
    p = w.presets.add(Preset("prefix-test", "Prefix test", SYSTEM + " You like astronomy facts.", [],
                             dict(GREEDY)))
    w._fill_presets()
    images = lambda: sorted(dirs[1].rglob("*"))  # noqa: E731
    before = {x for x in images() if x.is_file()}
    progress = []
    w.client.worker.progress.connect(lambda what, done, total: progress.append((what, done, total)))
    r1 = _wait_prefix(qtbot, w, p.id)
    assert r1["action"] == "computed" and r1["preset"] == p.id
    assert ("Computing the preset prefix", r1["tokens"], r1["tokens"]) in progress  # tokens done / total
    new = [x for x in images() if x.is_file() and x not in before]
    assert new, "the first use saves an image in the cache directory"
    _wait_prefix(qtbot, w, "test-greedy")          # another prefix becomes resident
    r2 = _wait_prefix(qtbot, w, p.id)
    assert r2["action"] == "restored", r2
    assert "Restored preset prefix" in w.statusPrefix.text()
    # Corrupt the image: the next use recomputes silently.
    img = max(new, key=lambda x: x.stat().st_size)
    raw = bytearray(img.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    img.write_bytes(bytes(raw))
    _wait_prefix(qtbot, w, "test-greedy")
    r3 = _wait_prefix(qtbot, w, p.id)
    assert r3["action"] in ("recomputed", "computed") and r3["action"] != "restored"
    assert not w.banner.isVisible() and w.last_error == ""
    assert "Computed preset prefix" in w.statusPrefix.text()
    # And a chat on that preset still works.
    w.new_chat()
    send(qtbot, w, "Hi!")
    assert w.conversation.model.message(1).content.strip()
    _wait_prefix(qtbot, w, "test-greedy")


def test_preset_manager_crud_export_import_and_tool_validation(qtbot, window, tmp_path):
    w = window
    dlg = w.open_preset_manager()
    qtbot.addWidget(dlg)
    assert dlg.objectName() == "presetManager"
    n = len(w.presets.presets)
    pid = dlg.new_preset()
    assert len(w.presets.presets) == n + 1 and w.presetPicker.findData(pid) >= 0
    dlg.nameEdit.setText("Poet")
    dlg.systemEdit.setPlainText("You write short poems.")
    # A bad tool definition is shown with its error and not saved.
    dlg.toolsEdit.setPlainText('[{"type": "function", "function": {"name": "rhyme", '
                               '"parameters": {"type": "object", "properties": {"word": {"type": "strng"}}}}}]')
    assert not dlg.check_tools() and "strng" in dlg.toolsStatus.text()
    assert not dlg.save()
    assert "strng" in dlg.errorLabel.text() and "not a JSON Schema type" in dlg.errorLabel.text()
    assert w.presets.get(pid).name == "New preset"
    dlg.toolsEdit.setPlainText("[ not json")
    assert not dlg.save() and "not valid JSON" in dlg.errorLabel.text()
    dlg.toolsEdit.setPlainText("[]")
    dlg.add_tools([{"type": "function", "function": {"name": "rhyme", "description": "find rhymes",
                                                    "parameters": {"type": "object", "properties": {
                                                        "word": {"type": "string"}}, "required": ["word"]}}}])
    assert dlg.check_tools() and "1 valid tool(s): rhyme" in dlg.toolsStatus.text()
    dlg.sampling.boxes["temperature"].setValue(1.2)
    assert dlg.save(), dlg.errorLabel.text()
    saved = w.presets.get(pid)
    assert saved.name == "Poet" and saved.tools[0]["function"]["name"] == "rhyme"
    assert saved.sampling["temperature"] == 1.2
    assert w.presetPicker.itemText(w.presetPicker.findData(pid)) == "Poet"
    # Duplicate, reorder, export, delete, import.
    dup = dlg.duplicate(pid)
    assert w.presets.get(dup).name == "Poet (copy)"
    i = w.presets.index(dup)
    dlg.move(dup, -1)
    assert w.presets.index(dup) == i - 1
    out = tmp_path / "poet.json"
    dlg.select(pid)
    dlg.export_to(str(out))
    dlg.delete(pid)
    dlg.delete(dup)
    assert w.presets.get(pid) is None and w.presetPicker.findData(pid) < 0
    added = dlg.import_from(str(out))
    assert [p.name for p in added] == ["Poet"] and added[0].tools == saved.tools
    dlg.delete(added[0].id)
    dlg.close()


def test_unsupported_model_gives_a_message_and_keeps_the_previous(qtbot, window, tmp_path):
    w = window
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    before = dict(w.model_info)
    with qtbot.waitSignal(w.client.worker.modelFailed, timeout=TIMEOUT) as blocker:
        w.load_model(str(bad))
    assert "broken.gguf" in blocker.args[0]
    wait_until(w.banner.isVisible, 10)   # the test's slot runs on the worker thread, the window's after
    assert w.banner.isVisible() and "Could not load the model" in w.bannerLabel.text()
    assert "still loaded" in w.bannerLabel.text()
    assert w.model_info["name"] == before["name"] and w.modelPicker.currentData() == before["path_setting"]
    w.banner.hide()
    w.last_error = ""
    w.new_chat()
    send(qtbot, w, "Hello?")                    # still usable
    assert w.conversation.model.message(1).content.strip()


def test_gguf_from_disk_is_remembered_and_a_preset_can_prefer_it(qtbot, window, tmp_path, default_model_path):
    w = window
    other = tmp_path / "my-finetune.Q4_1.gguf"
    other.symlink_to(default_model_path)
    p = w.presets.add(Preset("prefers-other", "Prefers my model", SYSTEM, [], dict(GREEDY), str(other)))
    w._fill_presets()
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT) as blocker:
        w.select_preset(p.id)          # the preset's preferred model is loaded
    assert blocker.args[0]["path_setting"] == str(other) and blocker.args[0]["name"] == "my-finetune"
    wait_until(lambda: not w.client.busy)
    assert w.modelPicker.currentData() == str(other)
    assert w.modelPicker.findData(str(other)) > 0          # remembered in the picker
    assert w.settings.get("model/recent")[0]["path"] == str(other)
    w.select_preset("test-greedy")
    with qtbot.waitSignal(w.modelReady, timeout=TIMEOUT):
        w.modelPicker.setCurrentIndex(0)
        w.modelPicker.activated.emit(0)          # back to the default model
    wait_until(lambda: not w.client.busy)
    assert w.model_info["path_setting"] == "" and w.settings.get("model/path") == ""
    w.presets.remove(p.id)
    w._fill_presets()


def test_model_picker_and_backend_picker_show_what_runs(window):
    w = window
    assert w.modelPicker.objectName() == "modelPicker" and w.modelPicker.count() >= 2
    info = w.modelInfo.text()
    assert "llama" in info and "Q4_1" in info and "135M" in info and "CPU" in info
    assert "MB" in w.modelInfo.toolTip() and "numpy" in w.modelInfo.toolTip()
    assert [w.backendPicker.itemData(i) for i in range(3)] == ["auto", "gpu", "cpu"]
    for name in ("chatList", "messageView", "messageInput", "sendButton", "stopButton", "presetPicker",
                 "modelPicker", "backendPicker", "statusContext"):
        assert w.findChild(object, name) is not None, name


def test_cache_panel_lists_images_and_clears_them(qtbot, window):
    w = window
    panel = w.open_cache_panel()
    qtbot.addWidget(panel)
    wait_until(lambda: panel.table.rowCount() > 0, 30)
    presets = {panel.table.item(r, 0).text() for r in range(panel.table.rowCount())}
    assert "Preset: Test greedy" in presets
    assert panel.table.item(0, 1).text() == "SmolLM2-135M-Instruct"
    assert "of 2.0 GB" in panel.totalLabel.text()
    n = panel.table.rowCount()
    smallest = min(panel.listing["images"], key=lambda i: i["size"])["size"]
    panel.set_cap_gib(0.1)            # far above these images: nothing goes, the cap is shown
    wait_until(lambda: "of 102.4 MB" in panel.totalLabel.text(), 30)
    assert panel.table.rowCount() == n and w.settings.get("cache/cap_gib") == 0.1
    w.client.set_cache_cap(smallest)  # the least recently used images go at once
    wait_until(lambda: panel.table.rowCount() < n, 30)
    assert panel.listing["total"] <= smallest
    panel.set_cap_gib(2.0)
    qtbot.mouseClick(panel.clearButton, Qt.MouseButton.LeftButton)
    wait_until(lambda: panel.table.rowCount() == 0, 30)
    assert "0 image(s)" in panel.totalLabel.text()
    panel.close()


def test_backend_picker_failure_goes_back_to_what_runs(qtbot, window, monkeypatch):
    w = window
    before = w.model_info["backend_setting"]
    monkeypatch.setenv("HEARTH_GPU_ADAPTER", "no-such-adapter")   # the GPU backend finds no adapter
    i = w.backendPicker.findData("gpu")
    with qtbot.waitSignal(w.client.worker.modelFailed, timeout=TIMEOUT) as blocker:
        w.backendPicker.setCurrentIndex(i)
        w.backendPicker.activated.emit(i)
    assert "adapter" in blocker.args[0]
    wait_until(lambda: not w.client.busy)
    assert w.backendPicker.currentData() == before, "the picker goes back to the backend that runs"
    assert "Could not load" in w.bannerLabel.text() and "still loaded" in w.bannerLabel.text()
    assert w.model_info["backend"] == "cpu" and w.settings.get("model/backend") == before
    w.banner.hide()
    w.last_error = ""


# -- restart, quit, errors ----------------------------------------------------------------------------
def test_restart_finds_chats_and_presets_and_quit_during_generation_is_clean(qtbot, window, dirs):
    w = window
    titles = [w.chatModel.chat(i).title for i in range(w.chatModel.rowCount())]
    presets = [p.to_json() for p in w.presets.presets]
    w2 = open_window(*dirs)
    try:
        assert [w2.chatModel.chat(i).title for i in range(w2.chatModel.rowCount())] == titles
        assert [p.to_json() for p in w2.presets.presets] == presets
        # Quit in the middle of a reply: no hang, no crash, nothing lost.
        w2.new_chat()
        w2.select_preset("test-greedy")
        w2.samplingPanel.boxes["max_tokens"].setValue(400)
        deltas = []
        w2.client.worker.delta.connect(lambda rid, t: deltas.append(t))
        qtbot.keyClicks(w2.messageInput, "Tell me a long story about the sea.")
        qtbot.keyClick(w2.messageInput, Qt.Key.Key_Return)
        # The lambda runs in the worker's thread, ahead of the window's queued slot: wait until the
        # window shows streamed text, which is what must survive the quit.
        wait_until(lambda: len(deltas) >= 2 and w2.conversation.model.message(1).content)
        cid = w2.conversation.chat_id
        t0 = time.monotonic()
        w2.close()
        assert time.monotonic() - t0 < 10
        assert w2.client.thread.isFinished()
    finally:
        w2.close()
        w2.presets.get("test-greedy").sampling["max_tokens"] = GREEDY["max_tokens"]
        w2.presets.save()
    store = ChatStore(dirs[0] / "chats.sqlite3")
    msgs = store.messages(cid)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[1].content
    assert msgs[1].stats["stop_reason"] in ("interrupted", "cancelled", "stopped")
    store.close()


def test_corrupt_presets_file_notice_and_engine_error_in_the_chat(qtbot, qapp, tmp_path):
    data, cache = tmp_path / "data2", tmp_path / "cache2"
    data.mkdir()
    (data / "presets.json").write_text("{ this is not json", encoding="utf-8")
    (data / "settings.ini").write_text("[model]\nn_ctx=64\n", encoding="utf-8")
    w = open_window(data, cache)
    try:
        assert w.banner.isVisible() and "moved to" in w.bannerLabel.text()
        assert list(data.glob("presets.corrupt-*.json"))
        assert w.presets.presets
        w.new_chat()
        w.banner.hide()
        with qtbot.waitSignal(w.conversation.replyFailed, timeout=TIMEOUT) as blocker:
            qtbot.keyClicks(w.messageInput, "word " * 80)
            qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
        assert "context" in blocker.args[0]
        bubble = w.messageView.bubbles()[-1]
        assert bubble.error.isVisible() and "context" in bubble.error.text()
        assert w.sendButton.isVisible() and not w.conversation.generating   # still usable
    finally:
        w.close()


def test_the_window_speaks_its_own_words_model_name_durations_and_counts(qtbot, window):
    w = window
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert "SmolLM2-135M" in w.messageView.empty.text(), w.messageView.empty.text()
    qtbot.keyClicks(w.messageInput, "Hi")
    wait_until(lambda: w.draftTokens.counted_text == "Hi", 30)
    assert w.tokenCount.text().startswith("1 token · "), w.tokenCount.text()
    w.messageInput.clear()
    set_max_tokens(w, 1)
    try:
        send(qtbot, w, "Hi")
    finally:
        set_max_tokens(w, 10)
    line = w.messageView.bubbles()[-1].stats.toolTip()
    assert "1 token\n" in line and "1 tokens" not in line, line
    # the model box's name for the model, not its GGUF general.name
    assert w.modelPicker.currentText() == "SmolLM2-135M (default)"
    assert "SmolLM2-135M on CPU" in line or "SmolLM2-135M on GPU" in line, line
    first = next(part for part in line.split("\n") if part.startswith("first token"))
    assert first.endswith(" ms") or first.endswith(" s"), first
    from hearth.app.chat.markdown_text import format_stats
    slow = format_stats({"generated_tokens": 2683, "ttft_s": 65.436})
    assert "2,683 tokens" in slow and "first token 65.4 s" in slow, slow


def test_cache_panel_chat_rows_count_what_their_size_holds(qtbot, window):
    w = window
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    send(qtbot, w, "Name a colour.")
    wait_until(lambda: not w.client.busy)
    title = w.chats.chat(w.conversation.chat_id).title
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)   # the chat is saved as it is left
    wait_until(lambda: not w.client.busy)
    action = next(a for m in w.menuBar().actions() if m.menu() for a in m.menu().actions()
                  if a.text() == "Prefix cache…")
    action.trigger()
    panel = w.cachePanel
    qtbot.addWidget(panel)
    rows = lambda: {panel.table.item(r, 0).text(): r for r in range(panel.table.rowCount())}  # noqa: E731
    wait_until(lambda: f"Chat: {title}" in rows(), 30)
    assert panel.table.horizontalHeaderItem(0).text() != "Preset"    # chat rows sit under it too
    r = rows()[f"Chat: {title}"]
    size = next(c["size"] for c in panel.listing["chats"] if c["title"] == title)
    cell, tip = panel.table.item(r, 2).text(), panel.table.item(r, 2).toolTip()
    stored = int(cell.replace(",", ""))
    segments = int(tip.split(" stored in ")[1].split()[0])
    # The size holds the K/V of each token counted (46,080 bytes a token on SmolLM2 in float32) and
    # each segment's logits (4 × 49,152 bytes) with its header: the two columns tell the same story.
    assert 0 < stored * 46_080 <= size <= stored * 46_080 + segments * (4 * 49_152 + 4096), (size, cell, tip)
    panel.close()


def assert_every_line_fits(view) -> None:
    """Each paragraph of each message gets the height its text needs at its width, and each
    bubble and row hold all of their contents: no line is clipped."""
    for i, b in enumerate(view.bubbles()):
        body = b.body
        for seg in body._visible():
            need = seg.heightForWidth(seg.width()) if seg.hasHeightForWidth() else seg.sizeHint().height()
            assert seg.height() >= need, (i, seg.objectName(), seg.height(), need, b.text()[-40:])
            assert seg.geometry().bottom() < body.height(), (i, "segment below the body")
        inside = body.mapTo(b, body.rect().bottomLeft()).y()
        assert inside < b.height(), (i, "body below its bubble", inside, b.height())
        assert b.height() <= b.parentWidget().height(), (i, "bubble taller than its row")


def test_no_line_is_clipped_after_stop_regenerate_and_an_edit_further_down(qtbot, window):
    w = window
    w.resize(1280, 820)
    w.new_chat()
    send(qtbot, w, "Say hello.")
    set_max_tokens(w, 200)
    deltas = []
    w.client.worker.delta.connect(lambda rid, t: deltas.append(t))
    qtbot.keyClicks(w.messageInput, "Write a long story about a dragon who learns to bake bread.")
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    wait_until(lambda: len(deltas) >= 12)
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Escape)                   # stop
    set_max_tokens(w, 24)
    regenerate = w.messageView.bubbles()[-1].regenerateButton
    qtbot.waitUntil(regenerate.isVisible, timeout=TIMEOUT)     # shown once the stopped reply has ended
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.mouseClick(regenerate, Qt.MouseButton.LeftButton)
    qtbot.wait(50)
    assert_every_line_fits(w.messageView)
    send(qtbot, w, "Say goodbye.")
    qtbot.waitUntil(w.messageView.bubbles()[-2].editButton.isVisible, timeout=TIMEOUT)
    qtbot.mouseClick(w.messageView.bubbles()[-2].editButton, Qt.MouseButton.LeftButton)   # an edit further down
    w.messageInput.selectAll()
    qtbot.keyClicks(w.messageInput, "Say thanks.")
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT):
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    qtbot.wait(50)
    set_max_tokens(w, GREEDY["max_tokens"])
    assert_every_line_fits(w.messageView)
