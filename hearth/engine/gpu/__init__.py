"""The GPU backend: the whole forward pass in WGSL compute shaders through wgpu.

`probe()` says whether a GPU adapter exists and whether it is a real (non-CPU) one, for backend="auto".
`GpuBackend` implements the Backend interface of engine/DESIGN.md. Importing this package does not
import wgpu; creating a backend does.
"""

from __future__ import annotations

from .device import is_software_adapter, probe, select_adapter

__all__ = ["is_software_adapter", "probe", "select_adapter", "GpuBackend", "backend_class"]


def backend_class(cfg):
    """The GPU backend class for a model: GpuHybridBackend for a recurrent hybrid (qwen35),
    Gemma4GpuBackend for gemma4, else GpuBackend (`GpuBackend(cfg, ...)` asks here too)."""
    if cfg.recurrent:
        from .hybrid import GpuHybridBackend  # noqa: PLC0415
        return GpuHybridBackend
    if cfg.arch == "gemma4":
        from .gemma4 import Gemma4GpuBackend  # noqa: PLC0415
        return Gemma4GpuBackend
    from .backend import GpuBackend  # noqa: PLC0415
    return GpuBackend


def __getattr__(name):
    if name == "GpuBackend":
        from .backend import GpuBackend  # noqa: PLC0415
        return GpuBackend
    raise AttributeError(name)
