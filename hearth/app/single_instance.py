"""One Hearth window per data folder: starting Hearth again brings the running window forward.

Two windows on one data folder would each rewrite presets.json from memory and each purge the
other's deleted chats, so the second start does not open a window: it tells the first one to come
forward and exits. The first to start holds a lock file in the data folder (QLockFile: a lock left
by a process that died is found stale and taken over) and listens on a local socket named after the
folder; a later start that cannot take the lock connects to that socket and sends "raise".

Signals:
    activated(): another start asked this one to come forward.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

CONNECT_TRIES = 20            # a first instance may hold the lock a moment before it listens
CONNECT_WAIT_MS = 100


def socket_name(data_dir: Path) -> str:
    """The same for every spelling of the folder, distinct per folder and per user."""
    digest = hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:16]
    return f"hearth-{os.getuid() if hasattr(os, 'getuid') else 0}-{digest}"


class SingleInstance(QObject):
    activated = Signal()

    def __init__(self, data_dir: Path, parent=None):
        super().__init__(parent)
        self.data_dir = Path(data_dir)
        self.name = socket_name(self.data_dir)
        self._lock: QLockFile | None = None
        self._server: QLocalServer | None = None

    def claim(self) -> bool:
        """True: this is the one instance (now listening). False: another runs; it was told to come
        forward (or could not be reached, which the caller may report)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock = QLockFile(str(self.data_dir / "hearth.lock"))
        lock.setStaleLockTime(0)          # stale only when its process is gone, however long it ran
        if lock.tryLock(0):
            self._lock = lock
            QLocalServer.removeServer(self.name)      # a socket file left by a crash
            self._server = QLocalServer(self)
            self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
            self._server.newConnection.connect(self._on_connection)
            if not self._server.listen(self.name):
                raise OSError(f"cannot listen on the local socket {self.name}: {self._server.errorString()}")
            return True
        if lock.error() == QLockFile.LockError.PermissionError and not self.wake_other():
            # A read-only data folder takes no lock file: the socket alone says whether another runs.
            self._server = QLocalServer(self)
            self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
            self._server.newConnection.connect(self._on_connection)
            return self._server.listen(self.name)
        self.wake_other()
        return False

    def wake_other(self) -> bool:
        """Ask the instance holding the lock to come forward; True when it was reached."""
        for _ in range(CONNECT_TRIES):
            sock = QLocalSocket()
            sock.connectToServer(self.name)
            if sock.waitForConnected(CONNECT_WAIT_MS):
                sock.write(b"raise\n")
                sock.waitForBytesWritten(1000)
                sock.disconnectFromServer()
                return True
        return False

    def release(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._lock is not None:
            self._lock.unlock()
            self._lock = None

    def _on_connection(self) -> None:
        while self._server is not None and self._server.hasPendingConnections():
            sock = self._server.nextPendingConnection()
            sock.readyRead.connect(lambda s=sock: self._on_ready(s))
            sock.disconnected.connect(sock.deleteLater)

    def _on_ready(self, sock: QLocalSocket) -> None:
        if bytes(sock.readAll().data()).startswith(b"raise"):
            self.activated.emit()
