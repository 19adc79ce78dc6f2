"""MCP tool servers in the real window on the real engine (default model, greedy, short replies):
approving a local command, a full tool round with a scripted call (as test_app_tools.py does for
the built-ins), deny, timeout, a crash mid-call, a server whose tool list changes (the prefix is
recomputed), and quit stopping the server's process. The server is tests/mcp_test_server.py."""

from __future__ import annotations

import pytest
from app_fixtures import open_window
from mcp_fixtures import alive, pid_of, stdio_config, wait_gone
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from tool_round_fixtures import GREEDY, SYSTEM, ask, prompt_text, wait_confirm, wait_done, wait_until

from hearth.engine.chat.preset_format import Preset

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "calculator",
                                           "parameters": {"type": "object"}}}]


def call(name: str, args: str) -> str:
    return f'<tool_call>[{{"name": "{name}", "arguments": {args}}}]</tool_call>'




@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("hearth-mcp")


@pytest.fixture(scope="module")
def window(qapp, tmp):
    w = open_window(tmp / "data", tmp / "cache")
    w.mcp.servers.add(stdio_config("calc", tmp, lifetime_s=900))
    w.presets.add(Preset("test-mcp", "MCP test", SYSTEM, TOOLS, dict(GREEDY), mcp_servers=["calc"]))
    w.presets.add(Preset("plain", "Plain", SYSTEM, [], dict(GREEDY)))
    w._fill_presets()
    w.prefixes = []
    w.prefixResult.connect(w.prefixes.append)
    yield w
    w.close()




def settle(w) -> None:
    wait_until(lambda: not w.mcp._starting and not w.client.busy)
    wait_until(lambda: not w.client.busy)


def choose(w, pid: str = "test-mcp") -> None:
    """Another preset, then `pid` (a new choice: the MCP servers it needs start again)."""
    w.select_preset("plain")
    settle(w)
    w.select_preset(pid)
    settle(w)








def last_call(w) -> dict:
    return w.chats.messages(w.conversation.chat_id)[1].tool_calls[0]


def test_a_local_server_asks_first_showing_the_command_and_deny_keeps_the_preset_working(qtbot, window, tmp):
    w = window
    w.select_preset("test-mcp")
    wait_until(lambda: w.mcpApproval is not None)
    box = w.mcpApproval
    assert box.isVisible() and "calc" in box.text()
    assert box.informativeText() == w.mcp.servers.get("calc").command_line()
    assert "mcp_test_server.py" in box.informativeText() and "MCP_TEST_PIDFILE=" in box.informativeText()
    assert not (tmp / "calc.pid").exists()                  # nothing runs before the user says so
    qtbot.mouseClick(box.denyButton, Qt.MouseButton.LeftButton)
    settle(w)
    assert "calc was not started" in w.bannerLabel.text() and w.banner.isVisible()
    assert not w.mcp.running() and not (tmp / "calc.pid").exists()
    text = prompt_text(w)
    assert '"name": "calculator"' in text and '"name": "add"' not in text


def test_the_notice_of_a_denied_server_goes_with_a_preset_that_does_not_use_it(qtbot, window):
    w = window
    assert "calc was not started" in w.bannerLabel.text() and w.banner.isVisible()
    w.select_preset("plain")
    settle(w)
    assert not w.banner.isVisible()
    w.select_preset("test-mcp")
    wait_until(lambda: w.mcpApproval is not None)
    qtbot.mouseClick(w.mcpApproval.denyButton, Qt.MouseButton.LeftButton)
    settle(w)
    assert w.banner.isVisible()
    w.show_banner("Something else to know.", "notice")   # a later, unrelated banner stays up
    w.select_preset("plain")
    settle(w)
    assert w.banner.isVisible() and w.bannerLabel.text() == "Something else to know."
    w.banner.hide()


def test_approve_starts_it_and_its_tools_join_the_prefix(qtbot, window, tmp):
    w = window
    w.select_preset("plain")
    settle(w)
    w.select_preset("test-mcp")
    wait_until(lambda: w.mcpApproval is not None)
    qtbot.mouseClick(w.mcpApproval.allowButton, Qt.MouseButton.LeftButton)
    settle(w)
    wait_until(lambda: "calc" in w.mcp.running())
    settle(w)
    assert alive(pid_of("calc", tmp))
    text = prompt_text(w)
    assert '"name": "calculator"' in text and '"name": "add"' in text and "Add two numbers" in text
    assert w.prefixes[-1]["preset"] == "test-mcp"
    assert w.mcp.servers.get("calc").command_line() in w.settings.get("mcp/approved")
    choose(w)                                             # approved: it starts without asking again
    assert w.mcpApproval is None and "calc" in w.mcp.running()


def test_the_preset_editor_lists_each_servers_tools_with_descriptions_and_state(qtbot, window):
    w = window
    action = next(a for a in w.findChildren(QAction) if a.text() == "Manage presets…")
    action.trigger()
    dlg = w.presetManager
    qtbot.waitExposed(dlg)
    rows = {name: (state, text) for name, state, text in dlg.mcpServers.tool_rows("calc")}
    assert rows["add"] == ("on", "Add two numbers and return the sum.")
    assert rows["fail"] == ("on", "Always fails.") and len(rows) >= 7
    tree = dlg.mcpServers.list
    tree.setFocus()
    tree.setCurrentItem(tree.topLevelItem(0))
    qtbot.keyClick(tree, Qt.Key.Key_Space)                   # the server's box: off for this preset
    assert dlg.mcpServers.checked() == []
    assert {state for _, state, _ in dlg.mcpServers.tool_rows("calc")} == {"off"}
    qtbot.keyClick(tree, Qt.Key.Key_Space)
    assert dlg.mcpServers.checked() == ["calc"] and dict((n, s) for n, s, _ in dlg.mcpServers.tool_rows("calc"))["add"] == "on"
    dlg.done(0)


