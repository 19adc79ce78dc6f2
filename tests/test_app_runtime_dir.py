"""XDG_RUNTIME_DIR: a private one where the environment's is missing or unusable, so neither Qt nor
the GPU adapters' probing complains at start."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hearth.app.runtime_dir import ensure_runtime_dir

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="XDG_RUNTIME_DIR is a POSIX matter")


def private(path: str) -> bool:
    st = os.stat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def test_a_usable_runtime_dir_is_kept(tmp_path):
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(d)}
    assert ensure_runtime_dir(env) is None and env["XDG_RUNTIME_DIR"] == str(d)


@pytest.mark.parametrize("case", ["unset", "missing", "a file", "loose permissions"])
def test_a_missing_or_unusable_runtime_dir_is_replaced_by_a_private_one(tmp_path, case):
    bad = tmp_path / "run"
    if case == "a file":
        bad.write_text("")
    elif case == "loose permissions":
        bad.mkdir(mode=0o755)
        bad.chmod(0o755)
    env = {} if case == "unset" else {"XDG_RUNTIME_DIR": str(bad)}
    made = ensure_runtime_dir(env)
    assert made and env["XDG_RUNTIME_DIR"] == made != str(bad) and private(made)


def test_starting_qt_and_listing_gpu_adapters_prints_no_runtime_dir_error():
    code = ("from hearth.app.main import ensure_runtime_dir; ensure_runtime_dir(); "
            "from PySide6.QtWidgets import QApplication; app = QApplication([]); "
            "import wgpu; wgpu.gpu.enumerate_adapters_sync()")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env.update(QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "XDG_RUNTIME_DIR" not in r.stderr, r.stderr
