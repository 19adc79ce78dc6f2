"""What built this engine and what machine it runs on: two short hashes that go into prefix-image keys.

A prefix image holds K/V values computed by one engine on one machine. Another engine version, another
numpy, or another CPU can round differently, so an image is only valid where it was made. Two inputs:

- `engine_build_hash()`: a hash of the engine's own sources (`engine/**/*.py`, `engine/wgsl/*.wgsl`)
  and of the exact versions of Python, numpy, numba and llvmlite (which compile the CPU kernels), wgpu
  and tokenizers it runs with.
- `machine_fingerprint()`: the CPU architecture, vendor, family/model and feature flags (numpy's
  kernels and OpenBLAS's runtime-dispatched kernels differ by CPU), and numpy's BLAS configuration,
  including the kernel OpenBLAS picked at run time when it can be asked.

Both are computed once per process (a few milliseconds) and cached. Tests change the *inputs*
(`package_versions`, `machine_inputs`) and call `clear_caches()` to simulate another build or machine.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import json
import platform
import re
import sys
from pathlib import Path

import numpy as np

ENGINE_DIR = Path(__file__).resolve().parent
PACKAGES = ("numpy", "numba", "llvmlite", "wgpu", "tokenizers")


def source_files(root: Path = ENGINE_DIR) -> list[Path]:
    """The files whose bytes define the engine's arithmetic, in a stable order."""
    files = [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    files += list((root / "wgsl").glob("*.wgsl"))
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def hash_sources(root: Path = ENGINE_DIR) -> str:
    """blake2b of every source file's relative path and bytes (length-prefixed, so no two file sets
    can produce the same byte stream)."""
    h = hashlib.blake2b(digest_size=32, person=b"hearth-src")
    for p in source_files(root):
        rel = p.relative_to(root).as_posix().encode()
        data = p.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def package_versions() -> dict[str, str]:
    """Exact versions of the interpreter and the packages whose code runs inside the engine."""
    out = {"python": f"{platform.python_implementation()} {sys.version}"}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    out["numpy.runtime"] = np.__version__  # the one actually imported, in case metadata disagrees
    return out


def build_inputs() -> dict[str, str]:
    return {"sources": hash_sources(), **package_versions()}


def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of /proc/cpuinfo that identify its instruction set and model."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return {}
    wanted = {"vendor_id", "cpu family", "model", "flags",  # x86
              "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "Features"}  # ARM
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break  # end of the first processor's block
            continue
        key, _, value = line.partition(":")
        key = key.strip()
        if key in wanted and key not in out:
            value = value.strip()
            if key in ("flags", "Features"):
                value = " ".join(sorted(value.split()))
            out[key] = value
    return out


def _openblas_runtime() -> dict[str, str]:
    """The OpenBLAS kernel chosen at run time (DYNAMIC_ARCH builds pick per CPU), if reachable."""
    out: dict[str, str] = {}
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return out
    for lib_path in sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps))):
        try:
            lib = ctypes.CDLL(lib_path)
        except OSError:
            continue
        for sym in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                    "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                out[Path(lib_path).name] = (fn() or b"").decode(errors="replace")
                break
    return out


def _numpy_config() -> dict:
    try:
        cfg = np.show_config(mode="dicts")
    except Exception:  # noqa: BLE001  (older numpy: no dict mode; the version is hashed anyway)
        return {}
    deps = cfg.get("Build Dependencies", {})
    blas = {k: {f: v.get(f) for f in ("name", "version", "openblas configuration")}
            for k, v in deps.items() if isinstance(v, dict)}
    return {"blas": blas, "simd": cfg.get("SIMD Extensions", {})}


def machine_inputs() -> dict:
    return {"machine": platform.machine(), "system": platform.system(), "cpu": _cpuinfo(),
            "numpy": _numpy_config(), "openblas_core": _openblas_runtime()}


def _digest(obj: object, person: bytes) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.blake2b(blob, digest_size=32, person=person).hexdigest()


# Computed once per process. Tests simulating another build or machine change the inputs, call
# clear_caches(), and afterwards put the saved values back (`saved = dict(_cache)`), so that images
# written earlier in the session keep their keys even if the sources changed on disk meanwhile.
_cache: dict[str, str] = {}


def engine_build_hash() -> str:
    """Hash of the engine's sources and the exact versions of what it runs on (64 hex digits)."""
    h = _cache.get("build")
    if h is None:
        h = _cache["build"] = _digest(build_inputs(), b"hearth-build")
    return h


def machine_fingerprint() -> str:
    """Hash of the CPU (architecture, model, features) and numpy's BLAS (64 hex digits)."""
    h = _cache.get("machine")
    if h is None:
        h = _cache["machine"] = _digest(machine_inputs(), b"hearth-machine")
    return h


def clear_caches() -> None:
    _cache.clear()
