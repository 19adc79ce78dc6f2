"""The context controls on the real window and engine (default model, a small context): the
context-full policies, why a reply was cut off, and a failed reply across a restart."""

from __future__ import annotations

import pytest
from app_fixtures import open_window, wait_until
from PySide6.QtCore import Qt

from hearth.app.store.chat_store import ChatStore
from hearth.engine.chat.context_policy import POLICY_NAMES
from hearth.engine.chat.preset_format import Preset, check_sampling

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 8})
N_CTX = 384
TIMEOUT = 120_000
# About 70 tokens a message: a few exchanges fill the context.
LONG = ("Here is a note about my garden: the tomatoes are ripe, the beans climb the fence, the roses "
        "need water every morning and the apple tree has many small green apples this year. ")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hearth-ctx")
    (d / "data").mkdir()
    (d / "data" / "settings.ini").write_text(f"[model]\nn_ctx={N_CTX}\n", encoding="utf-8")
    return d / "data", d / "cache"


@pytest.fixture(scope="module")
def window(qapp, dirs):
    w = open_window(*dirs)
    for policy in ("stop", "truncate_middle", "rolling_window"):
        w.presets.add(Preset(f"p-{policy}", f"Policy {policy}", SYSTEM, [], dict(GREEDY), "", policy))
    w._fill_presets()
    yield w
    w.close()


def send(qtbot, w, text: str):
    """Type and send `text`; the reply's stats dict, or its error message when it failed."""
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    try:
        qtbot.keyClicks(w.messageInput, text)
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
        wait_until(lambda: got, 120)
    finally:
        w.conversation.replyFinished.disconnect(got.append)
        w.conversation.replyFailed.disconnect(got.append)
    return got[0]


def start_chat(w, pid: str) -> None:
    w.select_preset(pid)
    wait_until(lambda: not w.client.busy)
    w.conversation.new_chat(pid)


@pytest.mark.parametrize("policy", ["truncate_middle", "rolling_window"])
def test_filling_the_context_the_chat_goes_on_and_the_preset_prefix_is_kept(qtbot, window, policy):
    w = window
    start_chat(w, f"p-{policy}")
    prefixes = []
    w.client.worker.prefixReady.connect(prefixes.append)
    stats = []
    for i in range(8):
        st = send(qtbot, w, f"Message {i}. {LONG}")
        assert isinstance(st, dict), f"turn {i} failed: {st}"
        stats.append(st)
        if st.get("dropped_messages"):
            break
    w.client.worker.prefixReady.disconnect(prefixes.append)
    last = stats[-1]
    assert last.get("dropped_messages", 0) >= 2, "the chat never filled the context"
    assert last["context_policy"] == policy and last["prompt_tokens"] + GREEDY["max_tokens"] <= N_CTX
    assert not prefixes, f"the preset prefix was recomputed: {prefixes}"
    local = w.client.worker.backend.local
    prefix_len = len(local._prefix_ids(local.prefix_text(SYSTEM, [])))
    assert last["reused_tokens"] >= prefix_len, "the trimmed prompt must reuse the resident preset prefix"
    info = w.messageView.bubbles()[-1].stats.text()
    assert "earlier messages left out" in info and POLICY_NAMES[policy].lower() in info
    assert f"{last['computed_tokens']} computed" in info   # what was recomputed
    # Every message is still in the chat; only the prompt left some out.
    assert w.conversation.model.rowCount() == 2 * len(stats)


def test_stop_policy_refuses_readably_and_keeps_the_failure(qtbot, window):
    w = window
    start_chat(w, "p-stop")
    for i in range(8):
        st = send(qtbot, w, f"Message {i}. {LONG}")
        if not isinstance(st, dict):
            break
    assert isinstance(st, str) and "context is full" in st and "rolling window" in st
    bubble = w.messageView.bubbles()[-1]
    assert bubble.error.isVisible() and "context is full" in bubble.error.text()
    assert bubble.regenerateButton.isVisible()
    assert not any(b.regenerateButton.isVisible() for b in w.messageView.bubbles()[:-1] if b.role == "assistant")


