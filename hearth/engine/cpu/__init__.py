"""Compiled CPU kernels for quantized weights (numba, explicit LLVM vector IR).

Layers: `simd` (vector values and operations as LLVM IR), `blocks` / `blocks_int8` (one GGML
block: its dot product with float32 / 8-bit x, and its float32 values), `kernels` / `kernels_int8`
(whole rows, on all threads), `linear` (the matrices a model multiplies by, straight from the
memory-mapped file), `tiles_int8` / `gemm_int8` (K-quant rows as int8 tiles times many rows of
8-bit x), `simd_vnni` / `tiles_vnni` / `gemm_vnni` (every quantized type's rows interleaved for
vpdpbusd times many rows of 8-bit x: the batch path where the CPU has VNNI), `rows` (a one-token
pass's RMSNorm, RoPE and SiLU x up), `softmax`,
`attention` (one-token attention over the KV cache read in place), `decode_layer` (a decoded
token's layers as one compiled call: norms, products, RoPE, K/V store, attention, FFN).

Compiled code is cached under the user cache folder (engine.paths.cache_dir()/numba/<key>, or
$NUMBA_CACHE_DIR/<key>), keyed by a hash of this package's sources, numba's version and
HEARTH_CPU_SIMD (generic: no x86-specific instructions, engine.cpu.simd): numba itself
only notices edits of the file that holds the cached function, not of the intrinsics it inlines
from other files.
This module must be imported before numba is (it sets numba's environment).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _cache_key() -> str:
    h = hashlib.blake2b(digest_size=8)
    for p in sorted(_HERE.glob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    h.update(os.environ.get("HEARTH_CPU_SIMD", "").encode())   # the instruction choice of simd.py
    tables = _HERE.parent / "quants" / "tables.npz"   # the i-quant tables kernels_iq compiles in as constants
    if tables.is_file():
        h.update(tables.read_bytes())
    try:
        import importlib.metadata as md  # noqa: PLC0415
        h.update(md.version("numba").encode())
    except Exception:  # noqa: BLE001  (a frozen app without metadata: the sources still key it)
        pass
    return h.hexdigest()


def _configure() -> None:
    from ..paths import cache_dir  # noqa: PLC0415
    key = _cache_key()
    base = os.environ.get("NUMBA_CACHE_DIR")  # a folder chosen from outside (tests) is keyed too
    d = Path(base) if base else cache_dir() / "numba"
    if d.name != key:
        d = d / key
    try:
        d.mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(d)
    except OSError:  # no writable cache folder: numba compiles in memory at every start
        os.environ.pop("NUMBA_CACHE_DIR", None)
    # OpenMP first: a parallel launch costs ~1.5 us there against ~60 us on numba's own
    # workqueue pool (measured, 2 threads), and decode launches ~200 products per token on small
    # models. The workqueue stays the fallback where there is no OpenMP runtime (it takes one
    # launch at a time: engine.cpu.linear serializes them).
    os.environ.setdefault("NUMBA_THREADING_LAYER_PRIORITY", "omp tbb workqueue")
    numba = sys.modules.get("numba")
    if numba is not None:
        # numba was imported first and has read its environment already: set its config directly,
        # or it caches beside these sources, where edits of the files a kernel inlines go unnoticed
        # (measured: a stale Q4_K kernel at a third of the current one's speed).
        if "NUMBA_CACHE_DIR" in os.environ:
            numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
        numba.config.THREADING_LAYER_PRIORITY = os.environ["NUMBA_THREADING_LAYER_PRIORITY"].split()


_configure()
