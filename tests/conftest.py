"""Shared fixtures: the real default model, the reference data from llama.cpp, temp data dirs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# CI lays shared/ beside the clone; sessions have it at ../shared.
REFERENCE = Path(os.environ.get("HEARTH_REFERENCE", ROOT.parent / "shared" / "reference"))
# The compiled CPU kernels: one cache for the whole run and the processes it starts (the per-test
# HEARTH_CACHE_DIR below would make each process compile them again); inside build/, never the
# user's cache folder. engine.cpu keys it by its own sources, so an edit still recompiles.
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / "build" / "numba-cache"))


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    assert REFERENCE.is_dir(), f"reference data not found at {REFERENCE}"
    return REFERENCE


@pytest.fixture(scope="session")
def default_model_path():
    from hearth.engine.paths import default_model_path
    return default_model_path()


@pytest.fixture(scope="session")
def smollm2_reference(reference_dir):
    return json.loads((reference_dir / "smollm2" / "reference.json").read_text())


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """No test touches the user's real data or cache."""
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HEARTH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def small_tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs of that many bytes: a real disk that really fills (skips where
    mounting is not allowed)."""
    mounted = []

    def mount(size: int) -> Path:
        mnt = tmp_path / f"tmpfs{len(mounted)}"
        mnt.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def fill_disk():
    """fill_disk(folder) writes a file there until its file system is full and returns the file
    (delete it to free the space)."""
    return _fill_disk


def _fill_disk(folder: Path) -> Path:
    filler = folder / "filler.bin"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler
