"""fn(item) for every item, spread over the calling thread and helper threads.

Each thread takes the next item when it is free, so uneven items balance themselves; the calling
thread works too (it would otherwise only wait). Used for the pieces of a short input's products
and attention (the CPU backend's row threads) and for a chat's segment files (the prefix reader).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

_DONE = object()


def share(fn: Callable, items: Iterable, submit: Callable, helpers: int) -> None:
    """fn(item) for every item, on this thread and on up to `helpers` others started by
    `submit(drain)` (an executor's submit: returns a future). Returns when every item is done;
    an exception of fn is raised here."""
    items = list(items)
    helpers = min(helpers, len(items) - 1)
    if helpers < 1:
        for item in items:
            fn(item)
        return
    lock, left = threading.Lock(), iter(items)

    def drain() -> None:
        while True:
            with lock:
                item = next(left, _DONE)
            if item is _DONE:
                return
            fn(item)
    futures = [submit(drain) for _ in range(helpers)]
    try:
        drain()
    finally:
        for f in futures:
            f.result()