def test_a_reply_cut_off_by_max_tokens_says_so(qtbot, window):
    w = window
    start_chat(w, "p-rolling_window")
    st = send(qtbot, w, "Write a long poem about the sea.")
    assert st["stop_reason"] == "length"
    assert "cut off: max tokens reached" in w.messageView.bubbles()[-1].stats.text()


def test_a_reply_cut_off_by_the_context_says_so(qtbot, window):
    w = window
    w.presets.add(Preset("p-long", "Long replies", SYSTEM, [], {**GREEDY, "max_tokens": 4096}, "", "rolling_window"))
    w._fill_presets()
    start_chat(w, "p-long")
    # A reply begun as a count: greedy decoding goes on counting until the context is full.
    w.conversation.reply_prefixes.append(", ".join(str(i) for i in range(1, 21)) + ",")
    st = send(qtbot, w, "Count from 1 to 1000, separated by commas.")
    assert st["stop_reason"] == "context_full", st
    assert "cut off: the context is full" in w.messageView.bubbles()[-1].stats.text()


def test_a_failed_send_survives_a_restart_as_a_failed_reply(qtbot, qapp, window, dirs):
    w = window
    start_chat(w, "p-stop")
    st = send(qtbot, w, "word " * (N_CTX + 50))
    assert isinstance(st, str) and "context is full" in st
    cid = w.conversation.chat_id
    store = ChatStore(dirs[0] / "chats.sqlite3")
    msgs = store.messages(cid)
    store.close()
    assert [m.role for m in msgs] == ["user", "assistant"] and "context is full" in msgs[1].stats["error"]
    w2 = open_window(*dirs)
    try:
        w2._show_chat(cid)
        bubbles = w2.messageView.bubbles()
        assert [b.role for b in bubbles] == ["user", "assistant"]
        wait_until(lambda: bubbles[1].isVisible(), 10)
        assert bubbles[1].error.isVisible() and "context is full" in bubbles[1].error.text()
        assert bubbles[1].regenerateButton.isVisible()
        # A new message after the failed one: the prompt still alternates user and assistant.
        w2.conversation.model.append(msgs[0].__class__("user", "hello"))
        roles = [m["role"] for m in w2.conversation.history()]
        assert roles == ["system", "user"]
    finally:
        w2.close()


def test_the_input_box_counts_tokens_and_warns_before_sending_what_will_not_fit(qtbot, window):
    w = window
    start_chat(w, "p-stop")
    qtbot.keyClicks(w.messageInput, "Hello there")
    wait_until(lambda: w.draftTokens.counted_text == "Hello there", 30)
    assert w.draftTokens.kind == "fits", (w.tokenCount.text(), w.tokenCount.toolTip(), w.conversation.history())
    n_msg, prompt, n_ctx = [int(x.replace(",", "")) for x in
                            w.tokenCount.text().replace("tokens · prompt", "").replace("/", "").split()]
    assert n_msg == 2 and prompt > n_msg and n_ctx == N_CTX
    assert w.draftTokens.kind == "fits"
    w.messageInput.clear()
    qtbot.keyClicks(w.messageInput, "word " * (N_CTX + 10))
    wait_until(lambda: w.draftTokens.kind == "too_long", 30)
    assert w.tokenCount.text().startswith("⚠") and "does not fit" in w.tokenCount.toolTip()
    rows = w.conversation.model.rowCount()
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    assert w.banner.isVisible() and "does not fit" in w.bannerLabel.text()
    assert w.conversation.model.rowCount() == rows and not w.conversation.generating
    assert w.messageInput.toPlainText().startswith("word word")   # nothing typed is lost
    w.messageInput.clear()
    w.banner.hide()
    wait_until(lambda: w.draftTokens.kind == "" and w.tokenCount.text() == "", 10)


