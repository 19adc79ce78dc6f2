"""A time bound on pure-Python work that cannot check a clock itself (a model's chat template).

    with deadline(5.0):        # raises Deadline in this thread if the block is still running after 5 s
        untrusted_render()

A timer thread raises `Deadline` in the thread running the block, through the interpreter's
asynchronous-exception hook (the way a KeyboardInterrupt reaches a loop): the interpreter checks for
it between bytecodes, so a nested Python loop stops within milliseconds. A single long call into C
is not interrupted until it returns; the caller bounds those by size instead.

`Deadline` is a BaseException so that no `except Exception` inside the bounded code swallows it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Iterator

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int


class Deadline(BaseException):
    """The bounded block ran past its time."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    tid = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                _set_async_exc(tid, Deadline)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
        if state["fired"]:
            # Raised but maybe not yet delivered: clear it, so that it cannot surface later, outside
            # the block. (If it is delivered first, it propagates from here as Deadline.)
            _set_async_exc(tid, ctypes.py_object())
