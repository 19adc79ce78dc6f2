"""An MCP server's stderr as a capped, rotated log file: `mcp-<name>.log`, and the one before it as
`mcp-<name>.log.1`, each at most LOG_CAP_BYTES, so a server that writes without end (or is started
again and again) holds at most twice that on disk.

The server writes into a pipe, never into the file itself (a file it held could grow past any cap);
a thread copies what comes into the log, rotating at the cap, and ends when every holder of the
pipe's write end has closed it (the server and its children gone, and `close_ours()` called).

    log = StderrLog(path)
    spawn(..., stderr=log.child_end)      # the file object the SDK passes on to the process
    log.close_ours()                      # once spawned (or failed to spawn)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

LOG_CAP_BYTES = 1 << 20
READ_BYTES = 64 * 1024


class StderrLog:
    def __init__(self, path: str | Path, cap: int = LOG_CAP_BYTES):
        self.path, self.cap = Path(path), cap
        self.path.parent.mkdir(parents=True, exist_ok=True)
        r, w = os.pipe()
        self.child_end = os.fdopen(w, "w")
        self._thread = threading.Thread(target=self._copy, args=(r,), name=f"stderr {self.path.name}", daemon=True)
        self._thread.start()

    def close_ours(self) -> None:
        if not self.child_end.closed:
            self.child_end.close()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the copy to end (every writer gone); whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _copy(self, r: int) -> None:
        out = None
        try:
            out = open(self.path, "ab")
            size = out.tell()
            while chunk := os.read(r, READ_BYTES):
                chunk = chunk[-self.cap:]
                if size + len(chunk) > self.cap:
                    out.close()
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                    out, size = open(self.path, "wb"), 0
                out.write(chunk)
                out.flush()
                size += len(chunk)
        except OSError:
            while os.read(r, READ_BYTES):        # a log that cannot be written: the server must not block
                pass
        finally:
            os.close(r)
            if out is not None:
                out.close()
