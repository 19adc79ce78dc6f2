"""The Models window's "Find on the Hub" tab: search GGUF repositories, open one, see its models
with size, quantization, whether they fit this machine and whether Hearth can run them, download.

Selecting a model reads its GGUF header from the Hub (a few MB, through HubTasks) so the fit and
the run verdict come from the file itself, not only from its name.

Signals:
    downloadRequested(object DownloadJob)
    tokenChanged(str token): the user saved a Hugging Face token ('' to forget it)
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from hearth.engine.hub import job_for
from hearth.engine.library.fit import Fit, fit_before_download, fit_for

from ..chat_source import human_bytes
from .hub_tasks import HubTasks

REPO_COLUMNS = ("Model", "Author", "Downloads", "Likes", "Updated")
FILE_COLUMNS = ("File", "Size", "Quant", "Fits", "Can run")
CAN_RUN_WIDTH = 170   # px: "yes", "no: …" and the start of a reason
FIT_WORDS = {Fit.FITS: "fits", Fit.TIGHT: "tight", Fit.WONT_FIT: "won't fit", Fit.UNKNOWN: "?"}


def human_count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _item(text, tip: str = "", align_right: bool = False) -> QTableWidgetItem:
    it = QTableWidgetItem(str(text))
    it.setFlags(it.flags() & ~Qt.ItemFlag.ItemIsEditable)
    if tip:
        it.setToolTip(tip)
    if align_right:
        it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return it


def _table(columns, stretch: int = 0) -> QTableWidget:
    t = QTableWidget(0, len(columns))
    t.setHorizontalHeaderLabels(columns)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    t.verticalHeader().setVisible(False)
    t.setShowGrid(False)
    t.setAlternatingRowColors(True)
    h = t.horizontalHeader()
    h.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    h.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return t


class HubSearchTab(QWidget):
    downloadRequested = Signal(object)
    tokenChanged = Signal(str)

    def __init__(self, tasks: HubTasks, n_ctx: int = 4096, available: int | None = None,
                 token_note: str = "", parent=None, kv_dtype: str = "f32"):
        super().__init__(parent)
        self.tasks, self.n_ctx, self.available = tasks, n_ctx, available
        self.kv_dtype = kv_dtype   # the KV cache precision setting the memory figures are for
        self._search_rid = self._repo_rid = 0
        self._facts_rids: dict[int, str] = {}
        self._repos, self._details, self._facts = [], None, {}

        self.query = QLineEdit(placeholderText="Search GGUF models on the Hugging Face Hub", objectName="hubQuery")
        self.query.returnPressed.connect(self.search)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.search)
        self.busy = QProgressBar(objectName="hubBusy", textVisible=False, maximumWidth=90)
        self.busy.setRange(0, 0)            # an indeterminate bar: the Hub is being asked
        self.busy.hide()
        self.cancel_button = QPushButton("Cancel", objectName="hubCancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.hide()
        self.repos = _table(REPO_COLUMNS)
        self.repos.setObjectName("hubRepos")
        self.repos.itemSelectionChanged.connect(self._repo_selected)
        self.files = _table(FILE_COLUMNS, stretch=0)
        self.files.setObjectName("hubFiles")
        # a long "Can run" reason is cut with "…" (whole in its tooltip), never the file's name
        self.files.horizontalHeader().setSectionResizeMode(4, QHeaderView.ResizeMode.Interactive)
        self.files.setColumnWidth(4, CAN_RUN_WIDTH)
        self.files.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.files.setWordWrap(False)
        self.files.itemSelectionChanged.connect(self._file_selected)
        self.files.itemDoubleClicked.connect(lambda *_: self.download())
        self.download_button = QPushButton("Download", objectName="hubDownload", enabled=False)
        self.download_button.clicked.connect(self.download)
        self.status = QLabel("", objectName="hint", wordWrap=True)
        self.detail = QLabel("", objectName="hint", wordWrap=True)
        self.need = QLabel("", objectName="hubNeed", wordWrap=True)   # the selected file's memory figure
        self.token = QLineEdit(placeholderText="Hugging Face token (for gated models)", objectName="hubToken")
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        save = QPushButton("Save token")
        save.clicked.connect(lambda: self.tokenChanged.emit(self.token.text().strip()))
        self.token_note = QLabel(token_note, objectName="hint", wordWrap=True)

        top = QHBoxLayout()
        top.addWidget(self.query, 1)
        top.addWidget(self.search_button)
        top.addWidget(self.busy)
        top.addWidget(self.cancel_button)
        files_box = QWidget()
        fl = QVBoxLayout(files_box)
        fl.setContentsMargins(0, 0, 0, 0)
        fl.addWidget(self.files, 1)
        fl.addWidget(self.need)
        row = QHBoxLayout()
        row.addWidget(self.detail, 1)
        row.addWidget(self.download_button)
        fl.addLayout(row)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.repos)
        split.addWidget(files_box)
        split.setChildrenCollapsible(False)
        tok = QHBoxLayout()
        tok.addWidget(self.token, 1)
        tok.addWidget(save)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(self.status)
        lay.addWidget(split, 1)
        lay.addLayout(tok)
        lay.addWidget(self.token_note)

        tasks.searched.connect(self._on_searched)
        tasks.repoOpened.connect(self._on_repo)
        tasks.factsRead.connect(self._on_facts)
        tasks.failed.connect(self._on_failed)

    # --- search
    def search(self) -> None:
        q = self.query.text().strip()
        self._search_rid = self.tasks.search(q)
        self.status.setText(f"Searching for “{q}”…" if q else "Listing GGUF models…")
        self._show_busy()

    def waiting(self) -> bool:
        """A search, a repository or a header is being read from the Hub."""
        return bool(self._search_rid or self._repo_rid or self._facts_rids)

    def _show_busy(self) -> None:
        on = self.waiting()
        self.busy.setVisible(on)
        self.cancel_button.setVisible(on)

    def cancel(self) -> None:
        """Stop waiting for the Hub: the answers still on their way are dropped."""
        if self._search_rid:
            self.status.setText("Search cancelled.")
        if self._repo_rid or self._facts_rids:
            self.detail.setText("Cancelled.")
        self._search_rid = self._repo_rid = 0
        for path in self._facts_rids.values():
            self._reading_done(path)
        self._facts_rids.clear()
        self._show_busy()

    def _on_searched(self, rid: int, repos: list) -> None:
        if rid != self._search_rid:
            return
        self._search_rid = 0
        self._show_busy()
        self._repos = repos
        self.repos.setRowCount(0)
        for r in repos:
            i = self.repos.rowCount()
            self.repos.insertRow(i)
            name = r.repo_id.split("/", 1)[-1] + ("  (gated)" if r.gated else "")
            self.repos.setItem(i, 0, _item(name, r.repo_id + (" (gated: needs a token)" if r.gated else "")))
            self.repos.setItem(i, 1, _item(r.author))
            self.repos.setItem(i, 2, _item(human_count(r.downloads), align_right=True))
            self.repos.setItem(i, 3, _item(human_count(r.likes), align_right=True))
            self.repos.setItem(i, 4, _item(r.updated.strftime("%Y-%m-%d") if r.updated else ""))
        self.status.setText(f"{len(repos)} repositories" if repos else "No GGUF repositories found")

    # --- a repository
    def _repo_selected(self) -> None:
        rows = self.repos.selectionModel().selectedRows()
        if not rows:
            return
        r = self._repos[rows[0].row()]
        self._repo_rid = self.tasks.open_repo(r.repo_id)
        self._details, self._facts = None, {}
        self.files.setRowCount(0)
        self.need.setText("")
        self.download_button.setEnabled(False)
        self.detail.setText(f"Opening {r.repo_id}…")
        self._show_busy()

    def _on_repo(self, rid: int, details) -> None:
        if rid != self._repo_rid:
            return
        self._repo_rid = 0
        self._show_busy()
        self._details = details
        self.files.setRowCount(0)
        for m in details.models:
            i = self.files.rowCount()
            self.files.insertRow(i)
            self.files.setItem(i, 0, _item(m.name, "\n".join(f.path for f in m.files)))
            self.files.setItem(i, 1, _item(human_bytes(m.size), align_right=True))
            self.files.setItem(i, 2, _item(m.group.quant or "?"))
            self._set_fit(i, m, None)
        s = details.summary
        extra = f" · {s.architecture}" if s.architecture else ""
        extra += f" · context {s.context_length:,}" if s.context_length else ""
        self.detail.setText(f"{s.repo_id}{extra} · {len(details.models)} model file(s)"
                            if details.models else f"{s.repo_id} has no GGUF model files")

    def set_kv_dtype(self, kv_dtype: str) -> None:
        """The KV cache precision setting changed ("f32" or "f16"): the shown figures follow it."""
        self.kv_dtype = kv_dtype
        if self._details is not None:
            for i, m in enumerate(self._details.models):
                self._set_fit(i, m, self._facts.get(m.files[0].path))

    def _set_fit(self, row: int, model, facts) -> None:
        if facts is not None:
            n = min(self.n_ctx, facts.context_length or self.n_ctx)
            fit, need = fit_for(facts, n, self.available, kv_dtype=self.kv_dtype)
            verdict = facts.verdict
            how = (f"needs about {human_bytes(need)} at {n:,} tokens "
                   f"(KV cache {'float16' if self.kv_dtype == 'f16' else 'float32'})")
        else:
            fit, need = fit_before_download(model.size, self.available)
            verdict = model.verdict
            reading = model.files[0].path in self._facts_rids.values()
            how = f"needs about {human_bytes(need)} (from the file size; " + \
                  ("reading its header…)" if reading else "select it to read its header)")
        cell = _item("—" if verdict.runs is False else FIT_WORDS[fit], how)
        cell.setData(Qt.ItemDataRole.UserRole, need)   # the bytes the figure says
        self.files.setItem(row, 3, cell)
        run = {True: "yes", False: "no", None: "?"}[verdict.runs]
        self.files.setItem(row, 4, _item(run if not verdict.reason else f"{run}: {verdict.reason}", verdict.reason))
        if self._selected_model()[1] == row:
            self._show_need()

    def _show_need(self) -> None:
        m, row = self._selected_model()
        cell = self.files.item(row, 3) if m is not None else None
        self.need.setText(f"{m.name} {cell.toolTip()}" if cell is not None and m.verdict.runs is not False else "")

    def _selected_model(self):
        rows = self.files.selectionModel().selectedRows()
        if not rows or self._details is None:
            return None, -1
        return self._details.models[rows[0].row()], rows[0].row()

    def _file_selected(self) -> None:
        m, row = self._selected_model()
        self.download_button.setEnabled(m is not None and m.verdict.runs is not False)
        self._show_need()
        if m is not None and m.files[0].path not in self._facts and m.verdict.runs is not False:
            rid = self.tasks.read_facts(self._details.summary.repo_id, self._details.commit, m.files[0])
            self._facts_rids[rid] = m.files[0].path
            self._show_busy()
            self._set_fit(row, m, None)      # says "reading its header…"

    def _reading_done(self, path: str) -> None:
        """A header read ended without facts: its row's words no longer say "reading"."""
        if self._details is None:
            return
        for i, m in enumerate(self._details.models):
            if m.files[0].path == path and path not in self._facts:
                self._set_fit(i, m, None)

    def _on_facts(self, rid: int, path: str, facts) -> None:
        if self._facts_rids.pop(rid, None) is None or self._details is None:
            return
        self._show_busy()
        self._facts[path] = facts
        for i, m in enumerate(self._details.models):
            if m.files[0].path == path:
                self._set_fit(i, m, facts)
                if facts.runs is False and self._selected_model()[1] == i:
                    self.download_button.setEnabled(False)

    def _on_failed(self, rid: int, message: str) -> None:
        if rid == self._search_rid:
            self._search_rid = 0
            self.status.setText(message)
        elif rid == self._repo_rid:
            self._repo_rid = 0
            self.detail.setText(message)
        elif (path := self._facts_rids.pop(rid, None)) is not None:
            self.detail.setText(message)
            self._reading_done(path)
        self._show_busy()

    def download(self) -> None:
        m, _ = self._selected_model()
        if m is None or self._details is None:
            return
        self.downloadRequested.emit(job_for(m, self._details.summary.repo_id, self._details.commit))