def test_a_will_not_fit_verdict_does_not_outlive_a_change_of_preset(qtbot, window):
    w = window
    start_chat(w, "p-stop")
    for _ in range(5):                       # ~55 tokens an exchange
        assert isinstance(send(qtbot, w, LONG), dict)
    wait_until(lambda: not w.client.busy)
    qtbot.keyClicks(w.messageInput, LONG * 3)  # fits alone, not after the chat
    wait_until(lambda: w.draftTokens.kind == "too_long", 30)
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    assert w.banner.isVisible() and "will not fit" in w.bannerLabel.text()
    w.banner.hide()
    rows = w.conversation.model.rowCount()
    # The user picks a rolling-window preset in the top bar and presses Enter at once: the refusal
    # counted under "stop" no longer holds (the engine drops older messages instead).
    i = w.presetPicker.findData("p-rolling_window")
    w.presetPicker.setCurrentIndex(i)
    w.presetPicker.activated.emit(i)
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    try:
        qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
        assert not w.banner.isVisible(), w.bannerLabel.text()
        wait_until(lambda: got, 120)
    finally:
        w.conversation.replyFinished.disconnect(got.append)
        w.conversation.replyFailed.disconnect(got.append)
    assert isinstance(got[0], dict), got[0]
    assert w.conversation.model.rowCount() == rows + 2
    wait_until(lambda: not w.client.busy)


def test_a_preset_too_long_for_the_context_is_refused_in_the_windows_words(qtbot, window):
    w = window
    p = w.presets.add(Preset("p-huge", "Huge prompt", LONG * 12, [], dict(GREEDY)))   # ~440 tokens > 384
    w._fill_presets()
    w.banner.hide()
    i = w.presetPicker.findData(p.id)
    w.presetPicker.setCurrentIndex(i)
    w.presetPicker.activated.emit(i)
    wait_until(lambda: w.banner.isVisible() and not w.client.busy, 60)
    text = w.bannerLabel.text()
    assert "context length" in text and "Settings → Context length" in text, text
    assert "n_ctx" not in text and "resident" not in text, text
    w.banner.hide()
    w.select_preset("p-stop")
    wait_until(lambda: not w.client.busy)


def test_context_length_per_model_reloads_the_kv_cache_and_is_remembered(qtbot, window, dirs):
    w = window
    assert w.model_info["n_ctx"] == N_CTX            # the app's default, from settings.ini
    dlg = w.open_context_length()
    trained = 8192                                   # SmolLM2's llama.context_length
    assert dlg.lengthBox.maximum() == trained and dlg.lengthBox.value() == N_CTX
    small = dlg.memoryLabel.text()
    dlg.lengthBox.setValue(trained)
    big = dlg.memoryLabel.text()
    assert small.startswith("needs about") and big != small   # the KV cache grows with the length
    dlg.lengthBox.setValue(1024)
    loaded = []
    w.modelReady.connect(loaded.append)
    qtbot.mouseClick(dlg.applyButton, Qt.MouseButton.LeftButton)
    wait_until(lambda: loaded and not w.client.busy, 120)
    assert loaded[0]["n_ctx"] == 1024 and w.statusContext.maximum() == 1024
    assert w.client.worker.backend.local.engine.n_ctx == 1024
    # A send on the new context works, and the length is this model's setting from now on.
    start_chat(w, "p-stop")
    assert isinstance(send(qtbot, w, "Hello!"), dict)
    w2 = open_window(*dirs)
    try:
        assert w2.model_info["n_ctx"] == 1024
    finally:
        w2.close()
    # More than the model was trained for is refused with the reason, and nothing reloads.
    w.set_context_length(trained * 2)
    assert w.banner.isVisible() and "trained for (8192)" in w.bannerLabel.text()
    assert w.model_info["n_ctx"] == 1024


THOUGHT = "<think>\nThe user says hello. A short, friendly greeting back is best here.\n</think>\n\nHello"


