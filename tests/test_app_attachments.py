"""app/chat/attachments.py against files that are not files: devices that never end (/dev/zero,
/dev/urandom), links to them, FIFOs with no writer, and files that grow past the cap. Each read
runs in a child process held to 1 GiB of memory and 60 s, so a read that does not stop fails the
test instead of taking the machine down."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from hearth.app.chat.attachments import AttachmentError, read_attachment
try:
    a = read_attachment(sys.argv[1])
    print("ATTACHED", a.size, len(a.text))
except AttachmentError as e:
    print("REFUSED", e)
"""


def attach_in_child(path: str) -> str:
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, timeout=60,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    except subprocess.TimeoutExpired:
        return "TIMEOUT"
    return (r.stdout.strip() or f"EXIT {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_as_not_a_regular_file(device):
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    out = attach_in_child(device)
    assert out.startswith("REFUSED") and "not a regular file" in out and "character device" in out, out


def test_a_link_to_a_device_is_refused(tmp_path):
    link = tmp_path / "notes.txt"
    link.symlink_to("/dev/zero")
    out = attach_in_child(str(link))
    assert out.startswith("REFUSED notes.txt") and "not a regular file" in out, out


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    out = attach_in_child(str(fifo))
    assert out.startswith("REFUSED pipe.txt") and "FIFO" in out, out


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "folder.txt").mkdir()
    out = attach_in_child(str(tmp_path / "folder.txt"))
    assert out.startswith("REFUSED folder.txt") and "directory" in out, out


def test_a_file_past_the_cap_is_refused_with_its_size(tmp_path, monkeypatch):
    from hearth.app.chat import attachments
    monkeypatch.setattr(attachments, "MAX_BYTES", 1000)
    big = tmp_path / "big.log"
    big.write_text("y" * 5000)
    with pytest.raises(attachments.AttachmentError, match="big.log is 4.9 KB: more text than any context holds"):
        attachments.read_attachment(big)


def test_a_proc_file_reporting_size_0_is_read_whole(tmp_path):
    """/proc files say 0 bytes and hold text: the read goes by what comes, up to the cap."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc here")
    from hearth.app.chat.attachments import read_attachment
    a = read_attachment("/proc/self/status")
    assert "Pid:" in a.text and a.size == len(a.text.encode())


def test_a_text_file_is_attached_as_before(tmp_path):
    p = tmp_path / "hello.py"
    p.write_text("print('hi')\n", encoding="utf-8")
    from hearth.app.chat.attachments import read_attachment
    a = read_attachment(p)
    assert (a.name, a.size, a.text) == ("hello.py", 12, "print('hi')\n")
