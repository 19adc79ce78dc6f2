"""Adapter choice, the device, buffers and readback: everything that talks to wgpu directly.

`select_adapter()` prefers a real GPU (discrete, then integrated) over a CPU rasterizer such as
lavapipe ("llvmpipe"); `HEARTH_GPU_ADAPTER=<substring>` picks by name (tests use "llvmpipe" to say
"the software adapter, explicitly"). wgpu errors become EngineError with a message saying what failed.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import EngineError

BU = None  # wgpu.BufferUsage, set on import of wgpu


def _wgpu():
    global BU
    try:
        import wgpu  # noqa: PLC0415  (optional at import time: the CPU engine must not need it)
    except Exception as e:  # ImportError, or a broken native library
        raise EngineError(f"the GPU backend needs the wgpu package, which cannot be loaded ({e})") from e
    BU = wgpu.BufferUsage
    return wgpu


def _kind_rank(info: dict) -> int:
    t = str(info.get("adapter_type", "")).lower()
    name = (str(info.get("device", "")) + " " + str(info.get("vendor", ""))).lower()
    if "cpu" in t or "llvmpipe" in name or "swiftshader" in name or "lavapipe" in name:
        return 0
    if "discrete" in t:
        return 3
    if "integrated" in t:
        return 2
    return 1


def _adapters():
    wgpu = _wgpu()
    try:
        ads = wgpu.gpu.enumerate_adapters_sync()
    except Exception as e:
        raise EngineError(f"no GPU adapter could be listed ({e})") from e
    # Compute needs Vulkan, Metal or D3D12; the GL backend lacks storage buffers in compute on many drivers.
    return [a for a in ads if str(a.info.get("backend_type", "")).lower() != "opengl"]


def select_adapter(prefer: str | None = None):
    """The adapter to use, or None when there is none. `prefer` (or HEARTH_GPU_ADAPTER) is a substring
    of the adapter's device or vendor name that must match."""
    prefer = prefer if prefer is not None else os.environ.get("HEARTH_GPU_ADAPTER")
    ads = _adapters()
    if prefer:
        ads = [a for a in ads if prefer.lower() in (a.info.get("device", "") + " " + a.info.get("vendor", "")).lower()]
    if not ads:
        return None
    return max(ads, key=lambda a: _kind_rank(a.info))


def is_software_adapter(info: dict) -> bool:
    """A CPU rasterizer (lavapipe/llvmpipe, SwiftShader): `info` is an adapter's info or description
    (adapter_type, device, vendor). Such an adapter runs the GPU backend on the CPU, slower than the
    CPU backend, so backend="auto" never takes it."""
    return _kind_rank(info) == 0


def adapter_description(adapter) -> dict:
    info = adapter.info
    return {"vendor": info.get("vendor", ""), "device": info.get("device", ""),
            "driver": info.get("description", ""), "backend_type": info.get("backend_type", ""),
            "adapter_type": info.get("adapter_type", ""), "is_cpu": is_software_adapter(info)}


def probe() -> dict | None:
    """The best adapter as a dict (vendor, device, driver, backend_type, adapter_type, is_cpu, real_gpu),
    or None when wgpu is missing or finds no adapter. Never raises: backend='auto' asks this."""
    try:
        a = select_adapter()
    except Exception:
        return None
    if a is None:
        return None
    d = adapter_description(a)
    d["real_gpu"] = not d["is_cpu"]
    return d


_INT8_PROBE = """
@group(0) @binding(0) var<storage, read_write> o: array<i32>;
@compute @workgroup_size(1) fn main() { o[0] = dot4I8Packed(u32(o[1]), u32(o[2])) + i32(pack4xI8(vec4<i32>(o[3]))); }
"""


class Device:
    """A wgpu device with the limits a model needs, and helpers for buffers and readback."""

    def __init__(self, adapter=None, need_storage_binding: int = 0):
        wgpu = _wgpu()
        self.wgpu = wgpu
        self.adapter = adapter if adapter is not None else select_adapter()
        if self.adapter is None:
            raise EngineError("no GPU adapter found (wgpu sees no Vulkan, Metal or D3D12 device)")
        al = self.adapter.limits
        if need_storage_binding > al["max-storage-buffer-binding-size"]:
            raise EngineError(
                f"the GPU {self.adapter.info.get('device')} binds at most "
                f"{al['max-storage-buffer-binding-size'] >> 20} MiB per buffer; this model needs "
                f"{need_storage_binding >> 20} MiB for one tensor")
        want = {k: al[k] for k in ("max-storage-buffer-binding-size", "max-buffer-size",
                                   "max-storage-buffers-per-shader-stage", "max-compute-workgroup-storage-size",
                                   "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
                                   "max-dynamic-uniform-buffers-per-pipeline-layout")}
        # Subgroup shuffles replace most workgroup barriers in the reductions (HEARTH_GPU_SUBGROUPS=0: off).
        self.subgroups = ("subgroup" in self.adapter.features and os.environ.get("HEARTH_GPU_SUBGROUPS", "1") != "0")
        # Half precision in shaders (the f16 prefill product, matmul16.wgsl); whether the backend uses
        # it is the backend's choice (GpuBackend f16).
        self.f16 = "shader-f16" in self.adapter.features
        feats = (["subgroup"] if self.subgroups else []) + (["shader-f16"] if self.f16 else [])
        try:
            self.device = self.adapter.request_device_sync(
                required_features=feats, required_limits=want, label="hearth")
        except Exception as e:
            raise EngineError(f"could not open the GPU {self.adapter.info.get('device')}: {e}") from e
        self.queue = self.device.queue
        self.limits = dict(self.device.limits)
        self.uniform_align = max(int(self.limits["min-uniform-buffer-offset-alignment"]), 64)
        self.storage_align = int(self.limits["min-storage-buffer-offset-alignment"])
        self._lost = False
        self._staging = None
        self._iq_tables = None
        self.info = adapter_description(self.adapter)
        # 4-way int8 dot products (WGSL packed_4x8_integer_dot_product) for the int8-x decode matvec;
        # HEARTH_GPU_INT8=0 turns them off, =1 forces them on a CPU rasterizer too (off there by default,
        # see GpuBackend).
        self.int8 = os.environ.get("HEARTH_GPU_INT8", "") != "0" and self._compiles(_INT8_PROBE)

    def _compiles(self, code: str) -> bool:
        try:
            self.device.create_shader_module(code=code, label="probe")
            return True
        except Exception:
            return False

    # --- buffers -----------------------------------------------------------------------------
    def buffer(self, size: int, label: str = "", usage=None):
        u = usage if usage is not None else (BU.STORAGE | BU.COPY_DST | BU.COPY_SRC)
        size = max(16, -(-int(size) // 16) * 16)
        try:
            return self.device.create_buffer(size=size, usage=u, label=label)
        except Exception as e:
            raise EngineError(f"GPU out of memory or refused a {size >> 20} MiB buffer ({label}): {e}") from e

    def upload(self, data, label: str = "", pad: int = 4, usage=None):
        """A storage buffer holding `data`'s bytes, followed by `pad` zero bytes (so kernels may read
        one u32 past an unaligned end)."""
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        buf = self.buffer(raw.nbytes + pad, label, usage)
        n4 = raw.nbytes // 4 * 4
        if n4:
            self.queue.write_buffer(buf, 0, raw[:n4])
        if raw.nbytes != n4:  # write_buffer needs a multiple of 4 bytes
            tail = np.zeros(4, np.uint8)
            tail[:raw.nbytes - n4] = raw[n4:]
            self.queue.write_buffer(buf, n4, tail)
        return buf

    def iq_tables(self):
        """The i-quant lookup tables (gpu/iq_grids.py), uploaded on first use, one buffer per device."""
        if self._iq_tables is None:
            from .iq_grids import layout  # noqa: PLC0415
            self._iq_tables = self.upload(layout()[0], "iq_tables")
        return self._iq_tables

    def staging(self, size: int):
        """One persistent MAP_READ buffer, grown (never shrunk) to `size` bytes."""
        if self._staging is None or self._staging.size < size:
            if self._staging is not None:
                self._staging.destroy()
            self._staging = self.buffer(max(size, 1 << 16), "staging", BU.MAP_READ | BU.COPY_DST)
        return self._staging

    def read(self, copies, encoder=None) -> np.ndarray:
        """Copy [(buffer, offset, size), ...] one after another into the staging buffer, submit (with
        `encoder`'s work first, when given), map once, and return the bytes as uint8."""
        total = sum(c[2] for c in copies)
        st = self.staging(total)
        enc = encoder if encoder is not None else self.device.create_command_encoder()
        o = 0
        for buf, off, size in copies:
            enc.copy_buffer_to_buffer(buf, off, st, o, size)
            o += size
        self.submit(enc)
        try:
            st.map_sync(self.wgpu.MapMode.READ, 0, total)
            # one copy out of the mapped range (read_mapped(copy=True) would make the same one)
            out = np.frombuffer(st.read_mapped(0, total, copy=False), np.uint8).copy()
            st.unmap()
        except Exception as e:
            raise EngineError(f"reading back from the GPU failed (device lost?): {e}") from e
        return out

    def submit(self, encoder) -> None:
        try:
            self.queue.submit([encoder.finish()])
        except Exception as e:
            raise EngineError(f"the GPU refused the work (device lost or out of memory?): {e}") from e

    def destroy(self) -> None:
        if self._staging is not None:
            self._staging.destroy()
            self._staging = None
        if self._iq_tables is not None:
            self._iq_tables.destroy()
            self._iq_tables = None
        try:
            self.device.destroy()
        except Exception:
            pass
