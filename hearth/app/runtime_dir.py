"""A valid XDG_RUNTIME_DIR before Qt and the GPU adapters start. Qt-free.

Qt warns when the variable is unset or wrong ("QStandardPaths: XDG_RUNTIME_DIR not set…"), and
Vulkan's Wayland probing while wgpu lists adapters prints "error: XDG_RUNTIME_DIR is invalid or
not set in the environment." at every start. Where the session gives none that is usable (a
container, ssh, Xvfb), the app makes its own private one, as the XDG spec asks: owned by the user,
mode 0700.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def _usable(path: str | os.PathLike) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def ensure_runtime_dir(env=os.environ) -> str | None:
    """Set `env["XDG_RUNTIME_DIR"]` to a private folder if the one there is missing or unusable.
    Returns the folder it set, or None when the environment's was kept (or the platform has none)."""
    if not hasattr(os, "getuid"):
        return None
    if env.get("XDG_RUNTIME_DIR") and _usable(env["XDG_RUNTIME_DIR"]):
        return None
    path = Path(tempfile.gettempdir()) / f"hearth-runtime-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        pass
    if not _usable(path):     # someone else's, or loose permissions: a fresh one (mkdtemp makes it 0700)
        path = Path(tempfile.mkdtemp(prefix="hearth-runtime-"))
    env["XDG_RUNTIME_DIR"] = str(path)
    return str(path)
