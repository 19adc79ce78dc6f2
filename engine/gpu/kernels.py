"""Compute pipelines, their parameters, and recorded dispatches.

Every kernel has the same binding scheme: binding 0 is its `Params` struct in a uniform buffer at a
dynamic offset (all of a model's parameter structs live in one `ParamArena`, written once), bindings
1.. are storage buffers, read-only ("r") or read-write ("rw"). An `Op` is a pipeline, a bind group made
once, the parameter slot and the workgroup counts: encoding a forward pass is a loop over ops.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ..errors import EngineError
from .shaders import render

PARAM_BYTES = 64          # every Params struct is at most 16 words
MAX_GROUPS = 65535


@dataclass
class Kernel:
    name: str
    pipeline: object
    layout: object
    access: tuple          # per storage binding: "r" or "rw"
    fields: tuple          # Params fields: (name, "u" | "f")


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
        bgl = device.create_bind_group_layout(entries=entries)
        pl = device.create_pipeline_layout(bind_group_layouts=[bgl])
        pipe = device.create_compute_pipeline(layout=pl, compute={"module": module, "entry_point": "main"},
                                              label=template)
        k = Kernel(template, pipe, bgl, tuple(access), tuple(fields))
        self._cache[key] = k
        return k


class ParamArena:
    """All parameter structs of a model in one uniform buffer; each gets a slot at a dynamic offset."""

    def __init__(self, dev):
        self.dev = dev
        self.stride = dev.uniform_align
        self.slots: list[bytes] = []
        self.buffer = None

    def add(self, kernel: Kernel, **values) -> int:
        words = []
        for name, t in kernel.fields:
            v = values.pop(name, 0)
            words.append(struct.pack("<f" if t == "f" else "<I", float(v) if t == "f" else int(v)))
        if values:
            raise EngineError(f"{kernel.name}: unknown parameters {sorted(values)}")
        blob = b"".join(words).ljust(PARAM_BYTES, b"\0")
        self.slots.append(blob)
        return (len(self.slots) - 1) * self.stride

    def upload(self):
        n = max(1, len(self.slots))
        data = np.zeros(n * self.stride, np.uint8)
        for i, s in enumerate(self.slots):
            data[i * self.stride:i * self.stride + PARAM_BYTES] = np.frombuffer(s, np.uint8)
        wgpu = self.dev.wgpu
        if self.buffer is None or self.buffer.size < data.nbytes:
            if self.buffer is not None:
                self.buffer.destroy()
            self.buffer = self.dev.buffer(data.nbytes, "params", wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self.dev.queue.write_buffer(self.buffer, 0, data)


def grid(n: int) -> tuple[int, int]:
    """n workgroups as a 2-D grid within the per-dimension limit (kernels linearize wid.x + wid.y * nwg.x)."""
    n = max(1, int(n))
    if n <= MAX_GROUPS:
        return n, 1
    gy = -(-n // MAX_GROUPS)
    return -(-n // gy), gy


@dataclass
class Op:
    kernel: Kernel
    bind_group: object
    offset: int
    groups: tuple = (1, 1, 1)
    label: str = ""
    extra: dict = field(default_factory=dict)


def make_op(dev, arena: ParamArena, kernel: Kernel, buffers, groups, label="", **params) -> Op:
    if len(buffers) != len(kernel.access):
        raise EngineError(f"{kernel.name}: {len(buffers)} buffers for {len(kernel.access)} bindings")
    off = arena.add(kernel, **params)
    # The arena's buffer may not exist yet: bind groups are made in `finalize_ops` after upload.
    return Op(kernel, None, off, tuple(groups) + (1,) * (3 - len(groups)), label, {"buffers": list(buffers)})


def finalize_ops(dev, arena: ParamArena, ops) -> None:
    """Upload the parameters and make every op's bind group (once)."""
    arena.upload()
    cache = {}
    for op in ops:
        if op.bind_group is not None:
            continue
        key = (id(op.kernel.layout), tuple(id(b) for b in op.extra["buffers"]))
        bg = cache.get(key)
        if bg is None:
            entries = [{"binding": 0, "resource": {"buffer": arena.buffer, "offset": 0, "size": PARAM_BYTES}}]
            for i, b in enumerate(op.extra["buffers"]):
                entries.append({"binding": i + 1, "resource": {"buffer": b, "offset": 0, "size": b.size}})
            bg = dev.device.create_bind_group(layout=op.kernel.layout, entries=entries)
            cache[key] = bg
        op.bind_group = bg


def encode(encoder, ops, groups_override=None) -> int:
    """Record `ops` in one compute pass; returns the number of dispatches."""
    cp = encoder.begin_compute_pass()
    last = None
    n = 0
    for i, op in enumerate(ops):
        g = op.groups if groups_override is None else groups_override(i, op)
        if g is None:
            continue
        if op.kernel.pipeline is not last:
            cp.set_pipeline(op.kernel.pipeline)
            last = op.kernel.pipeline
        cp.set_bind_group(0, op.bind_group, [op.offset])
        cp.dispatch_workgroups(*g)
        n += 1
    cp.end()
    return n


def dispatch_once(dev, kernel: Kernel, buffers, groups, **params) -> None:
    """Run one kernel once (tests and one-off work): its own parameter slot, bind group and submit."""
    arena = ParamArena(dev)
    op = make_op(dev, arena, kernel, buffers, groups, **params)
    finalize_ops(dev, arena, [op])
    enc = dev.device.create_command_encoder()
    encode(enc, [op])
    dev.submit(enc)
    arena.buffer.destroy()
