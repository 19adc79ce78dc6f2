"""Making memory resident ahead of time, without touching its contents.

Fresh anonymous pages (the KV cache's) are mapped on first write, at ~2.4 s per GB on virtual
machines that hand freed guest memory back to the host (WSL2, cloud desktops): the first restore
or prefill into a new cache pays for it. `populate` asks the kernel to map every page of an array
writable now (madvise MADV_POPULATE_WRITE, Linux 5.14+), on whatever thread calls it. It never
writes the data, so it is safe while another thread writes the same array; ctypes releases the
GIL for the call. Elsewhere (older kernels, other systems) it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys

import numpy as np

MADV_POPULATE_READ = 22
MADV_POPULATE_WRITE = 23
_libc = None


def _madvise():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.madvise.restype = ctypes.c_int
        _libc = lib
    return _libc.madvise


def populate(arr: np.ndarray, write: bool = True) -> bool:
    """Map every whole page of `arr`'s buffer now (write=False: readable, as a read-only map of a file
    needs: one call instead of a fault per page). True if the kernel did."""
    if not sys.platform.startswith("linux") or arr.nbytes == 0:
        return False
    page = mmap.PAGESIZE
    addr = arr.ctypes.data
    start = (addr + page - 1) // page * page
    end = (addr + arr.nbytes) // page * page
    if end <= start:
        return False
    try:
        return _madvise()(start, end - start, MADV_POPULATE_WRITE if write else MADV_POPULATE_READ) == 0
    except (OSError, AttributeError):
        return False
