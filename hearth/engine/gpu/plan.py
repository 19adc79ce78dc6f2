"""A recorded sequence of dispatches (a `Plan`) whose parameters and workgroup counts may depend on
the call: n (tokens in this call) and kv_len (positions attended after it).

Static values are plain numbers; call-dependent ones are functions `f(n, kv_len)`. The parameter
structs live in one uniform buffer (one slot per op, dynamic offsets); bind groups are made once.
On a call, only slots whose values changed are rewritten (for decode: none, so a token costs one
write of the step buffer, one command encoder and one dispatch per op). An op whose workgroup count
comes out 0 for a call is not dispatched (a plan may hold variants that the context length picks).
"""

from __future__ import annotations

import struct

import numpy as np

from ..errors import EngineError
from .iq_grids import TABLE_BINDING

PARAM_BYTES = 64          # every Params struct is at most 16 words


class Plan:
    def __init__(self, dev, label: str):
        self.dev = dev
        self.label = label
        self.stride = dev.uniform_align
        self.ops: list[dict] = []
        self.buffer = None
        self._bytes = None
        self._key = None
        self._encoded = []

    def add(self, kernel, buffers, groups, label: str = "", **params) -> None:
        """`kernel`: a kernels.Kernel; `groups` and any parameter: a value or a function f(n, kv_len)."""
        if len(buffers) != len(kernel.access):
            raise EngineError(f"{kernel.name} ({label}): {len(buffers)} buffers for {len(kernel.access)} bindings")
        unknown = set(params) - {f for f, _ in kernel.fields}
        if unknown:
            raise EngineError(f"{kernel.name} ({label}): unknown parameters {sorted(unknown)}")
        self.ops.append(dict(kernel=kernel, buffers=list(buffers), groups=groups, params=params, label=label))

    def finalize(self) -> None:
        """Allocate the parameter buffer and make every bind group."""
        dev, wgpu = self.dev, self.dev.wgpu
        n = max(1, len(self.ops))
        self.buffer = dev.buffer(n * self.stride, f"params:{self.label}",
                                 wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self._bytes = np.zeros(n * self.stride, np.uint8)
        cache = {}
        for i, op in enumerate(self.ops):
            key = (id(op["kernel"].layout), tuple(id(b) for b in op["buffers"]))
            bg = cache.get(key)
            if bg is None:
                entries = [{"binding": 0, "resource": {"buffer": self.buffer, "offset": 0, "size": PARAM_BYTES}}]
                entries += [{"binding": j + 1, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                            for j, b in enumerate(op["buffers"])]
                if getattr(op["kernel"], "tables", False):
                    t = dev.iq_tables()
                    entries.append({"binding": TABLE_BINDING, "resource": {"buffer": t, "offset": 0, "size": t.size}})
                bg = dev.device.create_bind_group(layout=op["kernel"].layout, entries=entries)
                cache[key] = bg
            op["bind_group"] = bg
            op["offset"] = [i * self.stride]
            op["dynamic"] = any(callable(v) for v in op["params"].values())
        self._dynamic = [i for i, op in enumerate(self.ops) if op["dynamic"]]
        self._write_params(None, None, force=True)
        self._prepare_fast()

    def _prepare_fast(self) -> None:
        """Raw handles for the encode loop. wgpu-py's set_bind_group allocates a cffi array of the
        dynamic offsets on every call; the offsets here never change, so each op keeps its own array
        and the loop calls wgpu-native directly (about 3x less Python time per dispatch). Falls back
        to the public API if wgpu-py's internals are not what this expects."""
        self._fast = None
        try:
            from wgpu.backends.wgpu_native._api import ffi, libf  # noqa: PLC0415
            rows = []
            for op in self.ops:
                rows.append((op["kernel"].pipeline._internal, op["bind_group"]._internal,
                             ffi.new("uint32_t[]", op["offset"]), op["groups"]))
            self._fast = (libf.wgpuComputePassEncoderSetPipeline, libf.wgpuComputePassEncoderSetBindGroup,
                          libf.wgpuComputePassEncoderDispatchWorkgroups, rows)
        except Exception:  # pragma: no cover - another wgpu-py layout
            self._fast = None

    def _pack(self, op, n, kv_len) -> bytes:
        out = []
        for name, t in op["kernel"].fields:
            v = op["params"].get(name, 0)
            if callable(v):
                v = v(n, kv_len)
            out.append(struct.pack("<f", float(v)) if t == "f" else struct.pack("<I", int(v)))
        return b"".join(out).ljust(PARAM_BYTES, b"\0")

    def _write_params(self, n, kv_len, force=False) -> None:
        if self._pack_params(n, kv_len, force):
            self.dev.queue.write_buffer(self.buffer, 0, self._bytes)

    def _pack_params(self, n, kv_len, force=False) -> bool:
        """The params of a call of n tokens ending at kv_len into self._bytes; whether they changed."""
        dirty = False
        for i in (range(len(self.ops)) if force else self._dynamic):
            b = self._pack(self.ops[i], n if n is not None else 1, kv_len if kv_len is not None else 1)
            o = i * self.stride
            if force or self._bytes[o:o + PARAM_BYTES].tobytes() != b:
                self._bytes[o:o + PARAM_BYTES] = np.frombuffer(b, np.uint8)
                dirty = True
        return dirty

    def params_for(self, n: int, kv_len: int) -> bytes | None:
        """The param buffer's bytes for a call, packed now, for write_params later (None: unchanged):
        a caller that encodes a call before the GPU is done with the previous one, and must not
        touch the queue until then (gpu/greedy.py, HEARTH_GPU_PIPELINE=pre2)."""
        if self._key == (n, kv_len):
            return None
        self._key = (n, kv_len)
        return self._bytes.tobytes() if self._pack_params(n, kv_len) else None

    def write_params(self, data: bytes | None) -> None:
        if data is not None:
            self.dev.queue.write_buffer(self.buffer, 0, data)

    def forget_params(self) -> None:
        """The next encode writes its params whatever the last call's were (params_for packed some
        that were never written)."""
        self._key = None

    def encode(self, encoder, n: int, kv_len: int, start: int = 0, stop: int | None = None, repeat: int = 1,
               params: bool = True) -> int:
        """Record ops[start:stop] (`repeat` times over, for profiling) in one compute pass for a call
        of n tokens ending at kv_len; returns dispatches. A pass costs the GPU ~30 us of its own on
        the H200 (bench.gpu_profile --dispatch-floor), a dispatch in one ~5 us. params=False: the
        caller writes them (params_for, write_params)."""
        if params and self._key != (n, kv_len):
            self._write_params(n, kv_len)
            self._key = (n, kv_len)
        cp = encoder.begin_compute_pass()
        if self._fast is not None:
            set_pipe, set_bg, dispatch, rows = self._fast
            h = cp._internal
            last = None
            count = 0
            for pipe, bg, off, g in rows[start:stop] * repeat:
                if callable(g):
                    g = g(n, kv_len)
                    if not g[0]:
                        continue
                if pipe is not last:
                    set_pipe(h, pipe)
                    last = pipe
                set_bg(h, 0, bg, 1, off)
                dispatch(h, g[0], g[1], g[2])
                count += 1
            cp.end()
            return count
        last = None
        count = 0
        for op in self.ops[start:stop] * repeat:
            g = op["groups"]
            if callable(g):
                g = g(n, kv_len)
                if not g[0]:
                    continue
            pipe = op["kernel"].pipeline
            if pipe is not last:
                cp.set_pipeline(pipe)
                last = pipe
            cp.set_bind_group(0, op["bind_group"], op["offset"])
            cp.dispatch_workgroups(*g)
            count += 1
        cp.end()
        return count

    def destroy(self) -> None:
        if self.buffer is not None:
            self.buffer.destroy()
            self.buffer = None
