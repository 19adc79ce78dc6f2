"""Take docs/screenshots/mcp-approve.png and mcp-call.png: an MCP tool server in the real window on
the default model. The server is the tests' one (tests/mcp_test_server.py, written with the SDK),
run over stdio; the call is scripted as in take_tools.py (`Conversation.reply_prefixes`).

    Xvfb :99 -screen 0 1400x900x24 &
    DISPLAY=:99 python docs/screenshots/take_mcp.py
"""

from __future__ import annotations

import sys

from shot_helpers import ROOT, open_window, shot, spin, use_temp_dirs

CALL = '<tool_call>[{"name": "add", "arguments": {"a": 1081, "b": 2.5}}]</tool_call>'


def main() -> int:
    use_temp_dirs()
    from hearth.engine.chat.preset_format import Preset
    from hearth.engine.tools.mcp import McpServerConfig
    w, _ready = open_window()
    w.mcp.servers.add(McpServerConfig("numbers", sys.executable, (str(ROOT / "tests" / "mcp_test_server.py"),)))
    base = w.presets.get("tools") or w.current_preset()
    p = Preset("mcp-demo", "Numbers (MCP)", base.system_prompt, [], dict(base.sampling, max_tokens=40,
                                                                           temperature=0.0),
               mcp_servers=["numbers"])
    w.presets.add(p)
    w._fill_presets()
    w.select_preset("mcp-demo")
    spin(lambda: w.mcpApproval is not None)
    spin(seconds=1.0)
    shot("mcp-approve")
    w.mcpApproval.allowButton.click()
    spin(lambda: "numbers" in w.mcp.running(), 60)
    spin(lambda: not w.client.busy)
    w.new_chat()
    w.conversation.reply_prefixes = [CALL]
    w.messageInput.setPlainText("What is 1081 plus 2.5?")
    w.send()
    spin(lambda: w.toolConfirm.isVisible())
    w.toolConfirm.allowButton.click()
    spin(lambda: not w.conversation.generating)
    w.messageView.bubbles()[1].toolBlocks.blocks[0].set_expanded(True)
    spin(seconds=1.0)
    w.messageView.scroll_to_bottom()
    shot("mcp-call")
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
