"""Issue 33's changed places beyond take_sizes.py: a reply waiting on a slow server ("waiting for the
server… N s") at 760×520 and 1920×1080, and the prefix cache panel with preset and chat rows, light
and dark.

    xvfb-run -a -s "-screen 0 1920x1080x24" python docs/screenshots/take_waiting.py
"""

from __future__ import annotations

import json
import sys

from shot_helpers import ROOT, open_window, send_and_wait, shot, spin, use_temp_dirs

sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    use_temp_dirs()
    w, ready = open_window()
    from server_fixtures import Reply, ScriptedServer, chunk, sse

    from hearth.app.servers.remote_ui import REMOTE_DIALOG
    from hearth.app.window import MIN_SIZE

    def ask(text):
        send_and_wait(w, text)
        spin(lambda: not w.client.busy)

    # The cache panel: a preset image and a chat with two versions of a reply.
    w.new_chat()
    ask("Name three colours.")
    w.regenerate()
    spin(lambda: not w.conversation.generating)
    w.new_chat()
    spin(lambda: not w.client.busy)
    panel = w.open_cache_panel()
    spin(lambda: panel.table.rowCount() >= 2, 30)
    for theme in ("light", "dark"):
        w.set_theme(theme)
        shot(f"cache-panel-{theme}" if theme == "dark" else "cache-panel", panel)
    panel.close()

    # A remote server that takes a while before its first token.
    server = ScriptedServer()
    models = {"object": "list", "data": [{"id": "slow-model", "object": "model", "owned_by": "test"}]}
    server.script["slow"] = Reply(json.dumps(models), ctype="application/json")
    i = w.modelPicker.findData(REMOTE_DIALOG)
    w.modelPicker.setCurrentIndex(i)
    w.modelPicker.activated.emit(i)
    dlg = w.remote.dialog
    dlg.urlEdit.setText(server.url("slow"))
    dlg.list_models()
    spin(lambda: dlg.modelList.count(), 30)
    n = len(ready)
    dlg.useButton.click()
    spin(lambda: len(ready) > n, 30)
    server.script["slow"] = Reply(sse(chunk({"content": "Here I am."}), chunk(finish="stop")), hang=60)
    w.new_chat()
    w.messageInput.setPlainText("Are you there?")
    w.send()
    spin(seconds=3.2)
    for size, tag in (((1920, 1080), "1920"), ((MIN_SIZE.width(), MIN_SIZE.height()), "min")):
        w.resize(*size)
        w.move(0, 0)
        for theme in ("light", "dark"):
            w.set_theme(theme)
            shot(f"waiting-{tag}-{theme}", w)
    w.stop()
    spin(lambda: not w.conversation.generating, 10)
    w.set_theme("light")
    w.close()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
