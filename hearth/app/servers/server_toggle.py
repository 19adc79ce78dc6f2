"""Settings → "Serve Hearth on 127.0.0.1:PORT": engine/server's OpenAI-compatible HTTP server on the
app's own engine. Off by default, loopback only (listening elsewhere needs a token:
`python -m hearth.engine serve --host … --token …`).

The server's requests run on the app's engine thread, one at a time between the window's own
requests: `EngineJobs` is ChatService's `worker` (submit(fn) -> Job, queued, close()) made of a
QObject moved to the EngineClient's QThread, reached by a queued signal. The HTTP threads never
touch the engine, the window, or a widget.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel

log = logging.getLogger(__name__)
HOST = "127.0.0.1"


class _JobRunner(QObject):
    """Lives on the engine thread; runs each job it is sent, in order."""

    def __init__(self, jobs: EngineJobs):
        super().__init__()
        self._jobs = jobs

    @Slot(object)
    def run(self, job) -> None:
        if not self._jobs._take(job):
            return          # closed meanwhile: already ended
        engine = self._jobs.engine_of()
        if engine is None:
            from hearth.engine.server import RequestError

            def no_model(_engine, _job):
                raise RequestError("Hearth's window has no local model loaded (it is using a remote server); "
                                   "choose a local model in the window to serve it", status=503,
                                   type="server_error", code="model_not_loaded")
            job.fn = no_model
        try:
            job.run(engine)
        finally:
            self._jobs._done(job)


class EngineJobs(QObject):
    """ChatService's worker interface on the app's engine thread (see the module docstring)."""

    _submitted = Signal(object)

    def __init__(self, client, engine_of):
        super().__init__()
        self.engine_of = engine_of
        self._lock = threading.Lock()
        self._waiting: list = []
        self._current = None
        self._closed = False
        self._runner = _JobRunner(self)
        self._runner.moveToThread(client.thread)
        self._submitted.connect(self._runner.run, Qt.ConnectionType.QueuedConnection)

    def submit(self, fn):
        from hearth.engine.server import Job
        job = Job(fn)
        with self._lock:
            if self._closed:
                raise RuntimeError("the app's server is stopping")
            self._waiting.append(job)
        self._submitted.emit(job)      # from an HTTP thread: queued to the engine thread
        return job

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _take(self, job) -> bool:
        with self._lock:
            if job not in self._waiting:
                return False
            self._waiting.remove(job)
            self._current = job
            return True

    def _done(self, job) -> None:
        with self._lock:
            self._current = None

    def close(self) -> None:
        """Cancel the running job and end the waiting ones at once (their requests get no reply)."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            if self._current is not None:
                self._current.cancel.set()
        for job in waiting:
            job.cancel.set()
            job.run(None)           # cancelled: does not call fn, only ends the job's item stream


class ServeToggle(QObject):
    """The menu action and the status-bar label. It knows the settings, the engine client, its menu
    and the status bar, not the window. Signals:
        servingChanged(str url): the server started ("http://127.0.0.1:PORT/v1") or stopped ("").
        problem(str): a sentence for the user (the server could not start).
    Slot: `on_model_ready(info)`, connected by the window to its modelReady.
    """

    servingChanged = Signal(str)
    problem = Signal(str)

    def __init__(self, settings, client, menu, status_bar, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.client = client
        self.server = None
        self.service = None
        self._thread: threading.Thread | None = None
        self._engine = None
        self.action = QAction(self._label(), menu, checkable=True)
        self.action.setObjectName("serveAction")
        self.action.setToolTip("Let other programs on this computer use the loaded model through the OpenAI "
                               "chat-completions API")
        self.action.toggled.connect(self.set_serving)
        menu.addSeparator()
        menu.addAction(self.action)
        self.statusLabel = QLabel("", objectName="serveStatus")
        self.statusLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.statusLabel.hide()
        status_bar.addPermanentWidget(self.statusLabel)

    @property
    def url(self) -> str:
        return self.server.url if self.server is not None else ""

    def _label(self) -> str:
        port = self.settings.get("server/port")
        return f"Serve Hearth on {HOST}:{port if port else 'any free port'}"

    def _local_engine(self):
        backend = self.client.worker.backend
        return getattr(getattr(backend, "local", backend), "engine", None)

    def set_serving(self, on: bool) -> None:
        if on and self.server is None:
            self._start()
        elif not on and self.server is not None:
            self.stop()
        if self.action.isChecked() != (self.server is not None):
            self.action.setChecked(self.server is not None)

    def _start(self) -> None:
        from hearth.engine.paths import data_dir
        from hearth.engine.server import ChatService, HearthServer, PresetPrefixes
        engine = self._local_engine()
        if engine is None:
            self.problem.emit("Cannot serve Hearth: no local model is loaded. Choose one in the model picker first.")
            return
        presets = data_dir() / "presets.json"
        service = ChatService(engine, worker=EngineJobs(self.client, self._local_engine),
                              presets=PresetPrefixes(presets) if presets.is_file() else None)
        port = self.settings.get("server/port")
        try:
            server = HearthServer(service, HOST, port)
        except OSError as e:
            service.close()
            self.problem.emit(f"Cannot serve Hearth on {HOST}:{port}: {e.strerror or e}. Another program may "
                               "be using the port; change `server/port` in settings.ini.")
            return
        self.server, self.service, self._engine = server, service, engine
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="hearth-serve", daemon=True)
        self._thread.start()
        self.action.setText(f"Serve Hearth on {HOST}:{server.port}")
        self.statusLabel.setText(f"Serving {server.url}")
        self.statusLabel.setToolTip(f"Model {service.model_id}: GET {server.url}/models, "
                                    f"POST {server.url}/chat/completions")
        self.statusLabel.show()
        log.info("serving %s on %s", service.model_id, server.url)
        self.servingChanged.emit(server.url)

    def stop(self) -> None:
        server, service = self.server, self.service
        if server is None:
            return
        self.server = self.service = self._engine = None
        server.shutdown()
        server.server_close()
        service.close()
        self.statusLabel.hide()
        self.action.setText(self._label())
        if self.action.isChecked():
            self.action.setChecked(False)
        self.servingChanged.emit("")

    def on_model_ready(self, info: dict) -> None:
        """A new local model: serve that one (the model id in /v1/models changes)."""
        if self.server is not None and info.get("backend") != "remote" and self._local_engine() is not self._engine:
            self.stop()
            self.set_serving(True)
