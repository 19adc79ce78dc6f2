"""Two glibc malloc arenas for the whole process instead of up to eight per core.

glibc gives every thread that allocates while the others hold their arenas an arena of its own,
and an arena keeps what is freed in it for reuse. The engine's threads (the prefill row pool, the
kernel threads, the page prefaulter) each allocate numpy temporaries of a few MB per layer, so each
held its own copy of a chunk's scratch: peak RSS of the default model, prefill 512 then 2,000
tokens, f16 KV, 461 MiB with glibc's default against 389 MiB with two arenas (382 with one), at
the same prefill and decode speed (bench/README.md, CPU engine). A limit set while threads
already hold arenas only stops new ones, so `hearth.engine` sets it when it is imported, before it
starts any thread. Elsewhere (macOS, Windows, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import platform

M_ARENA_MAX = -8    # glibc's mallopt parameter
ARENAS = 2          # the main thread's and one shared by every other thread


def limit_malloc_arenas(n: int = ARENAS) -> bool:
    """Whether glibc accepted the limit (False where there is no glibc)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_ARENA_MAX, n) == 1
