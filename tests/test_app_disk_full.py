"""The window when the data disk fills during a chat: a real small tmpfs holds the data folder. The
reply is kept and shown, a banner says the disk is full, the chat stays usable, and everything is
saved, in order, once there is room again."""

from __future__ import annotations

import pytest
from app_fixtures import open_window, wait_until
from PySide6.QtCore import Qt

from hearth.app.store.chat_store import ChatStore
from hearth.engine.chat.preset_format import Preset, check_sampling

pytestmark = pytest.mark.slow
GREEDY = check_sampling({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                         "max_tokens": 4})


def say(qtbot, w, text: str) -> None:
    w.messageInput.setPlainText(text)
    qtbot.keyClick(w.messageInput, Qt.Key.Key_Return)
    wait_until(lambda: not w.conversation.generating, 120)
    wait_until(lambda: not w.client.busy, 120)


def test_a_full_disk_during_a_chat_keeps_the_reply_and_saves_it_when_space_returns(
        qtbot, tmp_path, small_tmpfs, fill_disk):
    data = small_tmpfs(8 << 20)
    w = open_window(data, tmp_path / "cache")
    try:
        w.presets.add(Preset("short", "Short", "", [], dict(GREEDY)))
        w._fill_presets()
        w.select_preset("short")
        wait_until(lambda: not w.client.busy, 120)
        w.new_chat()
        say(qtbot, w, "Hi")
        chat = w.conversation.chat_id
        assert len(w.chats.messages(chat)) == 2

        filler = fill_disk(data)
        question = "Tell me more."
        say(qtbot, w, question)
        assert w.banner.isVisible() and "Could not save the chat" in w.bannerLabel.text()
        assert "full" in w.bannerLabel.text()
        assert not w.conversation.generating and w.sendButton.isVisible()     # the chat is usable
        shown = w.conversation.model.messages()
        assert [m.role for m in shown] == ["user", "assistant"] * 2 and shown[3].content
        assert shown[2].id == 0 and shown[3].id == 0                         # kept, not saved yet
        assert len(w.chats.messages(chat)) == 2
        assert not w.conversation.save_unsaved()                              # still full
        w.delete_chat(chat)                                                   # refused, and said so
        assert "Could not delete the chat" in w.bannerLabel.text() and w.sidebar.has(chat)
        assert not w.chatModel.setData(w.chatModel.index(w.chatModel.row_of(chat)), "Renamed")
        assert w.chatModel.chat(w.chatModel.row_of(chat)).title != "Renamed"

        filler.unlink()
        assert w.conversation.save_unsaved()
        assert "every message is saved" in w.bannerLabel.text()
        stored = w.chats.messages(chat)
        assert [m.content for m in stored] == [m.content for m in shown]
        assert [m.id for m in w.conversation.model.messages()] == [m.id for m in stored]
        say(qtbot, w, "And now?")                                             # goes on as usual
        assert len(w.chats.messages(chat)) == 6
    finally:
        w.close()
    reopened = ChatStore(data / "chats.sqlite3")
    assert len(reopened.messages(chat)) == 6
