"""Work around a reference-count bug in this PySide6 build (6.12.0 on Python 3.11): its bindings
return `None`, `True` and `False` without taking a reference - every void method (`setText`,
`show`, `processEvents`, ...), every `SignalInstance.emit()` and `.disconnect()`. Each call from
Python takes one reference away from the interpreter's singleton, and on Python 3.11 (where they
are not immortal) a few thousand calls - a minute of streaming - drop one to zero and the process
aborts with "Fatal Python error: none_dealloc: deallocating None" (or bool_dealloc).

`apply()` detects the bug with a few probe calls and, only if it is present, gives `None`, `True`
and `False` 2**40 extra references: they are never freed anyway, and no run makes that many calls.
A fixed PySide6, or Python 3.12+ (immortal singletons), is left alone.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

_EXTRA = 1 << 40
_PROBES = 16
_applied: list[str] = []


class _Probe(QObject):
    ping = Signal()


def leaking_singletons() -> list[str]:
    """Names of the singletons this PySide6 build takes references from."""
    p = _Probe()
    leaks = []
    before = sys.getrefcount(None)
    for _ in range(_PROBES):
        p.setObjectName("probe")          # a void method: returns None
    if sys.getrefcount(None) <= before - _PROBES:
        leaks.append("None")
    before = sys.getrefcount(True)
    for _ in range(_PROBES):
        p.ping.emit()                      # returns True
    if sys.getrefcount(True) <= before - _PROBES:
        leaks += ["True", "False"]
    return leaks


def apply() -> list[str]:
    """Put the workaround in place if needed; returns the singletons it protects ([] if none)."""
    if _applied or sys.version_info >= (3, 12):
        return _applied
    leaks = leaking_singletons()
    for name in leaks:
        obj = {"None": None, "True": True, "False": False}[name]
        ctypes.c_ssize_t.from_address(id(obj)).value += _EXTRA
    _applied.extend(leaks)
    return _applied


apply()
