"""Qt item models over the stores. They live on the GUI thread and are changed only there."""

from __future__ import annotations

from PySide6.QtCore import (QAbstractListModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt)

from .chat_store import Chat, ChatStore, ChatStoreError, Message
from .preset_store import PresetStore

IdRole = Qt.ItemDataRole.UserRole + 1
RoleRole = Qt.ItemDataRole.UserRole + 2      # a message's role: user / assistant
StatsRole = Qt.ItemDataRole.UserRole + 3
StreamingRole = Qt.ItemDataRole.UserRole + 4
UpdatedRole = Qt.ItemDataRole.UserRole + 5
ErrorRole = Qt.ItemDataRole.UserRole + 6
ToolCallsRole = Qt.ItemDataRole.UserRole + 7  # an assistant message's tool calls and their results

_Index = QModelIndex | QPersistentModelIndex


class ChatListModel(QAbstractListModel):
    """Live chats, most recent first. Editing the display text renames the chat in the store."""

    def __init__(self, store: ChatStore, parent=None):
        super().__init__(parent)
        self._store = store
        self._chats: list[Chat] = store.chats()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._chats)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._chats):
            return None
        c = self._chats[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return c.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return c.title
        if role == IdRole:
            return c.id
        if role == UpdatedRole:
            return c.updated
        return None

    def flags(self, index: _Index):
        f = super().flags(index)
        return f | Qt.ItemFlag.ItemIsEditable if index.isValid() else f

    def setData(self, index: _Index, value, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if not index.isValid() or role != Qt.ItemDataRole.EditRole:
            return False
        title = str(value).strip()
        if not title:
            return False
        c = self._chats[index.row()]
        try:
            self._store.rename_chat(c.id, title)
        except ChatStoreError:        # a full disk: the old title stays, as shown
            return False
        c.title = title
        self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole])
        return True

    def row_of(self, chat_id: int) -> int:
        return next((i for i, c in enumerate(self._chats) if c.id == chat_id), -1)

    def chat(self, row: int) -> Chat:
        return self._chats[row]

    def insert_chat(self, chat: Chat, row: int = 0) -> None:
        self.beginInsertRows(QModelIndex(), row, row)
        self._chats.insert(row, chat)
        self.endInsertRows()

    def remove_chat(self, chat_id: int) -> tuple[int, Chat] | None:
        row = self.row_of(chat_id)
        if row < 0:
            return None
        self.beginRemoveRows(QModelIndex(), row, row)
        chat = self._chats.pop(row)
        self.endRemoveRows()
        return row, chat

    def refresh_chat(self, chat: Chat) -> None:
        row = self.row_of(chat.id)
        if row >= 0:
            self._chats[row] = chat
            i = self.index(row)
            self.dataChanged.emit(i, i, [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole])

    def move_to_top(self, chat_id: int) -> None:
        row = self.row_of(chat_id)
        if row > 0:
            self.beginMoveRows(QModelIndex(), row, row, QModelIndex(), 0)
            self._chats.insert(0, self._chats.pop(row))
            self.endMoveRows()


class ChatFilterModel(QSortFilterProxyModel):
    """Chat search: a chat matches if its title or any of its messages contains the text."""

    def __init__(self, store: ChatStore, parent=None):
        super().__init__(parent)
        self._store = store
        self._ids: set[int] | None = None

    def set_search(self, text: str) -> None:
        self.beginFilterChange()
        self._ids = set(self._store.search(text)) if text.strip() else None
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, row: int, parent: _Index) -> bool:
        if self._ids is None:
            return True
        return self.sourceModel().index(row, 0, parent).data(IdRole) in self._ids


class MessageModel(QAbstractListModel):
    """The messages of the open chat. The streaming reply is the last row with StreamingRole True;
    `append_text` grows it and emits dataChanged for that one row."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list[Message] = []
        self._streaming = -1
        self._errors: dict[int, str] = {}

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        m = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return m.content
        if role == RoleRole:
            return m.role
        if role == StatsRole:   # with the model that wrote it, for the info line
            return {**({"model": m.model} if m.model else {}), **m.stats}
        if role == StreamingRole:
            return index.row() == self._streaming
        if role == IdRole:
            return m.id
        if role == ErrorRole:
            return self._errors.get(index.row(), "") or (m.stats or {}).get("error", "")
        if role == ToolCallsRole:
            return [dict(c) for c in m.tool_calls]
        return None

    def roleNames(self):
        return {Qt.ItemDataRole.DisplayRole: b"content", RoleRole: b"role", StatsRole: b"stats",
                StreamingRole: b"streaming", IdRole: b"messageId", ErrorRole: b"error",
                ToolCallsRole: b"toolCalls"}

    def message(self, row: int) -> Message:
        return self._rows[row]

    def messages(self) -> list[Message]:
        return list(self._rows)

    def set_messages(self, msgs: list[Message]) -> None:
        self.beginResetModel()
        self._rows = list(msgs)
        self._streaming = -1
        self._errors.clear()
        self.endResetModel()

    def append(self, msg: Message, streaming: bool = False) -> int:
        row = len(self._rows)
        self.beginInsertRows(QModelIndex(), row, row)
        self._rows.append(msg)
        if streaming:
            self._streaming = row
        self.endInsertRows()
        return row

    def append_text(self, row: int, text: str) -> None:
        self._rows[row].content += text
        i = self.index(row)
        self.dataChanged.emit(i, i, [Qt.ItemDataRole.DisplayRole])

    def finish(self, row: int, stats: dict, error: str = "") -> None:
        self._rows[row].stats = dict(stats)
        if error:
            self._errors[row] = error
        if self._streaming == row:
            self._streaming = -1
        i = self.index(row)
        self.dataChanged.emit(i, i, [StatsRole, StreamingRole, ErrorRole])

    def set_thinking(self, row: int, thinking: dict) -> None:
        """The reply's thinking so far (stats["thinking"]), while it streams."""
        self._rows[row].stats = {**(self._rows[row].stats or {}), "thinking": dict(thinking)}
        i = self.index(row)
        self.dataChanged.emit(i, i, [StatsRole])

    def set_tool_calls(self, row: int, calls: list) -> None:
        self._rows[row].tool_calls = [dict(c) for c in calls]
        i = self.index(row)
        self.dataChanged.emit(i, i, [ToolCallsRole, Qt.ItemDataRole.DisplayRole])

    def set_id(self, row: int, mid: int) -> None:
        self._rows[row].id = mid
        i = self.index(row)
        self.dataChanged.emit(i, i, [IdRole])

    def truncate(self, row: int) -> None:
        """Remove `row` and every row after it."""
        if row >= len(self._rows):
            return
        self.beginRemoveRows(QModelIndex(), row, len(self._rows) - 1)
        del self._rows[row:]
        if self._streaming >= row:
            self._streaming = -1
        self._errors = {k: v for k, v in self._errors.items() if k < row}
        self.endRemoveRows()


class PresetListModel(QAbstractListModel):
    """The presets in their order, over the PresetStore (which saves every change)."""

    def __init__(self, store: PresetStore, parent=None):
        super().__init__(parent)
        self.store = store

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.store.presets)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self.store.presets):
            return None
        p = self.store.presets[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return p.name
        if role == Qt.ItemDataRole.ToolTipRole:
            tools = f"{len(p.tools)} tool(s)" if p.tools else "no tools"
            return f"{p.name}: {tools}, temperature {p.sampling.get('temperature')}"
        if role == IdRole:
            return p.id
        return None

    def reload(self) -> None:
        self.beginResetModel()
        self.endResetModel()

    def row_of(self, pid: str) -> int:
        return self.store.index(pid)
