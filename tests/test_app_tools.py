"""Tool calls in the real window on the real engine (default model, greedy, short replies).

The default model never calls a tool by itself, so each test scripts the call: the reply is begun
with the call's text (`Conversation.reply_prefixes`, the "continue from this text" feature: the
prompt ends with it and the engine continues from there), and everything after it — the parse,
the confirmation bar, the tool, the block, the next generation with the result in its prompt, the
store — is the app's real path.
"""

from __future__ import annotations

import os

import pytest
from app_fixtures import open_window
from PySide6.QtCore import Qt
from tool_round_fixtures import GREEDY, SYSTEM, ask, prompt_text, wait_confirm, wait_done, wait_until

from hearth.app.store.chat_store import ChatStore
from hearth.engine.chat.preset_format import Preset

TOOLS = [{"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object"}}}
         for n in ("calculator", "current_datetime", "read_file", "fetch_url")] + [
    {"type": "function", "function": {"name": "lookup_order", "description": "Find an order by number",
                                      "parameters": {"type": "object", "properties": {"number": {"type": "string"}},
                                                     "required": ["number"]}}}]
CALL = '<tool_call>[{"name": "calculator", "arguments": {"expression": "23*47"}}]</tool_call>'
CALL2 = '<tool_call>[{"name": "calculator", "arguments": {"expression": "2**10"}}]</tool_call>'




@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hearth-tools")
    return d / "data", d / "cache"


@pytest.fixture(scope="module")
def window(qapp, dirs):
    w = open_window(*dirs)
    if w.presets.get("test-tools") is None:
        w.presets.add(Preset("test-tools", "Tools test", SYSTEM, TOOLS, dict(GREEDY)))
    w._fill_presets()
    w.select_preset("test-tools")
    wait_until(lambda: not w.client.busy)
    yield w
    w.close()










def stored(w) -> list:
    return w.chats.messages(w.conversation.chat_id)


def test_the_tools_are_in_the_prompt_and_the_model_reports_its_format(window):
    assert window.model_info["tool_format"] == "generic"      # SmolLM2's template has no tool support
    assert window.conversation.tool_format == "generic"
    text = prompt_text(window)   # the preset's prefix is resident: system prompt + the tools' description
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\nYou can call tools")
    assert '"name": "calculator"' in text and '"name": "lookup_order"' in text


def test_allow_runs_the_call_shows_the_block_continues_and_stores_it(qtbot, window):
    w = window
    ask(qtbot, w, "What is 23 times 47?", CALL)
    wait_confirm(w)
    assert "calculator" in w.toolConfirm.text.text() and "23*47" in w.toolConfirm.text.text()
    assert w.toolConfirm.allowButton.isVisible() and w.toolConfirm.alwaysButton.isVisible()
    # Nothing ran yet, the block says so, and the user cannot send meanwhile.
    blocks = w.messageView.bubbles()[1].toolBlocks.blocks
    assert len(blocks) == 1 and "waiting for you" in blocks[0].summary.text()
    assert w.conversation.generating and w.stopButton.isVisible()
    qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    assert not w.toolConfirm.isVisible()
    roles = [m.role for m in w.conversation.model.messages()]
    assert roles == ["user", "assistant", "assistant"]
    b = w.messageView.bubbles()[1].toolBlocks.blocks[0]
    assert b.summary.text() == 'calculator(expression="23*47") → 1081'
    assert not b.details.isVisible()                     # collapsed; it expands
    h = w.messageView.bubbles()[1].height()
    b.set_expanded(True)
    wait_until(lambda: w.messageView.bubbles()[1].height() > h)
    assert b.details.isVisible() and '"expression": "23*47"' in b.details.text() and "1081" in b.details.text()
    b.set_expanded(False)
    # The continuation read the call and its result (the template's tool role).
    text = prompt_text(w)
    assert '"name": "calculator", "arguments": {"expression": "23*47"}' in text
    assert "<|im_start|>tool\n1081<|im_end|>" in text
    msgs = stored(w)
    assert [m.role for m in msgs] == ["user", "assistant", "assistant"]
    call = msgs[1].tool_calls[0]
    assert call["name"] == "calculator" and call["result"] == "1081" and call["status"] == "allowed"
    assert msgs[1].stats["stop_reason"] == "tool_calls" and not msgs[2].tool_calls
    assert msgs[2].content == w.conversation.model.message(2).content
    w._tools_chat = w.conversation.chat_id


