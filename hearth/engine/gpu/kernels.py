"""Compute pipelines built from the WGSL templates, cached per device.

Every kernel has the same binding scheme: binding 0 is its `Params` struct in a uniform buffer at a
dynamic offset (a model's parameter structs all live in one buffer, see plan.py), bindings 1.. are
storage buffers, read-only ("r") or read-write ("rw"). `fields` names the struct's words in order.
A kernel that declares the i-quant tables (quant.wgsl `iq_tab`, gpu/iq_grids.py) has them at binding
iq_grids.TABLE_BINDING too; Plan binds the device's table buffer there.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import EngineError
from .iq_grids import DECLARATION, TABLE_BINDING
from .plan import PARAM_BYTES, Plan
from .shaders import render

MAX_GROUPS = 65535


@dataclass
class Kernel:
    name: str
    pipeline: object
    layout: object
    access: tuple          # per storage binding: "r" or "rw"
    fields: tuple          # Params fields: (name, "u" | "f")
    tables: bool = False   # reads the i-quant tables at binding TABLE_BINDING


class Kernels:
    """Builds and caches pipelines from templates."""

    def __init__(self, dev):
        self.dev = dev
        self._cache: dict = {}

    def get(self, template: str, access, fields, **tpl) -> Kernel:
        key = (template, tuple(access), tuple(sorted(tpl.items(), key=lambda kv: kv[0])).__repr__())
        k = self._cache.get(key)
        if k is not None:
            return k
        wgpu, device = self.dev.wgpu, self.dev.device
        code = render(template, SUBGROUPS=self.dev.subgroups, **tpl)
        try:
            module = device.create_shader_module(code=code, label=template)
        except Exception as e:
            raise EngineError(f"shader {template} ({tpl}) does not compile: {e}") from e
        entries = [{"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True,
                               "min_binding_size": PARAM_BYTES}}]
        for i, a in enumerate(access):
            t = wgpu.BufferBindingType.read_only_storage if a == "r" else wgpu.BufferBindingType.storage
            entries.append({"binding": i + 1, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": t}})
        tables = DECLARATION in code
        if tables:
            entries.append({"binding": TABLE_BINDING, "visibility": wgpu.ShaderStage.COMPUTE,
                            "buffer": {"type": wgpu.BufferBindingType.read_only_storage}})
        bgl = device.create_bind_group_layout(entries=entries)
        pl = device.create_pipeline_layout(bind_group_layouts=[bgl])
        pipe = device.create_compute_pipeline(layout=pl, compute={"module": module, "entry_point": "main"},
                                              label=template)
        k = Kernel(template, pipe, bgl, tuple(access), tuple(fields), tables)
        self._cache[key] = k
        return k


def grid(n: int) -> tuple[int, int]:
    """n workgroups as a 2-D grid within the per-dimension limit (kernels linearize wid.x + wid.y * nwg.x)."""
    n = max(1, int(n))
    if n <= MAX_GROUPS:
        return n, 1
    gy = -(-n // MAX_GROUPS)
    return -(-n // gy), gy


def dispatch_once(dev, kernel: Kernel, buffers, groups, **params) -> None:
    """Run one kernel once (tests and one-off work): a one-op Plan, encoded, submitted, freed."""
    plan = Plan(dev, kernel.name)
    plan.add(kernel, buffers, tuple(groups), kernel.name, **params)
    plan.finalize()
    enc = dev.device.create_command_encoder()
    plan.encode(enc, 1, 1)
    dev.submit(enc)
    plan.destroy()
