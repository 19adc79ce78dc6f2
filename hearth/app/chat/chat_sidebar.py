"""The sidebar: New chat, search (titles and message text), the chat list, rename, delete with undo.

Searching only filters the list: a chat opens on Enter (the highlighted or first match), a click, or
the arrow keys in the list. "No chats match" shows when nothing does; Esc clears the search, and the
open chat is selected again.

Signals:
    chatSelected(int): the user picked a chat in the list.
    newChatRequested()
    deleteRequested(int): the user asked to delete a chat (the window decides, then calls `remove`).
    storageFailed(str): a delete or an undo could not be written (a full disk); nothing changed.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QLineEdit, QListView, QMenu, QPushButton, QToolButton,
                               QVBoxLayout, QWidget)

from ..store.chat_store import Chat, ChatStore, ChatStoreError
from ..store.item_models import ChatFilterModel, ChatListModel, IdRole


class ChatSidebar(QWidget):
    chatSelected = Signal(int)
    newChatRequested = Signal()
    deleteRequested = Signal(int)
    storageFailed = Signal(str)

    def __init__(self, chats: ChatStore, parent=None):
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.setMinimumWidth(200)
        self.chats = chats
        self._undo: tuple[int, int, Chat] | None = None
        self._filtering = False
        self.open_id: int | None = None      # the chat the window shows
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 10, 10, 6)
        lay.setSpacing(8)
        self.newChatButton = QPushButton("＋  New chat", objectName="newChatButton")
        self.newChatButton.setToolTip("New chat (Ctrl+N)")
        self.chatSearch = QLineEdit(objectName="chatSearch", placeholderText="Search chats  (Ctrl+K)")
        self.chatSearch.setClearButtonEnabled(True)
        self.chatSearch.setAccessibleName("Search chats")
        self.noResults = QLabel("No chats match.", objectName="hint")
        self.noResults.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        self.noResults.hide()
        self.chatModel = ChatListModel(chats, self)
        self.chatFilter = ChatFilterModel(chats, self)
        self.chatFilter.setSourceModel(self.chatModel)
        self.chatList = QListView(objectName="chatList")
        self.chatList.setModel(self.chatFilter)
        self.chatList.setEditTriggers(QListView.EditTrigger.EditKeyPressed | QListView.EditTrigger.DoubleClicked)
        self.chatList.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.chatList.setUniformItemSizes(True)
        self.chatList.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chatList.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.chatList.setAccessibleName("Chats")
        self.undoBar = QFrame(objectName="undoBar")
        ul = QHBoxLayout(self.undoBar)
        ul.setContentsMargins(8, 4, 4, 4)
        self.undoLabel = QLabel("", wordWrap=True)
        self.undoButton = QToolButton(text="Undo", objectName="undoDelete")
        ul.addWidget(self.undoLabel, 1)
        ul.addWidget(self.undoButton)
        self.undoBar.hide()
        lay.addWidget(self.newChatButton)
        lay.addWidget(self.chatSearch)
        lay.addWidget(self.noResults)
        lay.addWidget(self.chatList, 1)
        lay.addWidget(self.undoBar)

        self.newChatButton.clicked.connect(self.newChatRequested)
        self.chatSearch.textChanged.connect(self._on_search)
        self.chatSearch.returnPressed.connect(self.open_match)
        self.chatList.selectionModel().currentChanged.connect(self._on_current)
        self.chatList.customContextMenuRequested.connect(self._on_menu)
        self.undoButton.clicked.connect(self.undo)
        QShortcut(QKeySequence.StandardKey.Delete, self.chatList, self._on_delete_key,
                  context=Qt.ShortcutContext.WidgetShortcut)

    # -- queries --------------------------------------------------------------------------------------
    def has(self, chat_id: int) -> bool:
        return self.chatModel.row_of(chat_id) >= 0

    def first_id(self) -> int | None:
        return self.chatModel.chat(0).id if self.chatModel.rowCount() else None

    # -- changes --------------------------------------------------------------------------------------
    def add(self, chat: Chat) -> None:
        """A new chat goes on top and is selected."""
        self.chatModel.insert_chat(chat, 0)
        self.select(chat.id)

    def select(self, chat_id: int) -> bool:
        """Make `chat_id` the current item (False if it is filtered out or gone)."""
        row = self.chatModel.row_of(chat_id)
        idx = self.chatFilter.mapFromSource(self.chatModel.index(row)) if row >= 0 else None
        if idx is None or not idx.isValid():
            return False
        self.open_id = chat_id
        self.chatList.setCurrentIndex(idx)
        return True

    def refresh(self, chat_id: int) -> None:
        """A chat was renamed or got a message: new title, moved to the top."""
        chat = self.chats.chat(chat_id)
        if chat and self.has(chat_id):
            self.chatModel.refresh_chat(chat)
            self.chatModel.move_to_top(chat_id)

    def remove(self, chat_id: int) -> int | None:
        """Soft-delete a chat and offer Undo. Returns the id of the chat that takes its place, if any
        (the chat itself when the store could not write the deletion)."""
        try:
            self.chats.delete_chat(chat_id)
        except ChatStoreError as e:
            self.storageFailed.emit(f"Could not delete the chat: {e}. Free some space and try again.")
            return chat_id
        removed = self.chatModel.remove_chat(chat_id)
        if removed is None:
            return None
        row, chat = removed
        self._undo = (chat_id, row, chat)
        self.undoLabel.setText(f"Deleted “{chat.title}”.")
        self.undoBar.show()
        n = self.chatModel.rowCount()
        return self.chatModel.chat(min(row, n - 1)).id if n else None

    def undo(self) -> int | None:
        """Bring back the last deleted chat; returns its id."""
        if self._undo is None:
            return None
        chat_id, row, chat = self._undo
        try:
            self.chats.undelete_chat(chat_id)
        except ChatStoreError as e:           # Undo stays offered
            self.storageFailed.emit(f"Could not bring the chat back: {e}. Free some space and try Undo again.")
            return None
        self._undo = None
        self.chatModel.insert_chat(chat, min(row, self.chatModel.rowCount()))
        self.undoBar.hide()
        if not self.select(chat_id):
            self.chatSelected.emit(chat_id)
        return chat_id

    def rename_current(self) -> None:
        idx = self.chatList.currentIndex()
        if idx.isValid():
            self.chatList.edit(idx)

    def clear_search(self) -> bool:
        """Esc in the search box: clear it (False when it was already empty)."""
        if not self.chatSearch.text():
            return False
        self.chatSearch.clear()
        return True

    def open_match(self) -> None:
        """Enter in the search box: open the highlighted match, else the first."""
        idx = self.chatList.currentIndex()
        if not idx.isValid() and self.chatFilter.rowCount():
            idx = self.chatFilter.index(0, 0)
        if idx.isValid():
            self.chatList.setCurrentIndex(idx)
            self._open(idx.data(IdRole))

    def focus_search(self) -> None:
        self.chatSearch.setFocus()
        self.chatSearch.selectAll()

    # -- private slots --------------------------------------------------------------------------------
    def _on_search(self, text: str) -> None:
        self._filtering = True       # the list's current row moves while it filters: that opens nothing
        try:
            self.chatFilter.set_search(text)
            if not text and self.open_id is not None:
                self.select(self.open_id)
        finally:
            self._filtering = False
        self.noResults.setVisible(bool(text) and self.chatFilter.rowCount() == 0)

    def _on_current(self, cur, _prev) -> None:
        if cur.isValid() and not self._filtering:
            self._open(cur.data(IdRole))

    def _open(self, chat_id: int) -> None:
        self.open_id = chat_id
        self.chatSelected.emit(chat_id)

    def _on_menu(self, pos) -> None:
        idx = self.chatList.indexAt(pos)
        if not idx.isValid():
            return
        m = QMenu(self)
        m.addAction("Rename", lambda: self.chatList.edit(idx))
        m.addAction("Delete", lambda: self.deleteRequested.emit(idx.data(IdRole)))
        m.exec(self.chatList.viewport().mapToGlobal(pos))

    def _on_delete_key(self) -> None:
        idx = self.chatList.currentIndex()
        if idx.isValid():
            self.deleteRequested.emit(idx.data(IdRole))