def test_a_scripted_reasoning_reply_streams_into_a_thinking_block(qtbot, window, dirs):
    w = window
    start_chat(w, "p-stop")
    assert not w.thinkingToggle.isVisible()        # SmolLM2's template has no enable_thinking
    shown = []
    w.conversation.model.dataChanged.connect(
        lambda a, b, roles: shown.append(dict((w.conversation.model.message(a.row()).stats or {}).get("thinking")
                                              or {})))
    w.conversation.reply_prefixes.append(THOUGHT)  # the reply begins with thinking, token by token
    st = send(qtbot, w, "Hello!")
    assert isinstance(st, dict), st
    reply = w.conversation.model.message(w.conversation.model.rowCount() - 1)
    th = reply.stats["thinking"]
    assert th["text"].startswith("The user says hello.") and "<think>" not in th["text"]
    assert th["tokens"] > 5 and th["seconds"] >= 0 and th["done"]
    assert reply.content.startswith("Hello") and "think>" not in reply.content
    block = w.messageView.bubbles()[-1].thinking
    assert block.isVisible() and not block.is_open            # closed once the answer came
    assert f"{th['tokens']} tokens" in block.header.text() and " s" in block.header.text()
    qtbot.mouseClick(block.header, Qt.MouseButton.LeftButton)
    assert block.is_open and block.body.isVisible() and "friendly greeting" in block.body.text()
    # The thinking goes back to the template as reasoning_content, which decides what to keep.
    hist = w.conversation.history()
    assert hist[-1]["reasoning_content"] == th["text"] and hist[-1]["content"] == reply.content
    # After a restart the block is there, closed.
    cid = w.conversation.chat_id
    w2 = open_window(*dirs)
    try:
        w2._show_chat(cid)
        b2 = w2.messageView.bubbles()[-1].thinking
        wait_until(lambda: b2.isVisible(), 10)
        assert not b2.is_open and f"{th['tokens']} tokens" in b2.header.text()
    finally:
        w2.close()


def test_thinking_the_model_writes_streams_open_and_counts_its_tokens(qtbot, window):
    w = window
    start_chat(w, "p-stop")
    shown = []
    w.conversation.model.dataChanged.connect(
        lambda a, b, roles: shown.append(dict((w.conversation.model.message(a.row()).stats or {}).get("thinking")
                                              or {})))
    w.conversation.reply_prefixes.append("<think>\nFive facts about gardens: 1.")
    st = send(qtbot, w, "Tell me about gardens.")
    assert isinstance(st, dict), st
    streaming = [s for s in shown if s and not s.get("done")]
    assert len(streaming) >= 2 and len(streaming[-1]["text"]) > len(streaming[0]["text"])
    th = w.conversation.model.message(w.conversation.model.rowCount() - 1).stats["thinking"]
    assert th["text"].startswith("Five facts about gardens: 1.") and len(th["text"]) > 30
    assert th["tokens"] > st["generated_tokens"]      # the scripted head's tokens and the model's
    assert w.messageView.bubbles()[-1].thinking.isVisible()


def _reply_done(qtbot, w, action) -> dict:
    with qtbot.waitSignal(w.conversation.replyFinished, timeout=TIMEOUT) as blocker:
        action()
    return blocker.args[0]


def test_regenerate_keeps_versions_that_survive_a_restart_and_the_chat_goes_on_from_the_shown_one(
        qtbot, window, dirs):
    w = window
    start_chat(w, "p-stop")
    cv = w.conversation
    cv.reply_prefixes.append("Alpha.")
    send(qtbot, w, "Say something.")
    cv.reply_prefixes.append("Beta.")
    _reply_done(qtbot, w, w.regenerate)
    last = lambda ww: ww.conversation.model.message(ww.conversation.model.rowCount() - 1)  # noqa: E731
    assert cv.model.rowCount() == 2 and last(w).content.startswith("Beta.")
    bubble = w.messageView.bubbles()[-1]
    assert bubble.versionLabel.text() == "2/2" and not bubble.versionLabel.isHidden()
    assert bubble.prevVersionButton.isEnabled() and not bubble.nextVersionButton.isEnabled()
    info = bubble.stats.text()
    assert "SmolLM2" in info and ("on CPU" in info or "on GPU" in info)   # who wrote it
    qtbot.mouseClick(bubble.prevVersionButton, Qt.MouseButton.LeftButton)
    assert last(w).content.startswith("Alpha.") and w.messageView.bubbles()[-1].versionLabel.text() == "1/2"
    assert cv.history()[-1]["content"].startswith("Alpha.")
    cid = cv.chat_id
    w2 = open_window(*dirs)
    try:
        w2._show_chat(cid)
        b = w2.messageView.bubbles()[-1]
        assert last(w2).content.startswith("Alpha.") and b.versionLabel.text() == "1/2"
        qtbot.mouseClick(b.nextVersionButton, Qt.MouseButton.LeftButton)
        assert last(w2).content.startswith("Beta.")
        # The chat continues from the version shown; the older reply's control goes away.
        w2.select_preset("p-stop")
        wait_until(lambda: not w2.client.busy)
        send(qtbot, w2, "Go on.")
        msgs = w2.conversation.model.messages()
        assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
        assert msgs[1].content.startswith("Beta.") and w2.conversation.history()[2]["content"].startswith("Beta.")
        assert w2.messageView.bubbles()[1].versionLabel.isHidden()
    finally:
        w2.close()


