"""The conversation view: one bubble widget per row of a MessageModel.

Assistant text is Markdown: prose goes to a QLabel in Markdown mode (QTextDocument's CommonMark/GFM
reader: lists, tables, emphasis, links), fenced code blocks to a monospace block with the language
and a Copy button. A streaming reply is re-split as it grows (an unclosed fence is shown as code
already) and existing segment widgets are reused, so an update touches only the last segment.

Signals:
    editRequested(int row)        the user wants to edit and resend a user message
    regenerateRequested()         the user wants a new last reply
    versionRequested(int step)    the user wants the last reply's previous (-1) / next (+1) version
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QModelIndex, Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from .bubbles import BubbleRow, MessageBubble
from ..store.item_models import ErrorRole, RoleRole, StatsRole, StreamingRole, ToolCallsRole


# The widest the conversation's column gets: lines longer than ~100 characters are hard to read.
READING_WIDTH = 900
MARGIN = 24


def side_margin(width: int) -> int:
    """The left and right margin that centres a column of at most READING_WIDTH in `width`."""
    return max(MARGIN, (width - READING_WIDTH) // 2)


class MessageView(QScrollArea):
    """Signals (besides those in the module docstring):
        marginChanged(int left, int right): the column's margins from the view's own edges changed
            (the scroll bar included), so that the input box below can line up with it
    """

    editRequested = Signal(int)
    regenerateRequested = Signal()
    versionRequested = Signal(int)
    marginChanged = Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("messageView")
        # Not widgetResizable: with it, QScrollArea re-measures every word-wrapped label at several
        # widths on each change (60+ rich-text layouts per streamed update in a 20-turn chat, ~60 ms).
        # `_fit` sizes the column itself; Qt's layout caches then keep finished messages untouched.
        self.setWidgetResizable(False)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        inner = QWidget(objectName="messageColumn")
        self._layout = QVBoxLayout(inner)
        self._layout.setContentsMargins(MARGIN, 16, MARGIN, 16)
        self._layout.setSpacing(12)
        self._layout.addStretch(1)
        self.setWidget(inner)
        self._inner = inner
        inner.installEventFilter(self)
        self.empty = QLabel("", objectName="emptyHint", alignment=Qt.AlignmentFlag.AlignCenter, wordWrap=True)
        self._layout.insertWidget(0, self.empty)
        self._bubbles: list[MessageBubble] = []
        self._rows: list[QWidget] = []
        self._model = None
        self._stick = True
        self._waiting = ""
        self._edges = (MARGIN, MARGIN)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.LayoutRequest and obj is getattr(self, "_inner", None):
            self._fit()
        return False

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        """The column is as wide as the viewport and as tall as its messages at that width."""
        inner = getattr(self, "_inner", None)
        if inner is None:
            return
        lay = inner.layout()
        w = self.viewport().width()
        side = side_margin(w)
        if lay.contentsMargins().left() != side:
            lay.setContentsMargins(side, 16, side, 16)
        edges = (side, side + self.width() - w)
        if edges != self._edges:
            self._edges = edges
            self.marginChanged.emit(*edges)
        h = max(self.viewport().height(), lay.totalHeightForWidth(w) if lay.hasHeightForWidth()
                else lay.totalSizeHint().height())
        if inner.width() != w or inner.height() != h:
            inner.resize(w, h)

    def setModel(self, model) -> None:
        self._model = model
        model.modelReset.connect(self._rebuild)
        model.rowsInserted.connect(self._on_inserted)
        model.rowsRemoved.connect(self._on_removed)
        model.dataChanged.connect(self._on_changed)
        self._rebuild()

    def model(self):
        return self._model

    def set_empty_text(self, text: str) -> None:
        self.empty.setText(text)

    def set_waiting_text(self, text: str) -> None:
        """What a reply with no text yet says after a second ("waiting for the server"; "" for "…")."""
        self._waiting = text
        for b in self._bubbles:
            b.typing.what = text

    def bubbles(self) -> list[MessageBubble]:
        return list(self._bubbles)

    def row_of(self, bubble: MessageBubble) -> int:
        return self._bubbles.index(bubble)

    # -- model signals --------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        for w in self._rows:
            self._layout.removeWidget(w)
            w.hide()   # deleteLater waits for the event loop; a hidden widget is not painted meanwhile
            w.deleteLater()
        self._bubbles, self._rows = [], []
        self._on_inserted(QModelIndex(), 0, self._model.rowCount() - 1)
        self._stick = True

    def _on_inserted(self, parent, first: int, last: int) -> None:
        for row in range(first, last + 1):
            idx = self._model.index(row, 0)
            bubble = MessageBubble(idx.data(RoleRole))
            bubble.typing.what = self._waiting
            bubble.editClicked.connect(lambda b=bubble: self.editRequested.emit(self.row_of(b)))
            bubble.regenerateClicked.connect(self.regenerateRequested)
            bubble.versionClicked.connect(self.versionRequested)
            holder = BubbleRow(bubble)
            self._layout.insertWidget(1 + row, holder)
            self._bubbles.insert(row, bubble)
            self._rows.insert(row, holder)
            self._update(row)
        self._refresh_actions()

    def _on_removed(self, parent, first: int, last: int) -> None:
        for row in range(last, first - 1, -1):
            w = self._rows.pop(row)
            self._bubbles.pop(row)
            self._layout.removeWidget(w)
            w.hide()
            w.deleteLater()
        self._refresh_actions()

    def _on_changed(self, top, bottom, roles=()) -> None:
        for row in range(top.row(), bottom.row() + 1):
            self._update(row)
        self._refresh_actions()

    def _update(self, row: int) -> None:
        idx = self._model.index(row, 0)
        b = self._bubbles[row]
        b.set_content(idx.data() or "")
        b.set_tool_calls(idx.data(ToolCallsRole) or [])
        b.set_state(idx.data(StatsRole) or {}, bool(idx.data(StreamingRole)), idx.data(ErrorRole) or "")
        self._rows[row].refit()

    def _refresh_actions(self) -> None:
        """Only the last reply can be regenerated, and only while no message comes after it."""
        self.empty.setVisible(not self._bubbles)
        last_assistant = max((i for i, b in enumerate(self._bubbles) if b.role == "assistant"), default=-1)
        last_user = max((i for i, b in enumerate(self._bubbles) if b.role == "user"), default=-1)
        if last_user > last_assistant:
            last_assistant = -1
        for i, b in enumerate(self._bubbles):
            if b.role == "assistant":
                before = (b.regenerateButton.isHidden(), b.prevVersionButton.isHidden())
                b.regenerateButton.setVisible(i == last_assistant)
                b.show_versions(i == last_assistant == len(self._bubbles) - 1)
                if (b.regenerateButton.isHidden(), b.prevVersionButton.isHidden()) != before:
                    b.layout().invalidate()      # its header changed after the row was measured
                    self._rows[i].refit()

    # -- follow the bottom while the user has not scrolled up -----------------------------------------
    def _on_scrolled(self, value: int) -> None:
        self._stick = value >= self.verticalScrollBar().maximum() - 8

    def _on_range(self, lo: int, hi: int) -> None:
        self._fit()          # the scroll bar came or went: the column's width changed
        if self._stick:
            self.verticalScrollBar().setValue(hi)

    def scroll_to_bottom(self) -> None:
        self._stick = True
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())
