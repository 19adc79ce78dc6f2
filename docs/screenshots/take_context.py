"""Take docs/screenshots/thinking.png, versions.png and attachments.png in the real window on
the default model. The default model does not think by itself, so the reply is begun with a
thinking block (`Conversation.reply_prefixes`); the rest is the app's real path.

    Xvfb :99 -screen 0 1400x900x24 &
    DISPLAY=:99 python docs/screenshots/take_context.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from shot_helpers import open_window, shot, spin, use_temp_dirs

THOUGHT = ("<think>\nThe user asks why the sky is blue. The short answer is Rayleigh scattering: "
           "air molecules scatter short wavelengths more than long ones.\n</think>\n\n")


def main() -> int:
    use_temp_dirs()
    w, _ready = open_window()
    p = w.current_preset()
    p.sampling.update({"max_tokens": 40, "temperature": 0.0})
    w.presets.update(p)
    w.presetChoice.show_sampling()
    spin(lambda: not w.client.busy)

    w.new_chat()
    w.conversation.reply_prefixes = [THOUGHT]
    w.messageInput.setPlainText("Why is the sky blue?")
    w.send()
    spin(lambda: not w.conversation.generating)
    w.messageView.bubbles()[1].thinking.header.click()
    spin(seconds=0.5)
    shot("thinking")

    w.conversation.reply_prefixes = ["In short:"]
    w.regenerate()
    spin(lambda: not w.conversation.generating)
    spin(seconds=0.5)
    shot("versions")

    w.new_chat()
    folder = Path(tempfile.mkdtemp())
    (folder / "fib.py").write_text("def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
                                   "    return a\n", encoding="utf-8")
    (folder / "notes.md").write_text("# Notes\n\nThe function should be fast for n up to 90.\n", encoding="utf-8")
    w.attachmentBar.add_files([str(folder / "fib.py"), str(folder / "notes.md")])
    spin(lambda: len(w.attachmentBar.chips()) == 2)
    w.messageInput.setPlainText("Is this fast enough for what the notes ask?")
    spin(lambda: w.draftTokens.counted_text == w.draft_text())
    spin(seconds=0.5)
    shot("attachments")
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
