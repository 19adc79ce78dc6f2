"""The prefix cache panel (`cachePanel`): saved prefix images, their total against the cap, Clear.

The list comes from the engine worker (`EngineClient.list_cache`, answered by `cacheListed`), so the
GUI thread never reads the store while the worker writes it.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QDoubleSpinBox, QHBoxLayout,
                               QHeaderView, QLabel, QProgressBar, QPushButton, QTableWidget, QTableWidgetItem,
                               QVBoxLayout)

from ..chat_source import human_bytes

COLUMNS = ("Kept for", "Model", "Tokens", "Size", "Last used")


def _ago(t: float) -> str:
    if not t:
        return "—"
    d = time.time() - t
    if d < 90:
        return "just now"
    if d < 3600:
        return f"{d / 60:.0f} min ago"
    if d < 86400 * 2:
        return f"{d / 3600:.0f} h ago"
    return time.strftime("%Y-%m-%d", time.localtime(t))


def _tokens_cell(row: dict) -> tuple[str, str]:
    """(the Tokens cell, its tooltip): the tokens whose K/V the row's size holds. For a chat that is
    every position it keeps on disk (earlier versions of replies and edits included), not the
    preset's prefix (its own row) and not necessarily the chat's length now (in the tooltip)."""
    if "stored_tokens" not in row:
        n = int(row.get("tokens") or 0)
        return (f"{n:,}" if n else "—"), "Tokens of the preset's prefix"
    stored = int(row["stored_tokens"])
    tip = (f"{stored:,} tokens stored in {row.get('segments', 0)} segment(s), earlier versions of replies "
           f"and edited messages included; the chat is {int(row.get('tokens') or 0):,} tokens long now, "
           "its preset's prefix included (that prefix has its own row)")
    return f"{stored:,}", tip


class CachePanel(QDialog):
    def __init__(self, client, settings=None, parent=None):
        super().__init__(parent)
        self.setObjectName("cachePanel")
        self.setWindowTitle("Prefix cache")
        self.resize(760, 420)
        self.client = client
        self.settings = settings
        lay = QVBoxLayout(self)
        intro = QLabel("Presets start instantly because their prompt prefix (system prompt and tools) is "
                       "saved here after its first use and restored instead of recomputed. Images are "
                       "only read when a preset is used; the oldest are removed when the total passes the cap.",
                       wordWrap=True, objectName="hint")
        lay.addWidget(intro)
        self.table = QTableWidget(0, len(COLUMNS), objectName="cacheTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        lay.addWidget(self.table, 1)
        row = QHBoxLayout()
        self.totalLabel = QLabel("", objectName="cacheTotal")
        self.totalBar = QProgressBar(objectName="cacheMeter", textVisible=False)
        self.totalBar.setMaximumHeight(8)
        self.clearButton = QPushButton("Clear cache", objectName="cacheClear")
        self.clearButton.clicked.connect(self.clear)
        self.capBox = QDoubleSpinBox(objectName="cacheCap", decimals=1, minimum=0.1, maximum=1024.0,
                                     singleStep=0.5, suffix=" GiB", keyboardTracking=False)
        self.capBox.setToolTip("The most disk space prefix images may take; the oldest go first")
        self.capBox.valueChanged.connect(self._on_cap)
        row.addWidget(self.totalLabel)
        row.addWidget(self.totalBar, 1)
        row.addWidget(QLabel("Cap"))
        row.addWidget(self.capBox)
        row.addWidget(self.clearButton)
        lay.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.listing: dict = {"images": [], "total": 0, "cap": 0}
        client.worker.cacheListed.connect(self.show_listing)
        if settings is not None:
            self.capBox.blockSignals(True)
            self.capBox.setValue(settings.get("cache/cap_gib"))
            self.capBox.blockSignals(False)

    def refresh(self) -> None:
        self.client.list_cache()

    def clear(self) -> None:
        self.client.clear_cache()

    def set_cap_gib(self, gib: float) -> None:
        self.capBox.setValue(gib)

    def _on_cap(self, gib: float) -> None:
        if self.settings is not None:
            self.settings.set("cache/cap_gib", float(gib))
        self.client.set_cache_cap(int(gib * (1 << 30)))

    def show_listing(self, listing: dict) -> None:
        self.listing = listing
        # preset images, then chats' contexts (one row per chat, its segments summed); each most
        # recently used first (one LRU order evicts both)
        last_use = lambda i: -i.get("last_used", 0)  # noqa: E731
        rows = [(f"Preset: {im.get('preset') or '(unknown)'}", im.get("model") or "—", im)
                for im in sorted(listing.get("images", []), key=last_use)]
        rows += [(f"Chat: {c.get('title') or '(untitled)'}", c.get("model") or "—", c)
                 for c in sorted(listing.get("chats", []), key=last_use)]
        images = [r[2] for r in rows]
        self.table.setRowCount(len(rows))
        for r, (what, model, im) in enumerate(rows):
            count, tip = _tokens_cell(im)
            cells = (what, model, count, human_bytes(im.get("size", 0)), _ago(im.get("last_used", 0)))
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(tip if c == 2 else im.get("path", ""))
                if c in (2, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        total, cap = listing.get("total", 0), listing.get("cap", 0) or 1
        err = listing.get("error")
        self.totalLabel.setText(err or f"{len(images)} image(s), {human_bytes(total)} of {human_bytes(cap)}")
        self.totalBar.setRange(0, 1000)
        self.totalBar.setValue(int(1000 * min(1.0, total / cap)))
        self.clearButton.setEnabled(bool(images))