def test_deny_reports_the_refusal_to_the_model(qtbot, window):
    w = window
    ask(qtbot, w, "What is 23 times 47?", CALL)
    wait_confirm(w)
    qtbot.mouseClick(w.toolConfirm.denyButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    call = stored(w)[1].tool_calls[0]
    assert call["status"] == "denied" and call["is_error"] and "did not allow" in call["result"]
    assert "→ denied" in w.messageView.bubbles()[1].toolBlocks.blocks[0].summary.text()
    assert "<|im_start|>tool\nError: the user did not allow this call to calculator<|im_end|>" in prompt_text(w)
    assert len(stored(w)) == 3                           # the reply went on without the result


def test_two_calls_in_one_reply_are_confirmed_one_by_one(qtbot, window):
    w = window
    two = ('<tool_call>[{"name": "calculator", "arguments": {"expression": "23*47"}}, '
           '{"name": "calculator", "arguments": {"expression": "2**10"}}]</tool_call>')
    ask(qtbot, w, "Two sums", two)
    wait_confirm(w)
    assert "23*47" in w.toolConfirm.text.text()
    qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
    wait_until(lambda: "2**10" in w.toolConfirm.text.text() and w.toolConfirm.isVisible())
    blocks = w.messageView.bubbles()[1].toolBlocks.blocks
    assert blocks[0].summary.text().endswith("→ 1081") and "waiting for you" in blocks[1].summary.text()
    qtbot.mouseClick(w.toolConfirm.denyButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    assert [c["status"] for c in stored(w)[1].tool_calls] == ["allowed", "denied"]
    text = prompt_text(w)
    assert "<|im_start|>tool\n1081<|im_end|>\n<|im_start|>tool\nError: the user did not allow" in text


def test_a_malformed_call_is_shown_and_reported_without_asking(qtbot, window):
    w = window
    asked = []
    w.conversation.tools.confirmRequested.connect(lambda *a: asked.append(a))
    bad = '<tool_call>[{"name": "calculator", "arguments": {"expression": 23*47}}]</tool_call>'   # not JSON
    ask(qtbot, w, "What is 23 times 47?", bad)
    wait_done(w)
    assert not asked
    call = stored(w)[1].tool_calls[0]
    assert call["status"] == "malformed" and call["is_error"] and call["raw"]
    block = w.messageView.bubbles()[1].toolBlocks.blocks[0]
    assert "malformed" in block.summary.text() and block.property("state") == "error"
    text = prompt_text(w)
    assert "<|im_start|>tool\nError: your tool call could not be used" in text
    assert '"expression": 23*47' in text                 # the model sees what it wrote


def test_always_allow_skips_the_second_confirmation(qtbot, window):
    w = window
    asked = []
    w.conversation.tools.confirmRequested.connect(lambda *a: asked.append(a))
    w.settings.set("tools/max_rounds", 3)
    try:
        ask(qtbot, w, "What is 23*47 and 2**10?", CALL, CALL2)
        wait_confirm(w)
        qtbot.mouseClick(w.toolConfirm.alwaysButton, Qt.MouseButton.LeftButton)
        wait_done(w)
    finally:
        w.settings.set("tools/max_rounds", 5)
    assert len(asked) == 1
    msgs = stored(w)
    assert msgs[1].tool_calls[0]["result"] == "1081" and msgs[2].tool_calls[0]["result"] == "1024"
    # (Greedy, the small model then imitates the calls itself; the round cap ends that.)
    assert 4 <= len(msgs) <= 2 + w.conversation.tools.max_rounds
    assert w.conversation.tools.always_allowed(w.conversation.chat_id) == {"calculator"}
    # Another chat asks again.
    ask(qtbot, w, "Again", CALL)
    wait_confirm(w)
    qtbot.mouseClick(w.toolConfirm.denyButton, Qt.MouseButton.LeftButton)
    wait_done(w)


def test_the_round_cap_stops_running_calls(qtbot, window):
    w = window
    w.settings.set("tools/max_rounds", 2)
    try:
        ask(qtbot, w, "Keep calculating", CALL, CALL2, CALL)
        wait_confirm(w)
        qtbot.mouseClick(w.toolConfirm.alwaysButton, Qt.MouseButton.LeftButton)
        wait_done(w)
    finally:
        w.settings.set("tools/max_rounds", 5)
    msgs = stored(w)
    assert [m.role for m in msgs] == ["user", "assistant", "assistant", "assistant"]
    assert [m.tool_calls[0]["status"] for m in msgs[1:]] == ["allowed", "allowed", "limit"]
    assert "limit of 2 tool rounds" in msgs[3].tool_calls[0]["result"]
    assert "tool-round limit" in w.messageView.bubbles()[3].toolBlocks.blocks[0].summary.text()
    assert not w.conversation.generating and w.sendButton.isVisible()


def test_a_custom_tool_asks_the_user_for_its_result(qtbot, window):
    w = window
    ask(qtbot, w, "Where is order 42?",
        '<tool_call>[{"name": "lookup_order", "arguments": {"number": "42"}}]</tool_call>')
    wait_confirm(w)
    assert w.toolConfirm.resultEdit.isVisible() and not w.toolConfirm.allowButton.isVisible()
    qtbot.keyClicks(w.toolConfirm.resultEdit, "shipped on Monday")
    qtbot.keyClick(w.toolConfirm.resultEdit, Qt.Key.Key_Return)
    wait_done(w)
    assert stored(w)[1].tool_calls[0]["result"] == "shipped on Monday"
    assert "<|im_start|>tool\nshipped on Monday<|im_end|>" in prompt_text(w)


def test_read_file_reads_only_the_file_the_user_picked(qtbot, window, tmp_path):
    w = window
    picked = tmp_path / "picked.txt"
    picked.write_text("the picked file says hello")
    (tmp_path / "secret.txt").write_text("not for the model")
    ask(qtbot, w, "Read my notes", '<tool_call>[{"name": "read_file", "arguments": {"path": "secret.txt"}}]</tool_call>')
    wait_confirm(w)
    assert w.toolConfirm.pickFileButton.isVisible() and not w.toolConfirm.allowButton.isVisible()
    w.conversation.tools.allow_file(str(picked))    # what "Pick a file…" does with the dialog's answer
    wait_done(w)
    call = stored(w)[1].tool_calls[0]
    assert call["result"] == "the picked file says hello" and not call["is_error"]
    assert "not for the model" not in prompt_text(w)


def test_fetch_url_is_off_until_the_user_turns_it_on(qtbot, window):
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html><body><p>served here</p></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    call = '<tool_call>[{"name": "fetch_url", "arguments": {"url": "' + url + '"}}]</tool_call>'
    w = window
    try:
        assert not w.allowFetchAction.isChecked()
        ask(qtbot, w, "Fetch it", call)
        wait_confirm(w)
        qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
        wait_done(w)
        rec = stored(w)[1].tool_calls[0]
        assert rec["is_error"] and "turned off" in rec["result"]
        w.allowFetchAction.setChecked(True)            # Settings -> Allow tools to fetch URLs
        assert w.settings.get("tools/allow_fetch") and w.conversation.tools.allow_fetch
        ask(qtbot, w, "Fetch it", call)                # on, but this machine is not a public address
        wait_confirm(w)
        qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
        wait_done(w)
        rec = stored(w)[1].tool_calls[0]
        assert rec["is_error"] and "a loopback address" in rec["result"]
        w.settings.set("tools/fetch_allowed_hosts", ["127.0.0.1"])   # the user allows this host
        ask(qtbot, w, "Fetch it", call)
        wait_confirm(w)
        qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
        wait_done(w)
        rec = stored(w)[1].tool_calls[0]
        assert not rec["is_error"] and "served here" in rec["result"]
    finally:
        w.allowFetchAction.setChecked(False)
        w.settings.set("tools/fetch_allowed_hosts", [])
        srv.shutdown()


def test_stop_while_asking_ends_the_reply_and_keeps_the_call(qtbot, window):
    w = window
    ask(qtbot, w, "What is 23 times 47?", CALL)
    wait_confirm(w)
    qtbot.mouseClick(w.stopButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    assert not w.toolConfirm.isVisible() and w.sendButton.isVisible()
    msgs = stored(w)
    assert len(msgs) == 2 and msgs[1].tool_calls[0]["status"] == "stopped"


def test_deleting_the_chat_while_a_call_waits_stops_the_round(qtbot, window):
    w = window
    ask(qtbot, w, "What is 23 times 47?", CALL)
    wait_confirm(w)
    chat_id = w.conversation.chat_id
    w.delete_chat(chat_id)                 # as for a streaming reply: the first delete stops it
    wait_done(w)
    assert not w.toolConfirm.isVisible() and stored(w)[1].tool_calls[0]["status"] == "stopped"
    w.delete_chat(chat_id)
    assert not w.sidebar.has(chat_id)
    w.undo_delete()


def test_regenerate_drops_the_tool_rounds_of_the_reply(qtbot, window):
    w = window
    w.sidebar.select(w._tools_chat)
    wait_until(lambda: w.conversation.chat_id == w._tools_chat)
    assert len(stored(w)) == 3
    w.conversation.reply_prefixes = []
    assert w.regenerate()
    wait_done(w)
    msgs = stored(w)
    assert [m.role for m in msgs] == ["user", "assistant"] and not msgs[1].tool_calls
    assert len(w.messageView.bubbles()) == 2 and not w.messageView.bubbles()[1].toolBlocks.blocks
    # And editing the question truncates after it, tool rounds and all.
    w.conversation.reply_prefixes = [CALL]
    w.edit_message(0)
    w.messageInput.setPlainText("What is 23*47 exactly?")
    assert w.send()
    wait_confirm(w)
    qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    msgs = stored(w)
    assert [m.content for m in msgs][:1] == ["What is 23*47 exactly?"] and len(msgs) == 3
    assert msgs[1].tool_calls[0]["result"] == "1081"


def test_a_picked_link_names_its_target_before_it_is_read(qtbot, window, tmp_path):
    w = window
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "diary.txt"
    target.write_text("the link's target")
    link = tmp_path / "notes.txt"
    os.symlink(target, link)
    ask(qtbot, w, "Read my notes", '<tool_call>[{"name": "read_file", "arguments": {"path": "notes.txt"}}]</tool_call>')
    wait_confirm(w)
    w.toolConfirm.take_pick(str(link))               # what "Pick a file…" does with the dialog's answer
    bar = w.toolConfirm
    assert bar.isVisible() and w.conversation.generating          # nothing is read yet
    assert "notes.txt" in bar.text.text() and f"is a link to <b>{target.resolve()}</b>" in bar.text.text()
    assert bar.allowButton.isVisible() and bar.allowButton.text() == "Read it"
    assert bar.pickFileButton.text() == "Pick another…"
    qtbot.mouseClick(bar.allowButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    call = stored(w)[1].tool_calls[0]
    assert call["result"] == "the link's target" and not call["is_error"]


def test_a_picked_fifo_is_an_error_result_not_a_hang(qtbot, window, tmp_path):
    w = window
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    ask(qtbot, w, "Read my notes", '<tool_call>[{"name": "read_file", "arguments": {"path": "pipe.txt"}}]</tool_call>')
    wait_confirm(w)
    w.toolConfirm.take_pick(str(fifo))
    try:
        wait_done(w)
    finally:
        if w.conversation.generating:                  # unblock a reader stuck on the FIFO
            with open(fifo, "wb"):
                pass
    call = stored(w)[1].tool_calls[0]
    assert call["is_error"] and "FIFO" in call["result"]


def test_restart_shows_the_stored_tool_block(qtbot, window, dirs):
    chat_id = window._tools_chat
    ask(qtbot, window, "What is 23 times 47?", CALL)       # quitting while a call waits keeps it
    wait_confirm(window)
    waiting_chat = window.conversation.chat_id
    window.close()
    w2 = open_window(*dirs)
    try:
        w2.sidebar.select(waiting_chat)
        wait_until(lambda: w2.conversation.chat_id == waiting_chat)
        assert [b.role for b in w2.messageView.bubbles()] == ["user", "assistant"]
        assert "→ stopped" in w2.messageView.bubbles()[1].toolBlocks.blocks[0].summary.text()
        assert not w2.toolConfirm.isVisible() and not w2.conversation.generating
        w2.sidebar.select(chat_id)
        wait_until(lambda: w2.conversation.chat_id == chat_id)
        blocks = w2.messageView.bubbles()[1].toolBlocks.blocks
        assert len(blocks) == 1 and blocks[0].summary.text() == 'calculator(expression="23*47") → 1081'
        wait_until(blocks[0].isVisible, 5)   # (a widget added to a shown layout is shown by a queued call)
        assert ChatStore(dirs[0] / "chats.sqlite3").messages(chat_id)[1].tool_calls[0]["result"] == "1081"
    finally:
        w2.close()
