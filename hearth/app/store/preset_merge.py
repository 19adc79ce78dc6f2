"""Three-way merge of the presets list, for a save while another process may have saved too.

`base` is the file as this process last read or wrote it, `mine` the list in memory, `theirs` the
file as it is now. Each side's changes since `base` are kept: a preset added, edited or deleted
here stays so, and so does one added, edited or deleted there; when both edited the same preset,
this process's edit wins (it is the one being saved). The order is this process's, with presets
added elsewhere after it in their own order.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def merge(base: dict[str, T], mine: Sequence[T], theirs: Sequence[T], key: Callable[[T], str],
          same: Callable[[T, T], bool]) -> list[T]:
    their = {key(p): p for p in theirs}
    out: list[T] = []
    for p in mine:
        pid = key(p)
        changed_here = pid not in base or not same(base[pid], p)
        if pid in their:
            out.append(p if changed_here else their[pid])
        elif changed_here:            # added here, or edited here while deleted there: keep the edit
            out.append(p)
        # else: deleted there and untouched here
    mine_ids = {key(p) for p in mine}
    out.extend(p for p in theirs if key(p) not in mine_ids and key(p) not in base)   # added there
    return out