def test_a_full_round_runs_the_mcp_tool_after_allow(qtbot, window):
    w = window
    ask(qtbot, w, "What is 2 plus 40?", call("add", '{"a": 2, "b": 40}'))
    wait_confirm(w)
    assert "<b>add</b> of the MCP server calc" in w.toolConfirm.text.text() and "40" in w.toolConfirm.text.text()
    qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    b = w.messageView.bubbles()[1].toolBlocks.blocks[0]
    assert b.summary.text().endswith("→ 42")
    rec = last_call(w)
    assert rec["name"] == "add" and rec["status"] == "allowed" and rec["result"] == "42" and not rec["is_error"]
    assert "<|im_start|>tool\n42<|im_end|>" in prompt_text(w)


def test_deny_does_not_call_the_server(qtbot, window):
    w = window
    ask(qtbot, w, "Echo hi", call("slow_echo", '{"text": "hi", "seconds": 0}'))
    wait_confirm(w)
    qtbot.mouseClick(w.toolConfirm.denyButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    rec = last_call(w)
    assert rec["status"] == "denied" and "did not allow this call to slow_echo" in rec["result"]


def test_a_call_past_the_timeout_is_an_error_in_the_block(qtbot, window):
    w = window
    w.mcp.call_timeout_s = 2
    try:
        ask(qtbot, w, "Echo slowly", call("slow_echo", '{"text": "late", "seconds": 8}'))
        wait_confirm(w)
        qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
        wait_done(w)
    finally:
        w.mcp.call_timeout_s = 60
    rec = last_call(w)
    assert rec["is_error"] and "did not answer within 2 s" in rec["result"]
    assert "did not answer within 2 s" in prompt_text(w)
    assert "calc" in w.mcp.running()                     # one slow call does not end the server


def test_a_huge_result_is_cut_before_the_model_reads_it(qtbot, window):
    w = window
    w.mcp.max_result_chars = 200
    try:
        ask(qtbot, w, "Make it long", call("huge", '{"n": 50000}'))
        wait_confirm(w)
        qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
        wait_done(w)
    finally:
        w.mcp.max_result_chars = 16 * 1024
    rec = last_call(w)
    assert len(rec["result"]) < 300 and "49800 more characters cut" in rec["result"]


def test_choosing_the_preset_again_reads_a_running_servers_changed_list(qtbot, window, tmp):
    w = window
    pid = pid_of("calc", tmp)
    assert w.mcp.manager.call("calc", "grow", {}).content == "ok"     # the server's list changes
    assert '"name": "grown"' not in prompt_text(w)
    n = len(w.prefixes)
    w.select_preset("test-mcp")                            # chosen again, while it runs
    wait_until(lambda: '"name": "grown"' in prompt_text(w))
    settle(w)
    assert pid_of("calc", tmp) == pid and alive(pid)       # the same process, not restarted
    assert [r["action"] for r in w.prefixes[n:] if r["preset"] == "test-mcp"][-1] == "computed"


def test_a_changed_tool_list_recomputes_the_prefix(qtbot, window, tmp):
    w = window
    choose(w)                                            # the same list again: the image is restored
    assert w.prefixes[-1]["preset"] == "test-mcp" and w.prefixes[-1]["action"] != "computed"
    old_pid = pid_of("calc", tmp)
    (tmp / "calc.state").write_text("v2")
    (tmp / "calc.pid").unlink()
    w.select_preset("plain")
    settle(w)
    assert wait_gone(old_pid)                            # no preset chosen needs it: it stopped
    n = len(w.prefixes)
    w.select_preset("test-mcp")
    settle(w)
    wait_until(lambda: "calc" in w.mcp.running())
    settle(w)
    assert '"name": "multiply"' in prompt_text(w)
    mine = [r for r in w.prefixes[n:] if r["preset"] == "test-mcp"]
    assert mine[-1]["action"] == "computed" and not w.last_error


def test_a_crash_mid_call_is_reported_and_the_preset_goes_on_without_its_tools(qtbot, window, tmp):
    w = window
    pid = pid_of("calc", tmp)
    ask(qtbot, w, "Crash it", call("crash", "{}"))
    wait_confirm(w)
    qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    rec = last_call(w)
    assert rec["is_error"] and "calc" in rec["result"]
    assert wait_gone(pid)
    wait_until(lambda: "ended unexpectedly" in w.bannerLabel.text())
    settle(w)
    assert "calc" not in w.mcp.running()
    text = prompt_text(w)
    assert '"name": "calculator"' in text and '"name": "add"' not in text
    ask(qtbot, w, "Hello")                                # the preset still answers
    wait_done(w)
    assert len(w.chats.messages(w.conversation.chat_id)) == 2


def test_quit_stops_the_server_process(qtbot, window, tmp):
    w = window
    (tmp / "calc.pid").unlink()
    choose(w)
    wait_until(lambda: "calc" in w.mcp.running())
    pid = pid_of("calc", tmp)
    assert alive(pid)
    w.close()
    assert wait_gone(pid), "the MCP server outlived the window"
