"""How much memory a model needs, how much the machine has, and whether it fits.

The one owner of the rule: the engine refuses a load that does not fit (`check`, called by
Engine.load before anything large is touched) and the app's model picker shows the same verdict
(`verdict`). Parts of an estimate, in bytes:
    weights   the tensors as the CPU backend keeps them: the file's blocks (memory-mapped; the
              pages a forward pass reads stay resident) plus float32 copies of the few types the
              kernels do not cover (engine.models.weights.Dense); gpt-oss's experts repacked in
              groups of 8 rows replace their mapped pages, both resident for one tensor at a time
              (engine.models.moe.x8_extra_bytes)
    kv        the KV cache at n_ctx (K and V for every layer, float32 or float16: `kv_dtype`)
    scratch   a prefill chunk's activations and attention scores, the logits, dequantized tiles
    runtime   the interpreter, numpy, numba and its compiled kernels, the tokenizer
"""

from __future__ import annotations

import ctypes
import os
import sys

from .errors import EngineError

GB = 1e9
RUNTIME_BYTES = 300 * 2**20   # measured: ~140 MiB after import and the first kernels, x2 margin
CHUNK = 512                   # prefill rows per chunk (engine.cpu_backend.DEFAULT_CHUNK)
TIGHT = 0.8                   # above this share of the available memory a model is "tight"


class NotEnoughMemoryError(EngineError):
    """The model would not fit in the memory available; nothing was loaded."""

    def __init__(self, message: str, needed: int, available: int):
        super().__init__(message)
        self.needed, self.available = needed, available


def kv_part(n_layer: int, n_head_kv: int, head_dim: int, head_dim_v: int | None, n_ctx: int,
            kv_dtype: str = "f32") -> int:
    """The `kv` part of an estimate: K and V at n_ctx for every layer, of the cache's dtype (the cache
    keeps one head size for K and V, the larger). The model library's figures come from here too."""
    from .kv_cache import kv_bytes  # noqa: PLC0415
    return kv_bytes(n_layer, n_head_kv, max(head_dim, head_dim_v or head_dim), n_ctx, kv_dtype)


def estimate(g, cfg, n_ctx: int, backend: str = "cpu", kv_dtype: str = "f32") -> dict[str, int]:
    """Bytes needed by part (weights, kv, scratch, runtime) for GGUF `g` with config `cfg`."""
    from .cpu.linear import KERNEL_TYPES  # noqa: PLC0415  (the types used straight from the file)
    weights = 0
    for t in g.tensors.values():
        weights += t.n_bytes
        matrix = len(t.shape) == 2 and t.name != "token_embd.weight"
        if matrix and (t.type.name not in KERNEL_TYPES or t.shape[0] % 32):
            weights += 4 * t.n_elements     # dequantized to float32
    if backend == "cpu":   # gpt-oss's experts repacked at load (models/moe.py)
        from .models.moe import x8_extra_bytes  # noqa: PLC0415
        weights += x8_extra_bytes(g, cfg)
    kv = kv_part(cfg.n_layer, cfg.n_head_kv, cfg.head_dim, cfg.head_dim_v, n_ctx, kv_dtype)
    rows = min(CHUNK, n_ctx)
    width = max(2 * cfg.n_ff, (cfg.n_head + 2 * cfg.n_head_kv) * cfg.head_dim)
    scores = cfg.n_head * 128 * min(n_ctx, cfg.sliding_window or n_ctx) * 4
    scratch = 4 * rows * (4 * cfg.n_embd + 2 * width) + scores + 4 * cfg.n_vocab * 2 + 4 * 2**20 * (os.cpu_count() or 1)
    if backend == "gpu":  # weights and cache live in GPU memory; the host keeps the mapped file
        kv = 0
    return {"weights": weights, "kv": kv, "scratch": scratch, "runtime": RUNTIME_BYTES}


def available_bytes() -> int | None:
    """Memory the OS can give a new process now (Linux MemAvailable, Windows ullAvailPhys,
    elsewhere free pages); None when it cannot be asked."""
    try:
        if sys.platform.startswith("linux"):
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        if sys.platform == "win32":
            class Status(ctypes.Structure):
                _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                            ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                            ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                            ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                            ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]
            s = Status()
            s.dwLength = ctypes.sizeof(Status)
            if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(s)):
                return int(s.ullAvailPhys)
            return None
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def verdict(needed: int, available: int | None) -> str:
    """"fits", "tight" or "won't fit" (unknown availability: "fits")."""
    if available is None or needed <= TIGHT * available:
        return "fits"
    return "tight" if needed <= available else "won't fit"


def _gb(n: int) -> str:
    return f"{n / GB:.1f} GB"


def check(g, cfg, n_ctx: int, backend: str = "cpu", available: int | None = None,
          kv_dtype: str = "f32") -> dict[str, int]:
    """Raise NotEnoughMemoryError when the model will not fit; returns the estimate otherwise."""
    parts = estimate(g, cfg, n_ctx, backend, kv_dtype)
    needed = sum(parts.values())
    avail = available_bytes() if available is None else available
    if avail is not None and verdict(needed, avail) == "won't fit":
        hint = "pick a smaller quantization or model"
        if parts["kv"] > 0.25 * needed:
            hint += f", or a smaller context (n_ctx {n_ctx} takes {_gb(parts['kv'])} of it)"
            if kv_dtype == "f32":
                hint += ", or a float16 KV cache (half of that)"
        raise NotEnoughMemoryError(f"{g.path.name} needs {_gb(needed)}, {_gb(avail)} available: {hint}",
                                   needed, avail)
    return parts
