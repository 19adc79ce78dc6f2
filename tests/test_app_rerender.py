"""A reasoning template that leaves earlier thinking out of the prompt (#29): the window's status
bar says how many tokens the next message recomputed, from where, and why. The tiny gpt-oss model
with a harmony template (test_app_gpt_oss.py): its first reply is all analysis channel, which the
second prompt renders as an (empty) final message instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_fixtures import open_window, wait_until
from PySide6.QtCore import Qt
from test_app_gpt_oss import GREEDY, with_template

pytestmark = pytest.mark.slow


def send(qtbot, w, text):
    got = []
    w.conversation.replyFinished.connect(got.append)
    w.conversation.replyFailed.connect(got.append)
    qtbot.keyClicks(w.messageInput, text)
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    wait_until(lambda: got, 120)
    w.conversation.replyFinished.disconnect(got.append)
    w.conversation.replyFailed.disconnect(got.append)
    assert isinstance(got[0], dict), got[0]
    wait_until(lambda: not w.client.busy)
    return got[0]


def test_the_status_bar_says_what_a_dropped_thinking_recomputed(qtbot, tmp_path, reference_dir, monkeypatch):
    template = (Path(__file__).parent / "data" / "templates" / "gpt-oss-harmony.jinja").read_text(encoding="utf-8")
    model = with_template(reference_dir / "tiny-next" / "gpt-oss" / "tiny-gpt-oss.gguf",
                          tmp_path / "tiny-gpt-oss-harmony.gguf", template)
    monkeypatch.setenv("HEARTH_MODEL", str(model))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "settings.ini").write_text("[model]\nn_ctx=512\n", encoding="utf-8")
    w = open_window(tmp_path / "data", tmp_path / "cache")
    try:
        dlg = w.open_preset_manager()
        qtbot.addWidget(dlg)
        pid = dlg.new_preset()
        dlg.nameEdit.setText("Greedy")
        for key, value in GREEDY.items():
            dlg.sampling.boxes[key].setValue(value)
        assert dlg.save(), dlg.errorLabel.text()
        dlg.close()
        w.select_preset(pid)
        wait_until(lambda: not w.client.busy)
        w.conversation.new_chat(pid)
        send(qtbot, w, "Hi there!")
        assert "Recomputed" not in w.statusPrefix.text()
        second = send(qtbot, w, "And again?")
        line = w.statusPrefix.text()
        assert "leaves earlier thinking out" in line, line
        assert f"Recomputed {second['computed_tokens']:,} tokens" in line
        assert second["rerendered"]["dropped"] >= second["generated_tokens"] - 1 > 0
    finally:
        w.close()
