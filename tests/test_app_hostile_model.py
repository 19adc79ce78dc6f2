"""The window with a model whose chat template is hostile (it would build a gigabyte string): a clear
error, the app stays up and usable, and a good model works again afterwards. The model is the default
one, copied with its template replaced."""

from __future__ import annotations

import pytest
from app_fixtures import open_window, wait_until
from gguf_patch import patch_metadata
from PySide6.QtCore import Qt

pytestmark = pytest.mark.slow
HOSTILE = "{% for m in messages %}{{ 'x' * 1000000000 }}{% endfor %}"


def test_a_hostile_chat_template_is_an_error_and_the_app_goes_on(qtbot, tmp_path, default_model_path):
    bad = patch_metadata(default_model_path, tmp_path / "hostile.gguf", "tokenizer.chat_template", HOSTILE)
    w = open_window(tmp_path / "data", tmp_path / "cache")
    try:
        load(w, str(bad))
        say(qtbot, w, "Hello")
        shown = w.conversation.model.messages()
        assert "the chat template renders too much" in w.bannerLabel.text()
        assert [m.role for m in shown] == ["user", "assistant"] and shown[1].stats["stop_reason"] == "error"
        assert w.sendButton.isVisible() and not w.conversation.generating
        load(w, "")                                          # the default model: the app works again
        say(qtbot, w, "Hi")
        assert w.conversation.model.message(1).content
    finally:
        w.close()


def load(w, path: str) -> None:
    loaded = []
    w.modelReady.connect(loaded.append)
    w.load_model(path)
    wait_until(lambda: loaded, 120)
    wait_until(lambda: not w.client.busy, 120)
    w.modelReady.disconnect(loaded.append)


def say(qtbot, w, text: str) -> None:
    w.new_chat()
    w.messageInput.setPlainText(text)
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    wait_until(lambda: not w.conversation.generating, 120)