def test_export_then_import_gives_the_same_chat_tool_calls_and_thinking_included(qtbot, window, tmp_path):
    w = window
    start_chat(w, "p-stop")
    w.conversation.reply_prefixes.append(THOUGHT)
    send(qtbot, w, "Hello!")
    cid = w.conversation.chat_id
    # A tool round as the tool flow saves it, with its result.
    call = {"id": "call_1", "name": "calculator", "arguments": {"expression": "6*7"}, "status": "done",
            "result": "42", "is_error": False}
    w.chats.add_message(cid, w.chats.messages(cid)[0].__class__("assistant", "Let me compute.",
                                                                 stats={"stop_reason": "tool_calls"},
                                                                 tool_calls=[call], model="SmolLM2"))
    before = w.chats.messages(cid)
    w._show_chat(cid)
    assert w.export_chats(str(tmp_path / "chat.json"), "json")
    assert w.export_chats(str(tmp_path / "chat.md"), "markdown")
    md = (tmp_path / "chat.md").read_text(encoding="utf-8")
    assert "### You" in md and "Hello!" in md and "<summary>Thinking</summary>" in md and '"6*7"' in md
    added = w.import_chats(str(tmp_path / "chat.json"))
    assert len(added) == 1 and added[0].id != cid and added[0].title == w.chats.chat(cid).title
    after = w.chats.messages(added[0].id)
    strip = lambda ms: [(m.role, m.content, m.stats, m.tool_calls, m.model) for m in ms]  # noqa: E731
    assert strip(after) == strip(before)
    assert w.conversation.chat_id == added[0].id and w.conversation.model.rowCount() == len(before)
    # All chats at once, and a file that is not an export is refused whole.
    assert w.export_chats(str(tmp_path / "all.json"), "json", all_chats=True)
    n = len(w.chats.chats())
    (tmp_path / "bad.json").write_text('{"format": "hearth-chats", "version": 1, "chats": [{"title": "x", '
                                       '"messages": [{"role": "wizard", "content": "hi"}]}]}', encoding="utf-8")
    assert w.import_chats(str(tmp_path / "bad.json")) == []
    assert "messages[0]" in w.bannerLabel.text() and len(w.chats.chats()) == n
    w.banner.hide()
    assert len(w.import_chats(str(tmp_path / "all.json"))) == n


