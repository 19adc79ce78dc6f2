"""engine/system/watchdog.py: a deadline stops pure-Python work in the thread that runs it, and nothing
surfaces after a block that ended in time."""

from __future__ import annotations

import threading
import time

import pytest

from hearth.engine.system.watchdog import Deadline, deadline


def spin(seconds: float) -> int:
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += 1
    return n


def test_a_loop_past_the_deadline_is_stopped():
    t0 = time.monotonic()
    with pytest.raises(Deadline):
        with deadline(0.2):
            while True:
                pass
    assert time.monotonic() - t0 < 3


def test_a_block_that_ends_in_time_is_left_alone_afterwards():
    for _ in range(20):
        with deadline(0.05):
            pass
    spin(0.3)                   # past every timer: none may fire into this code


def test_except_exception_inside_the_block_does_not_swallow_it():
    with pytest.raises(Deadline):
        with deadline(0.1):
            while True:
                try:
                    spin(0.01)
                except Exception:  # noqa: BLE001  what the bounded code might do
                    pass


def test_only_the_bounded_thread_is_interrupted():
    other_done = threading.Event()

    def other():
        spin(0.5)
        other_done.set()

    t = threading.Thread(target=other)
    t.start()
    with pytest.raises(Deadline):
        with deadline(0.1):
            spin(5)
    t.join(5)
    assert other_done.is_set()
