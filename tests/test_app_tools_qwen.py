"""A real model calling tools by itself in the window: Qwen2.5-Coder-0.5B on the CPU, greedy.

Nothing is scripted: the user types a question, the model writes the call (a bare JSON object, as
this model does under Qwen's <tool_call> template), the app shows it with Allow / Deny, the user
clicks Allow, the result goes back to the model and its answer holds the right number. The same
with a preset whose tool comes from the test MCP server (tests/mcp_test_server.py).
"""

from __future__ import annotations

import os

import pytest
from app_fixtures import open_window
from mcp_fixtures import stdio_config
from model_paths import QWEN_MISSING, qwen_coder_model_path
from PySide6.QtCore import Qt
from tool_round_fixtures import SYSTEM, prompt_text, wait_confirm, wait_done, wait_until

from hearth.engine.chat.preset_format import Preset, check_sampling
from hearth.engine.tools import ToolRegistry

GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 48})
CALCULATOR = ToolRegistry.builtin(["calculator"]).definitions()


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory):
    path = qwen_coder_model_path()
    if path is None:
        pytest.skip(QWEN_MISSING)
    tmp = tmp_path_factory.mktemp("hearth-qwen-tools")
    old = os.environ.get("HEARTH_MODEL")
    os.environ["HEARTH_MODEL"] = str(path)          # the model the window loads instead of the default
    try:
        w = open_window(tmp / "data", tmp / "cache")
    finally:
        os.environ.pop("HEARTH_MODEL") if old is None else os.environ.__setitem__("HEARTH_MODEL", old)
    w.mcp.servers.add(stdio_config("calc", tmp, lifetime_s=900))
    w.presets.add(Preset("qwen-calc", "Calculator", SYSTEM, CALCULATOR, dict(GREEDY)))
    w.presets.add(Preset("qwen-mcp", "MCP adder", SYSTEM, [], dict(GREEDY), mcp_servers=["calc"]))
    w._fill_presets()
    yield w
    w.close()


def settle(w) -> None:
    wait_until(lambda: not w.mcp._starting and not w.client.busy)
    wait_until(lambda: not w.client.busy)


def send(qtbot, w, text: str) -> None:
    w.new_chat()
    qtbot.keyClicks(w.messageInput, text)
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)


def final_answer(w) -> str:
    return w.chats.messages(w.conversation.chat_id)[-1].content


def test_the_model_calls_the_calculator_and_answers_with_its_result(qtbot, window):
    w = window
    assert w.model_info["tool_format"] == "hermes"
    w.select_preset("qwen-calc")
    settle(w)
    send(qtbot, w, "What is 23*47?")
    wait_until(lambda: w.toolConfirm.isVisible() or not w.conversation.generating)

    wait_confirm(w)
    assert "calculator" in w.toolConfirm.text.text() and "23" in w.toolConfirm.text.text()
    assert w.toolConfirm.allowButton.isVisible() and w.toolConfirm.denyButton.isVisible()
    qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    call = w.chats.messages(w.conversation.chat_id)[1].tool_calls[0]
    assert call["name"] == "calculator" and call["status"] == "allowed" and call["result"] == "1081"
    assert "<tool_response>\n1081\n</tool_response>" in prompt_text(w)     # fed back in Qwen's shape
    assert "1081" in final_answer(w)


def test_the_model_calls_a_tool_of_an_mcp_server(qtbot, window):
    w = window
    w.select_preset("qwen-mcp")
    wait_until(lambda: w.mcpApproval is not None)
    qtbot.mouseClick(w.mcpApproval.allowButton, Qt.MouseButton.LeftButton)
    settle(w)
    wait_until(lambda: "calc" in w.mcp.running())
    settle(w)
    send(qtbot, w, "What is 1234 plus 4321?")
    wait_confirm(w)
    assert "<b>add</b> of the MCP server calc" in w.toolConfirm.text.text()
    qtbot.mouseClick(w.toolConfirm.allowButton, Qt.MouseButton.LeftButton)
    wait_done(w)
    call = w.chats.messages(w.conversation.chat_id)[1].tool_calls[0]
    assert call["name"] == "add" and call["status"] == "allowed" and call["result"] == "5555"
    assert "5555" in final_answer(w)
