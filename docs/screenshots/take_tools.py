"""Take docs/screenshots/tool-call.png: a tool round in the real window on the default model.

The default model does not call tools by itself, so each reply is begun with the call's text
(`Conversation.reply_prefixes`, "continue from this text"); the rest is the app's real path: the
confirmation bar, the calculator, the block with its result, the reply that continues.

    Xvfb :99 -screen 0 1400x900x24 &
    DISPLAY=:99 python docs/screenshots/take_tools.py
"""

from __future__ import annotations

from shot_helpers import open_window, shot, spin, use_temp_dirs

CALL = '<tool_call>[{"name": "calculator", "arguments": {"expression": "23*47"}}]</tool_call>'
CALL2 = '<tool_call>[{"name": "convert_units", "arguments": {"value": 1081, "from_unit": "m", "to_unit": "ft"}}]</tool_call>'


def main() -> int:
    use_temp_dirs()
    w, _ready = open_window()
    w.select_preset("tools")
    p = w.current_preset()
    p.sampling.update({"max_tokens": 40, "temperature": 0.0})
    w.presets.update(p)
    w._show_sampling()
    spin(lambda: not w.client.busy)

    w.new_chat()
    w.conversation.reply_prefixes = [CALL]
    w.messageInput.setPlainText("What is 23 times 47?")
    w.send()
    spin(lambda: w.toolConfirm.isVisible())
    w.toolConfirm.allowButton.click()
    spin(lambda: not w.conversation.generating)
    w.messageView.bubbles()[1].toolBlocks.blocks[0].set_expanded(True)
    w.conversation.reply_prefixes = [CALL2]
    w.messageInput.setPlainText("And 1081 metres in feet?")
    w.send()
    spin(lambda: w.toolConfirm.isVisible())
    spin(seconds=1.0)
    w.messageView.scroll_to_bottom()
    shot("tool-call")
    w.toolConfirm.denyButton.click()
    spin(lambda: not w.conversation.generating)
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