def _pdf_with_text(path, text: str) -> None:
    """A one-page PDF whose page shows `text` (Helvetica), written by hand with its xref."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    path.write_bytes(bytes(out))


def test_dropped_files_become_chips_with_token_counts_and_go_into_the_message(qtbot, window, tmp_path):
    from PySide6.QtCore import QMimeData, QUrl
    w = window
    start_chat(w, "p-stop")
    code = tmp_path / "hello.py"
    code.write_text("def hello():\n    return 'hi'\n", encoding="utf-8")
    pdf = tmp_path / "paper.pdf"
    _pdf_with_text(pdf, "Gardens need water")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(code)), QUrl.fromLocalFile(str(pdf))])
    assert w.messageInput.canInsertFromMimeData(mime)
    w.messageInput.insertFromMimeData(mime)          # what a drop on the box does
    wait_until(lambda: len(w.attachmentBar.chips()) == 2, 30)
    texts = [c.text() for c in w.attachmentBar.chips()]
    assert texts[0].startswith("hello.py · ") and "tokens" in texts[0] and texts[1].startswith("paper.pdf · ")
    assert w.messageInput.toPlainText() == ""        # a dropped file is not pasted as its path
    assert w.attachmentBar.attachments[1].text.strip() == "Gardens need water"
    # The count in the input box covers the files too.
    qtbot.keyClicks(w.messageInput, "What do these say?")
    wait_until(lambda: w.draftTokens.counted_text == w.draft_text(), 30)
    n_msg = int(w.tokenCount.text().split()[0].replace(",", ""))
    assert n_msg > sum(a.tokens for a in w.attachmentBar.attachments)
    # Removing a chip, then sending: the file goes into the message as the template takes text.
    qtbot.mouseClick(w.attachmentBar.chips()[1], Qt.MouseButton.LeftButton)
    assert [a.name for a in w.attachmentBar.attachments] == ["hello.py"]
    st = send(qtbot, w, "")
    assert isinstance(st, dict), st
    user = w.conversation.model.message(w.conversation.model.rowCount() - 2)
    assert user.content.startswith("File: hello.py\n```py\ndef hello():") and user.content.endswith("What do these say?")
    assert not w.attachmentBar.chips() and w.attachmentBar.isHidden()


def test_too_large_and_binary_files_are_refused_with_why(qtbot, window, tmp_path):
    w = window
    big = tmp_path / "big.txt"
    big.write_text("word " * 3000, encoding="utf-8")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    w.banner.hide()
    w.attachmentBar.add_files([str(binary)])
    wait_until(lambda: w.banner.isVisible(), 30)          # read off the GUI thread
    assert "blob.bin: not a text file" in w.bannerLabel.text()
    w.banner.hide()
    w.attachmentBar.add_files([str(big)])
    wait_until(lambda: w.banner.isVisible(), 30)
    assert "big.txt is 14.6 KB (" in w.bannerLabel.text() and "more than the context holds" in w.bannerLabel.text()
    assert not w.attachmentBar.chips()


def test_devices_links_to_them_and_fifos_are_refused_and_the_window_stays_live(qtbot, window, tmp_path):
    """/dev/zero and /dev/urandom say 0 bytes and never end; a FIFO waits for a writer. Each is
    refused as what it is, and the window answers meanwhile."""
    import os
    w = window
    link = tmp_path / "notes.txt"
    link.symlink_to("/dev/zero")
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    seen = []
    w.attachmentBar.refused.connect(seen.append)
    try:
        w.attachmentBar.add_files(["/dev/zero", "/dev/urandom", str(link), str(fifo)])
        wait_until(lambda: len(seen) == 4, 60)
    finally:
        w.attachmentBar.refused.disconnect(seen.append)
    assert all("not a regular file" in why for why in seen), seen
    assert seen[0].startswith("zero is a character device") and seen[3].startswith("pipe.txt is a FIFO")
    assert not w.attachmentBar.chips()
    qtbot.keyClicks(w.messageInput, "still here")          # the GUI thread was never held
    assert w.messageInput.toPlainText() == "still here"
    w.messageInput.clear()


def _colours(block) -> dict[str, str]:
    """word of the code -> the colour the highlighter gave it (first line of the block)."""
    doc_block = block.text.document().firstBlock()
    text = doc_block.text()
    return {text[r.start:r.start + r.length]: r.format.foreground().color().name()
            for r in doc_block.layout().formats()}


def test_code_blocks_are_highlighted_in_both_themes(qtbot, window):
    from hearth.app.chat.bubbles import CodeBlock
    w = window
    start_chat(w, "p-stop")
    w.set_theme("light")
    w.conversation.reply_prefixes.append("Here:\n\n```python\ndef add(a, b):\n    return a + b\n```\n")
    send(qtbot, w, "Show me a function.")
    block = next(s for s in w.messageView.bubbles()[-1]._segments if isinstance(s, CodeBlock))
    light = _colours(block)
    assert "def" in light and "add" in light and light["def"] != light["add"]
    w.set_theme("dark")
    try:
        wait_until(lambda: _colours(block).get("def") not in (None, light["def"]), 10)
        dark = _colours(block)
        assert dark["add"] != light["add"]
    finally:
        w.set_theme("light")
