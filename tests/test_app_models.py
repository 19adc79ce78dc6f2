"""hearth.app.store.item_models and app.message_view: the item models (checked by qtmodeltester) and the bubbles."""

from __future__ import annotations

from PySide6.QtCore import Qt

from hearth.app.store.chat_store import ChatStore, Message
from hearth.app.chat.markdown_text import format_stats, split_markdown
from hearth.app.chat.message_view import MessageView
from hearth.app.store.item_models import ChatFilterModel, ChatListModel, IdRole, MessageModel, PresetListModel, StreamingRole
from hearth.app.store.preset_store import PresetStore


def _store(tmp_path, n=3):
    s = ChatStore(tmp_path / "c.db")
    for i in range(n):
        c = s.create_chat(f"chat {i}")
        s.add_message(c.id, Message("user", f"message about topic{i}"))
    return s


def test_chat_list_model(qtmodeltester, tmp_path):
    s = _store(tmp_path)
    m = ChatListModel(s)
    qtmodeltester.check(m)
    assert m.rowCount() == 3
    assert m.setData(m.index(0), "Renamed")
    assert s.chat(m.index(0).data(IdRole)).title == "Renamed"
    assert not m.setData(m.index(0), "   ")
    c = s.create_chat("new")
    m.insert_chat(c)
    m.move_to_top(m.chat(2).id)
    m.remove_chat(c.id)
    qtmodeltester.check(m)


def test_chat_filter_searches_messages(qtmodeltester, tmp_path):
    s = _store(tmp_path)
    m = ChatListModel(s)
    f = ChatFilterModel(s)
    f.setSourceModel(m)
    f.set_search("topic1")
    assert f.rowCount() == 1 and f.index(0, 0).data() == "chat 1"
    qtmodeltester.check(f)
    f.set_search("")
    assert f.rowCount() == 3


def test_message_model_streaming(qtmodeltester, qtbot):
    m = MessageModel()
    m.set_messages([Message("user", "hi", 1)])
    row = m.append(Message("assistant", ""), streaming=True)
    assert m.index(row).data(StreamingRole)
    with qtbot.waitSignal(m.dataChanged):
        m.append_text(row, "Hel")
    m.append_text(row, "lo")
    assert m.index(row).data() == "Hello"
    m.finish(row, {"decode_tps": 10.0})
    assert not m.index(row).data(StreamingRole)
    qtmodeltester.check(m)
    m.truncate(1)
    assert m.rowCount() == 1
    qtmodeltester.check(m)


def test_preset_list_model(qtmodeltester, tmp_path):
    m = PresetListModel(PresetStore(tmp_path / "p.json"))
    qtmodeltester.check(m)
    assert m.index(0).data(Qt.ItemDataRole.DisplayRole) == m.store.presets[0].name


def test_split_markdown_finds_code_blocks_even_unclosed():
    text = "Here:\n```python\nprint(1)\n```\nand then\n~~~\nraw\n"
    assert split_markdown(text) == [("md", "Here:\n"), ("code", "python", "print(1)"),
                                    ("md", "and then\n"), ("code", "", "raw\n")]
    assert split_markdown("plain **bold**") == [("md", "plain **bold**")]


def test_format_stats():
    s = format_stats({"generated_tokens": 12, "decode_tps": 31.25, "ttft_s": 0.12, "stop_reason": "cancelled"})
    assert "12 tokens" in s and "31.2 tok/s" in s and "first token 120 ms" in s and "stopped" in s


def test_message_view_follows_the_model(qtbot):
    m = MessageModel()
    v = MessageView()
    qtbot.addWidget(v)
    v.setModel(m)
    m.set_messages([Message("user", "question", 1)])
    row = m.append(Message("assistant", ""), streaming=True)
    m.append_text(row, "Sure:\n```python\nprint('x')")
    b = v.bubbles()
    assert len(b) == 2 and b[1].text().startswith("Sure")
    from hearth.app.chat.bubbles import CodeBlock
    code = b[1].findChild(CodeBlock, "codeBlock")
    assert code is not None and code.code() == "print('x')"
    code.copy.click()
    from PySide6.QtGui import QGuiApplication
    assert QGuiApplication.clipboard().text() == "print('x')"
    m.truncate(1)
    assert len(v.bubbles()) == 1


def test_many_qt_calls_do_not_exhaust_none_true_false(qtbot):
    """This PySide6 build returns None/True/False without a reference (see app.qtfix): streaming a
    long reply makes thousands of such calls. Without the workaround the interpreter aborts."""
    import sys

    from PySide6.QtCore import QObject, Signal
    from PySide6.QtWidgets import QLabel

    class Streamer(QObject):
        delta = Signal(int, str)

    s = Streamer()
    label = QLabel()
    qtbot.addWidget(label)
    got = []
    s.delta.connect(lambda i, t: got.append(i))
    for i in range(60_000):
        s.delta.emit(i, "x")
        label.setText("x")
    assert len(got) == 60_000
    assert min(sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False)) > 1000


def test_theme_follows_the_system_unless_forced(qapp):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QPalette

    from hearth.app import theme
    hints = qapp.styleHints()
    old = hints.colorScheme()
    try:
        hints.setColorScheme(Qt.ColorScheme.Dark)   # the offscreen platform may not take a request
        assert theme.apply(qapp, "system") is (hints.colorScheme() == Qt.ColorScheme.Dark)
        assert theme.apply(qapp, "dark") is True
        assert qapp.palette().color(QPalette.ColorRole.Window).lightness() < 80
        assert theme.apply(qapp, "light") is False
        assert qapp.palette().color(QPalette.ColorRole.Window).lightness() > 200
    finally:
        hints.setColorScheme(old)
        theme.apply(qapp, "light")


def test_single_line_breaks_in_a_reply_show_as_line_breaks_and_copy_keeps_the_text(qtbot):
    from PySide6.QtGui import QGuiApplication, QTextDocument

    from hearth.app.chat.bubbles import CodeBlock, MarkdownLabel
    poem = ("Roses are red,\nviolets are blue,\nthis is a poem.\n\n"
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n```\nx = 1\ny = 2\n```\nA heading\n---\nlast line")
    m = MessageModel()
    v = MessageView()
    qtbot.addWidget(v)
    v.setModel(m)
    m.set_messages([Message("user", "a poem", 1), Message("assistant", poem, 2)])
    reply = v.bubbles()[1]
    labels = reply.findChildren(MarkdownLabel)

    def lines(label) -> list[str]:
        """The label's text as Qt's Markdown reader takes it: a soft break is a space, a hard
        break a line separator."""
        doc = QTextDocument()
        doc.setMarkdown(label.text())
        return [line.strip() for line in doc.toPlainText().replace("\u2028", "\n").split("\n")]

    assert lines(labels[0]) == ["Roses are red,", "violets are blue,", "this is a poem."]
    doc = QTextDocument()
    doc.setMarkdown(labels[1].text())
    assert type(doc.rootFrame().childFrames()[0]).__name__ == "QTextTable"   # a table stays a table
    assert lines(labels[2]) == ["A heading", "last line"]
    assert reply.findChild(CodeBlock).code() == "x = 1\ny = 2"      # code blocks untouched
    reply.copyButton.click()
    assert QGuiApplication.clipboard().text() == poem                  # Copy gives the text as written
