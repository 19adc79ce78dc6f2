"""app/single_instance.py: a second Hearth on the same data folder (a real second process) brings the
first forward and does not start; a lock left by a killed process does not block the next start."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from app_fixtures import wait_until

from hearth.app.single_instance import SingleInstance, socket_name

ROOT = Path(__file__).resolve().parent.parent
SECOND = textwrap.dedent("""
    import sys, time
    from PySide6.QtCore import QCoreApplication
    from hearth.app.single_instance import SingleInstance
    app = QCoreApplication([])
    guard = SingleInstance(sys.argv[1])
    print("first" if guard.claim() else "second", flush=True)
    if sys.argv[2] == "hold":
        time.sleep(600)
""")


def start(data: Path, mode: str = "exit") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SECOND, str(data), mode], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, env={"PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "PATH": ""})


def test_a_second_start_brings_the_first_forward_and_exits(qapp, tmp_path):
    first = SingleInstance(tmp_path / "data")
    try:
        assert first.claim()
        raised = []
        first.activated.connect(lambda: raised.append(True))
        second = start(tmp_path / "data")
        wait_until(lambda: second.poll() is not None, 30)
        assert second.stdout.read().strip() == "second"
        wait_until(lambda: raised, 10)
        other_folder = start(tmp_path / "elsewhere")       # another data folder is another instance
        assert other_folder.communicate(timeout=30)[0].strip() == "first"
    finally:
        first.release()


def test_after_the_first_quits_the_next_start_is_the_first(qapp, tmp_path):
    first = SingleInstance(tmp_path / "data")
    assert first.claim()
    first.release()
    assert start(tmp_path / "data").communicate(timeout=30)[0].strip() == "first"


def test_a_lock_left_by_a_killed_process_is_taken_over(qapp, tmp_path):
    holder = start(tmp_path / "data", "hold")
    try:
        assert holder.stdout.readline().strip() == "first"
    finally:
        holder.kill()
        holder.wait(10)
    assert (tmp_path / "data" / "hearth.lock").exists()       # left behind, with a dead owner
    guard = SingleInstance(tmp_path / "data")
    try:
        assert guard.claim()
    finally:
        guard.release()


def test_the_socket_name_is_per_folder_not_per_spelling(tmp_path):
    (tmp_path / "d").mkdir()
    assert socket_name(tmp_path / "d") == socket_name(tmp_path / "x" / ".." / "d")
    assert socket_name(tmp_path / "d") != socket_name(tmp_path / "e")


def test_starting_hearth_twice_brings_the_first_window_forward(tmp_path):
    """`python -m hearth` twice on one data folder: the second exits at once, the first comes forward."""
    import os
    import signal
    import time
    env = {**os.environ, "HEARTH_DATA_DIR": str(tmp_path / "data"), "HEARTH_CACHE_DIR": str(tmp_path / "cache"),
           "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([sys.executable, "-m", "hearth.app"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "data" / "hearth.lock").exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first Hearth did not start"
            time.sleep(0.1)
        second = subprocess.run([sys.executable, "-m", "hearth.app"], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 0 and "already running" in second.stderr and "brought forward" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            _, err = first.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            first.kill()
            _, err = first.communicate()
    assert "Hearth was started again: bringing the window forward" in err
