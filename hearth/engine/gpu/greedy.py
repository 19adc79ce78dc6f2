"""Greedy decode with a step in flight (GpuBackend.greedy_steps): each step's argmax is copied on the
GPU into the next step's id slot of the step buffer and into a staging buffer the host maps, so the
next step can be under way before the host has the id. How the steps overlap (`pipeline_mode`,
HEARTH_GPU_PIPELINE):

    ahead  (the default) step j+1 is encoded and submitted (in `submit_pieces` command buffers)
           before step j's id is waited for
    pre2   step j+1 is encoded while step j runs (its params packed, Plan.params_for) and submitted,
           with its queue writes, the moment j's id is back
    pre    as pre2, with the queue writes (step header, params) made at encode

Why ahead: pre and pre2 step around wgpu 29 (what wgpu-py 0.32 ships), where the poll with wait
behind a mapping holds the fence lock queue.submit takes (wgpu issue 9470), so a step submitted early
waits for the one before it; yet timed on the H100 (bench.gpu --decode16-only, pipelined tok/s, one
lease), ahead is as fast or faster: Qwen3.5-4B 224.9 against pre2's 217.9 and pre's 220.1,
Gemma 4 E4B 177.2 / 172.9, Qwen3-30B-A3B 210.9 / 197.3, Qwen3.5-35B-A3B class 190.1 / 193.0. The
GPU work ahead's submit lets run while the host encodes the rest outweighs the wait at the lock.

A model whose state a step changes in place (the hybrids' recurrent layers) keeps a copy of it before
each step submitted ahead of the consumer and puts it back if the consumer stops there
(GpuBackend._before_step_in_flight / _after_step_in_flight).
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import EngineError


def pipeline_mode() -> str:
    return os.environ.get("HEARTH_GPU_PIPELINE", "ahead")


def steps(be, tok: int, pos: int, max_steps: int):
    """The ids of max_steps greedy steps from tok at pos (be.greedy_steps has checked them)."""
    from .backend import STEP_HEADER  # noqa: PLC0415  (backend imports this module)

    dev = be.dev
    if be._chain_staging is None:
        BU = dev.wgpu.BufferUsage
        be._chain_staging = [dev.buffer(256, f"chain-staging-{j}", BU.MAP_READ | BU.COPY_DST) for j in range(2)]
    hdr = np.zeros(STEP_HEADER + 1, np.uint32)
    hdr[0], hdr[1], hdr[STEP_HEADER] = pos, 1, tok
    dev.queue.write_buffer(be.step, 0, hdr)
    mode = pipeline_mode()
    try:
        if mode in ("pre", "pre2"):
            yield from _pre_encoded(be, pos, max_steps, late=mode == "pre2", header=STEP_HEADER)
        else:
            yield from _chained(be, pos, max_steps, header=STEP_HEADER)
    except EngineError:
        raise
    except Exception as e:  # wgpu validation / device-lost errors
        raise EngineError(f"the GPU forward pass failed on {be.dev.info['device']}: {e}") from e


def _copy_id(be, enc, j: int, header: int):
    """The step's argmax into the next step's id slot and into staging buffer j % 2, which it returns."""
    st = be._chain_staging[j % 2]
    enc.copy_buffer_to_buffer(be.amax, 0, be.step, header * 4, 4)
    enc.copy_buffer_to_buffer(be.amax, 0, st, 0, 4)
    return st


def _read_id(st) -> int:
    out = int(np.frombuffer(st.read_mapped(0, 4, copy=False), np.uint32)[0])
    st.unmap()
    return out


def _drop(be, in_flight) -> None:
    """A step still in flight when the consumer stopped: let its mapping finish, then undo it."""
    for st, promise, _ in in_flight:
        try:
            promise.sync_wait()
            st.unmap()
        except Exception:
            pass
    if in_flight:
        be._after_step_in_flight()


def _chained(be, pos: int, max_steps: int, header: int):
    dev, plan = be.dev, be.decode_plan
    stop = len(plan.ops)
    pieces = be.submit_pieces         # 1B, H200: 3 pieces 589 tok/s, 1 piece 559 (same call)
    cuts = [round(stop * i / pieces) for i in range(pieces + 1)]

    def submit(p: int, j: int):
        if j:                         # the id slot already holds the previous step's argmax
            dev.queue.write_buffer(be.step, 0, np.array([p, 1, 0, 0], np.uint32))
            be._before_step_in_flight()
        nd = 0
        for a, b in zip(cuts[:-2], cuts[1:-1]):
            enc = dev.device.create_command_encoder()
            nd += plan.encode(enc, 1, p + 1, a, b)
            dev.submit(enc)
        enc = dev.device.create_command_encoder()
        be.last_dispatches = nd + plan.encode(enc, 1, p + 1, cuts[-2], cuts[-1])
        be.kv.touched()
        st = _copy_id(be, enc, j, header)
        dev.submit(enc)
        return st, st.map_async(dev.wgpu.MapMode.READ, 0, 4), p

    return _drive(be, pos, max_steps, submit)


def _pre_encoded(be, pos: int, max_steps: int, late: bool, header: int):
    dev, plan = be.dev, be.decode_plan

    def encode(p: int, j: int):
        if j and not late:            # the id slot already holds the previous step's argmax
            dev.queue.write_buffer(be.step, 0, np.array([p, 1, 0, 0], np.uint32))
        prm = plan.params_for(1, p + 1) if late else None
        enc = dev.device.create_command_encoder()
        be.last_dispatches = plan.encode(enc, 1, p + 1, params=not late)
        st = _copy_id(be, enc, j, header)
        return enc.finish(), st, p, prm

    def submit(item, j: int):
        cb, st, p, prm = item
        if late:
            if j:
                dev.queue.write_buffer(be.step, 0, np.array([p, 1, 0, 0], np.uint32))
            plan.write_params(prm)
        if j:
            be._before_step_in_flight()
        try:
            dev.queue.submit([cb])
        except Exception as e:
            raise EngineError(f"the GPU refused the work (device lost or out of memory?): {e}") from e
        be.kv.touched()
        return st, st.map_async(dev.wgpu.MapMode.READ, 0, 4), p

    try:
        yield from _drive(be, pos, max_steps, encode, submit)
    finally:
        if late:
            plan.forget_params()      # a step encoded but not submitted leaves its params unwritten


def _drive(be, pos: int, max_steps: int, ahead, launch=None):
    """The steps' loop: ahead(p, j) is step j's work before the previous step's id is waited for, and
    launch(its result, j) what follows the wait; launch None: ahead submits the step itself. The
    submitted steps are (staging buffer, map promise, position)."""
    first = ahead(pos, 0)
    in_flight = [first if launch is None else launch(first, 0)]
    try:
        for j in range(1, max_steps + 1):
            nxt = pos + j
            x = ahead(nxt, j) if j < max_steps and nxt < be.kv.max_ctx else None
            if launch is None and x is not None:
                in_flight.append(x)
            st, promise, p = in_flight.pop(0)
            promise.sync_wait()
            if launch is not None and x is not None:
                in_flight.append(launch(x, j))
            out = _read_id(st)
            be.kv.n_tokens = p + 1
            yield out
            if not in_flight:
                return
    finally:
        _drop(be, in_flight)
