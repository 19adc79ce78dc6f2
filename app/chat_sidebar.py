"""The sidebar: New chat, search (titles and message text), the chat list, rename, delete with undo.

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

from .chat_store import Chat, ChatStore, ChatStoreError
from .item_models import ChatFilterModel, ChatListModel, IdRole


class ChatSidebar(QWidget):
    chatSelected = Signal(int)
    newChatRequested = Signal()
    deleteRequested = Signal(int)
    storageFailed = Signal(str)

    def __init__(self, chats: ChatStore, parent=None):
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.setMinimumWidth(220)
        self.chats = chats
        self._undo: tuple[int, int, Chat] | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 10, 10, 6)
        lay.setSpacing(8)
        self.newChatButton = QPushButton("＋  New chat", objectName="newChatButton")
        self.newChatButton.setToolTip("New chat (Ctrl+N)")
        self.chatSearch = QLineEdit(objectName="chatSearch", placeholderText="Search chats  (Ctrl+K)")
        self.chatSearch.setClearButtonEnabled(True)
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
        lay.addWidget(self.chatList, 1)
        lay.addWidget(self.undoBar)

        self.newChatButton.clicked.connect(self.newChatRequested)
        self.chatSearch.textChanged.connect(self.chatFilter.set_search)
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

    def focus_search(self) -> None:
        self.chatSearch.setFocus()
        self.chatSearch.selectAll()

    # -- private slots --------------------------------------------------------------------------------
    def _on_current(self, cur, _prev) -> None:
        if cur.isValid():
            self.chatSelected.emit(cur.data(IdRole))

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
