"""The Models window's downloads: one row per download with a progress bar, bytes, speed and
time left, and Pause / Resume / Cancel. A download paused, cut off or left by a closed app shows
as paused with what is on disk, and Resume continues it.

Signals:
    pauseRequested(tuple key), resumeRequested(object DownloadJob), cancelRequested(tuple key)
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from ..chat_source import human_bytes


def human_eta(s: float | None) -> str:
    if s is None:
        return ""
    s = int(s + 0.5)
    return f"{s // 3600} h {s % 3600 // 60} min left" if s >= 3600 else (
        f"{s // 60} min {s % 60} s left" if s >= 60 else f"{s} s left")


class DownloadRow(QFrame):
    def __init__(self, job, parent=None):
        super().__init__(parent, objectName="downloadRow")
        self.job = job
        self.name = QLabel(f"{job.name}  ·  {job.repo_id}")
        self.bar = QProgressBar(objectName="downloadBar", maximum=1000, textVisible=False)
        self.info = QLabel("", objectName="hint")
        self.pause = QPushButton("Pause")
        self.cancel = QPushButton("Cancel")
        top = QHBoxLayout()
        top.addWidget(self.name, 1)
        top.addWidget(self.pause)
        top.addWidget(self.cancel)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addLayout(top)
        lay.addWidget(self.bar)
        lay.addWidget(self.info)
        self.state = "running"

    def show_progress(self, p) -> None:
        self.bar.setValue(int(1000 * p.done / p.total) if p.total else 0)
        size = f"{human_bytes(p.done)} of {human_bytes(p.total)}"
        if p.stage == "verify":
            self.info.setText(f"checking what was downloaded before · {size}")
        elif p.stage == "join":
            self.info.setText(f"joining {p.n_files} parts into one file")
        else:
            part = f" · part {p.file_index + 1} of {p.n_files}" if p.n_files > 1 else ""
            speed = f" · {human_bytes(p.speed)}/s" if p.speed else ""
            eta = human_eta(p.eta)
            self.info.setText(size + speed + (f" · {eta}" if eta else "") + part)

    def set_state(self, state: str, text: str = "", done_bytes: int | None = None) -> None:
        """'running', 'paused', 'failed' (with the reason) or 'done'."""
        self.state = state
        self.pause.setText("Pause" if state == "running" else "Resume")
        self.pause.setVisible(state in ("running", "paused", "failed"))
        self.cancel.setText("Dismiss" if state == "done" else "Cancel")
        if done_bytes is not None and self.job.size:
            self.bar.setValue(int(1000 * done_bytes / self.job.size))
        if text:
            self.info.setText(text)


class DownloadPanel(QWidget):
    pauseRequested = Signal(tuple)
    resumeRequested = Signal(object)
    cancelRequested = Signal(tuple)

    def __init__(self, parent=None):
        super().__init__(parent, objectName="downloadPanel")
        self.rows: dict[tuple, DownloadRow] = {}
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 0)
        self.title = QLabel("Downloads", objectName="panelTitle")
        self._lay.addWidget(self.title)
        self.setVisible(False)

    @staticmethod
    def key(job) -> tuple:
        return job.repo_id, job.name

    def row(self, job) -> DownloadRow:
        key = self.key(job)
        if key not in self.rows:
            r = DownloadRow(job)
            r.pause.clicked.connect(lambda: self._pause_clicked(key))
            r.cancel.clicked.connect(lambda: self.cancelRequested.emit(key))
            self.rows[key] = r
            self._lay.addWidget(r)
            self.setVisible(True)
        return self.rows[key]

    def _pause_clicked(self, key) -> None:
        r = self.rows[key]
        if r.state == "running":
            self.pauseRequested.emit(key)
        else:
            r.set_state("running", "resuming…")
            self.resumeRequested.emit(r.job)

    def remove(self, key) -> None:
        r = self.rows.pop(key, None)
        if r is not None:
            r.setParent(None)
            r.deleteLater()
        self.setVisible(bool(self.rows))
