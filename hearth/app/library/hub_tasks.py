"""The Models window's background work: Hub searches, a repository's files, a file's header, and
the downloads, each off the GUI thread; answers come back by queued signals.

Every request gets an id; the window keeps the id of the request it still waits for and drops
older answers (a search typed over, another repository opened). The engine's `DownloadManager`
runs the downloads; its callbacks (on download threads) are re-emitted as signals.

Signals:
    searched(int request, list[RepoSummary])
    repoOpened(int request, RepoDetails)
    factsRead(int request, str repo_path, ModelFacts)
    failed(int request, str message)
    downloadProgress(tuple key, Progress)
    downloadFinished(tuple key, object DownloadResult | None, str error message ('' if none))
"""

from __future__ import annotations

import itertools
import threading

from PySide6.QtCore import QCoreApplication, QObject, Signal

from hearth.engine.errors import EngineError
from hearth.engine.hub import DownloadCallbacks, DownloadManager, HubClient, remote_facts
from hearth.engine.hub.reach import hub_unreachable
from hearth.engine.library.registry import ModelRegistry

from .. import gui_gc


class HubTasks(QObject):
    searched = Signal(int, list)
    repoOpened = Signal(int, object)
    factsRead = Signal(int, str, object)
    failed = Signal(int, str)
    downloadProgress = Signal(tuple, object)
    downloadFinished = Signal(tuple, object, str)
    _ids = itertools.count(1)
    reach_timeout_s = 5.0     # how long the Hub may take to answer at all before "cannot reach"

    def __init__(self, registry: ModelRegistry, endpoint: str | None = None, token: str | None = None,
                 parent=None):
        """`token`: a Hugging Face token, None for the stored login's, "" for none."""
        super().__init__(parent)
        gui_gc.install(QCoreApplication.instance())   # its threads must never collect Qt objects
        self.registry = registry
        self.endpoint = endpoint
        self.client = HubClient(endpoint, token)
        self.downloads = DownloadManager(self.client, registry, DownloadCallbacks(
            progress=lambda key, p: self._emit(self.downloadProgress, key, p),
            finished=lambda key, r, e: self._emit(self.downloadFinished, key, r, str(e) if e else "")))

    def set_token(self, token: str | None) -> None:
        """A new token for the next requests (running downloads keep theirs)."""
        self.client = HubClient(self.endpoint, token)
        self.downloads.client = self.client

    def search(self, query: str, limit: int = 40) -> int:
        return self._spawn("hub-search", lambda: self.searched, lambda c: c.search(query, limit))

    def open_repo(self, repo_id: str) -> int:
        return self._spawn("hub-repo", lambda: self.repoOpened, lambda c: c.repo(repo_id))

    def read_facts(self, repo_id: str, commit: str, file) -> int:
        return self._spawn("hub-header", lambda: self.factsRead,
                           lambda c: (file.path, remote_facts(c, repo_id, commit, file)))

    def _spawn(self, name, signal, work) -> int:
        """Run `work` on a thread, after a probe of the endpoint: when the Hub cannot be reached,
        `failed` says so within seconds and the work never starts (huggingface_hub would retry for
        half a minute, and each refused connection closes its shared HTTP client under every other
        request in flight)."""
        rid = next(self._ids)
        client = self.client

        def run():
            why = hub_unreachable(client.endpoint, self.reach_timeout_s)
            if why is not None:
                self._emit(self.failed, rid, why[0].upper() + why[1:])
                return
            try:
                out = work(client)
            except EngineError as e:
                self._emit(self.failed, rid, str(e))
                return
            except Exception as e:  # noqa: BLE001  anything else is still a message, not a crash
                self._emit(self.failed, rid, f"{type(e).__name__}: {e}")
                return
            self._emit(signal(), rid, *(out if isinstance(out, tuple) else (out,)))

        threading.Thread(target=run, name=name, daemon=True).start()
        return rid

    @staticmethod
    def _emit(signal, *args) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # the window is gone (the app is quitting)
            pass

    def close(self) -> None:
        """Pause the downloads (they resume next time) and wait for their threads."""
        self.downloads.close()
