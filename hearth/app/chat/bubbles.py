"""The widgets of one message: its bubble, the column of its segments, code blocks.

Sizes are managed here rather than by nested layouts, so that streaming text into the last bubble
re-measures one paragraph, not the conversation (see SegmentColumn and BubbleRow).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication, QTextOption
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QSizePolicy, QToolButton,
                               QVBoxLayout, QWidget)

from ..widgets.elided_label import ElidedLabel
from .markdown_text import format_stats, split_markdown
from ..widgets.waiting_label import WaitingLabel
from .reply_versions import count as version_count
from .code_highlight import CodeHighlighter
from .thinking_block import ThinkingBlock
from .tool_block import ToolBlocks

COPIED_MS = 1500   # how long a Copy button says "Copied ✓"


class CodeBlock(QFrame):
    """A fenced code block: language, Copy button, monospace text that scrolls sideways."""

    def __init__(self, lang: str, code: str, parent=None):
        super().__init__(parent)
        self.setObjectName("codeBlock")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        head = QWidget(objectName="codeHeader")
        hl = QHBoxLayout(head)
        hl.setContentsMargins(10, 3, 4, 3)
        self.lang = QLabel(lang or "code", objectName="codeLang")
        self.copy = QToolButton(text="Copy", objectName="copyCodeButton", autoRaise=True)
        self.copy.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.copy.setAccessibleName("Copy the code")
        self.copy.clicked.connect(self._on_copy)
        hl.addWidget(self.lang)
        hl.addStretch(1)
        hl.addWidget(self.copy)
        lay.addWidget(head)
        self.text = QPlainTextEdit(readOnly=True, objectName="codeText")
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setWordWrapMode(QTextOption.WrapMode.NoWrap)
        self.text.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.text.setFrameShape(QFrame.Shape.NoFrame)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        lay.addWidget(self.text)
        self.highlighter = CodeHighlighter(self.text.document(), lang)
        self.set_code(lang, code)

    def set_code(self, lang: str, code: str) -> None:
        self.lang.setText(lang or "code")
        if self.text.toPlainText() != code or lang != self.highlighter.lang:
            self.text.setPlainText(code)
            self.highlighter.set_code(lang, code)
        lines = max(1, code.count("\n") + 1)
        fm = self.text.fontMetrics()
        longest = max((fm.horizontalAdvance(line) for line in code.split("\n")), default=0)
        bar = self.text.horizontalScrollBar().sizeHint().height() if longest > self.text.viewport().width() else 0
        self.text.setFixedHeight(lines * fm.lineSpacing() + 2 * int(self.text.document().documentMargin()) + 4 + bar)

    def code(self) -> str:
        return self.text.toPlainText()

    def changeEvent(self, e) -> None:
        if e.type() == QEvent.Type.PaletteChange:   # the theme changed: its colours
            self.highlighter.recolour()
        super().changeEvent(e)

    def _on_copy(self) -> None:
        QGuiApplication.clipboard().setText(self.code())
        self.copy.setText("Copied ✓")
        QTimer.singleShot(COPIED_MS, self, lambda: self.copy.setText("Copy"))
        QTimer.singleShot(1500, self.copy, lambda: self.copy.setText("Copy"))  # dropped if the block goes


class MarkdownLabel(QLabel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("markdownText")
        self.setTextFormat(Qt.TextFormat.MarkdownText)
        self.setWordWrap(True)
        self.setOpenExternalLinks(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)


class SegmentColumn(QWidget):
    """A bubble's body: its segments stacked without a layout, each measured only when it changed.

    A QVBoxLayout would re-measure every paragraph of a long reply on each streamed update (layout
    activation drops its items' size caches); here a paragraph's height at a width is cached until
    its text changes, so an update costs one paragraph's layout."""

    SPACING = 8

    def __init__(self, parent=None):
        super().__init__(parent)
        sp = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        sp.setHeightForWidth(True)
        self.setSizePolicy(sp)
        self.items: list[QWidget] = []
        self._heights: dict[int, tuple[int, int]] = {}   # id(widget) -> (width, height)

    def insert(self, i: int, w: QWidget) -> None:
        w.setParent(self)
        self.items.insert(i, w)
        w.show()
        self.changed(w)

    def take(self, w: QWidget) -> None:
        self.items.remove(w)
        self._heights.pop(id(w), None)
        w.hide()
        w.deleteLater()
        self.changed(None)

    def changed(self, w: QWidget | None) -> None:
        if w is not None:
            self._heights.pop(id(w), None)
        self.updateGeometry()
        self._place()

    def _height(self, w: QWidget, width: int) -> int:
        c = self._heights.get(id(w))
        if c is not None and c[0] == width:
            return c[1]
        h = w.heightForWidth(width) if w.hasHeightForWidth() else -1
        if h < 0:
            h = w.sizeHint().height()
        self._heights[id(w)] = (width, h)
        return h

    def _visible(self) -> list[QWidget]:
        return [w for w in self.items if not w.isHidden()]

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        vis = self._visible()
        return sum(self._height(w, width) for w in vis) + self.SPACING * max(0, len(vis) - 1)

    def sizeHint(self) -> QSize:
        return QSize(400, self.heightForWidth(400))

    def minimumSizeHint(self) -> QSize:
        return QSize(60, 0)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place()

    def _place(self) -> None:
        y, width = 0, self.width()
        for w in self._visible():
            h = self._height(w, width)
            w.setGeometry(0, y, width, h)
            y += h + self.SPACING


class MessageBubble(QFrame):
    """One message: a header (who, stats, actions) and its body.

    Signals:
        editClicked(): the user message's Edit was clicked
        regenerateClicked(): the reply's Regenerate was clicked
        versionClicked(int step): the reply's < (-1) or > (+1) was clicked
    """

    editClicked = Signal()
    regenerateClicked = Signal()
    versionClicked = Signal(int)

    def __init__(self, role: str, parent=None):
        super().__init__(parent)
        self.role = role
        self.setObjectName("userBubble" if role == "user" else "assistantBubble")
        self._content = None
        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 8, 14, 10)
        outer.setSpacing(4)
        head = QHBoxLayout()
        head.setSpacing(6)
        who = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}.get(role, role)
        self.who = QLabel(who, objectName="bubbleRole")
        self.stats = ElidedLabel("", objectName="bubbleStats")   # "· stopped …" fits or elides, full in its tooltip
        head.addWidget(self.who)
        head.addWidget(self.stats, 1)
        self.copyButton = self._action("Copy", "Copy this message")
        self.copyButton.clicked.connect(self._on_copy)
        if role == "user":
            self.editButton = self._action("Edit", "Edit this message and resend from here")
            self.editButton.clicked.connect(self.editClicked)
        else:
            self.regenerateButton = self._action("Regenerate", "Write this reply again")
            self.regenerateButton.clicked.connect(self.regenerateClicked)
        head.addWidget(self.copyButton)
        if role == "user":
            head.addWidget(self.editButton)
        else:
            self.prevVersionButton = self._action("<", "The previous version of this reply")
            self.prevVersionButton.setObjectName("prevVersionButton")
            self.versionLabel = QLabel("", objectName="versionLabel")
            self.nextVersionButton = self._action(">", "The next version of this reply")
            self.nextVersionButton.setObjectName("nextVersionButton")
            self.prevVersionButton.clicked.connect(lambda: self.versionClicked.emit(-1))
            self.nextVersionButton.clicked.connect(lambda: self.versionClicked.emit(1))
            for w in (self.prevVersionButton, self.versionLabel, self.nextVersionButton):
                head.addWidget(w)
                w.hide()
            head.addWidget(self.regenerateButton)
        outer.addLayout(head)
        self.thinking = ThinkingBlock()         # a reasoning model's thinking, above the answer
        self.thinking.toggled.connect(lambda _on: self._on_tools_changed())
        outer.addWidget(self.thinking)
        self.body = SegmentColumn()
        outer.addWidget(self.body)
        self.toolBlocks = ToolBlocks()          # the reply's tool calls
        self.toolBlocks.changed.connect(self._on_tools_changed)
        outer.addWidget(self.toolBlocks)
        self.typing = WaitingLabel()
        self.body.insert(0, self.typing)
        self.typing.hide()
        self.error = QLabel("", objectName="bubbleError", wordWrap=True)
        self.error.hide()
        outer.addWidget(self.error)
        self._segments: list[QWidget] = []

    def _action(self, text: str, tip: str) -> QToolButton:
        b = QToolButton(text=text, toolTip=tip, autoRaise=True)
        b.setObjectName(f"{text.lower()}MessageButton")
        b.setCursor(Qt.CursorShape.PointingHandCursor)
        b.setFocusPolicy(Qt.FocusPolicy.StrongFocus)    # Tab reaches a message's actions
        b.setAccessibleName(f"{text} {'your message' if self.role == 'user' else 'the reply'}")
        return b

    def set_content(self, text: str) -> None:
        if text == self._content:
            return
        self._content = text
        segs = split_markdown(text) if self.role == "assistant" else [("plain", text)]
        for i, seg in enumerate(segs):
            w = self._segments[i] if i < len(self._segments) else None
            kind = seg[0]
            if kind == "code":
                if not isinstance(w, CodeBlock):
                    w = self._replace(i, CodeBlock(seg[1], seg[2]))
                else:
                    w.set_code(seg[1], seg[2])
                    self.body.changed(w)
            else:
                if not isinstance(w, MarkdownLabel):
                    w = self._replace(i, MarkdownLabel())
                if kind == "plain":
                    w.setTextFormat(Qt.TextFormat.PlainText)
                if w.text() != seg[1]:
                    w.setText(seg[1])
                    self.body.changed(w)
        for w in self._segments[len(segs):]:
            self.body.take(w)
        del self._segments[len(segs):]

    def _replace(self, i: int, w: QWidget) -> QWidget:
        if i < len(self._segments):
            old = self._segments[i]
            self.body.take(old)
            self.body.insert(i, w)
            self._segments[i] = w
        else:
            self.body.insert(len(self._segments), w)
            self._segments.append(w)
        return w

    def set_tool_calls(self, calls: list) -> None:
        self.toolBlocks.set_calls(calls)

    def _on_tools_changed(self) -> None:
        row = self.parentWidget()
        if isinstance(row, BubbleRow):
            self.layout().invalidate()
            row.refit()

    def set_state(self, stats: dict, streaming: bool, error: str) -> None:
        self.stats.setText(format_stats(stats))
        self.stats.setToolTip(self.stats.text().replace("  ·  ", "\n"))   # all of it, where the line is cut
        self.thinking.set_thinking(stats.get("thinking"))
        if self.role == "assistant":
            shown, n = version_count(stats)
            self.versions = (shown, n)
            self.versionLabel.setText(f"{shown}/{n}")
            self.prevVersionButton.setEnabled(shown > 1 and not streaming)
            self.nextVersionButton.setEnabled(shown < n and not streaming)
        typing = streaming and not self._content and not self.toolBlocks.blocks
        if typing == self.typing.isHidden():
            self.typing.setVisible(typing)
            self.typing.start() if typing else self.typing.stop()
            self.body.changed(self.typing)
        for b in (getattr(self, "regenerateButton", None), getattr(self, "editButton", None)):
            if b is not None:
                b.setEnabled(not streaming)
        self.error.setText(error)
        self.error.setVisible(bool(error))

    def show_versions(self, on: bool) -> None:
        """The < n/m > control, for a reply with more than one version."""
        on = on and getattr(self, "versions", (1, 1))[1] > 1
        for w in (self.prevVersionButton, self.versionLabel, self.nextVersionButton):
            w.setVisible(on)

    def _on_copy(self) -> None:
        QGuiApplication.clipboard().setText(self._content or "")
        self.copyButton.setText("Copied ✓")
        QTimer.singleShot(COPIED_MS, self, lambda: self.copyButton.setText("Copy"))

    def text(self) -> str:
        return self._content or ""

    def natural_width(self) -> int:
        """The width the text would take unwrapped, with the bubble's margins (user bubbles hug it)."""
        label = self._segments[0] if self._segments else self.who
        fm = label.fontMetrics()
        text_w = max((fm.horizontalAdvance(line) for line in (self._content or "").split("\n")), default=0)
        m = self.layout().contentsMargins()
        return text_w + m.left() + m.right() + 8


class BubbleRow(QWidget):
    """Holds one bubble at a fixed height, without a layout.

    Why: a column of word-wrapped labels in layouts is re-measured (a rich-text layout per label, at
    several widths) whenever any of them changes, so each streamed update of the last reply cost
    ~60 ms in a 20-turn chat. Here the column only sees fixed heights; a row measures its bubble
    when its message changes (`refit`) or the width does (resizeEvent). A user's bubble hugs its
    text, right-aligned, at most USER_WIDTH of the row."""

    USER_WIDTH = 0.78

    def __init__(self, bubble: "MessageBubble"):
        super().__init__()
        self.bubble = bubble
        bubble.setParent(self)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._fitted = (-1, -1)

    def refit(self) -> None:
        w = self.width()
        if w <= 0:
            return
        b = self.bubble
        bw = w
        if b.role == "user":
            bw = min(w, max(180, min(int(w * self.USER_WIDTH), b.natural_width())))
        h = b.heightForWidth(bw) if b.hasHeightForWidth() else b.sizeHint().height()
        b.setGeometry(w - bw, 0, bw, h)
        if self.height() != h or self.minimumHeight() != h:
            self.setFixedHeight(h)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.refit()
