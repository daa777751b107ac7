"""The searches' model of where a real signal can land (support.interrupts): a trace
function's exception at a line no signal can reach would find bugs that do not exist."""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

from support.interrupts import signal_cannot_land

_lock = threading.RLock()


def _sample() -> int:
    _lock.acquire()
    try:
        total = 1
        total += 1
    finally:
        _lock.release()
    return total


def _cuttable_lines() -> set[int]:
    """The lines of ``_sample`` (relative to its ``def``) a search would cut."""
    code = _sample.__code__
    seen: set[int] = set()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and not signal_cannot_land(code, frame.f_lineno, frame.f_lasti):
            seen.add(frame.f_lineno - code.co_firstlineno)
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
    try:
        assert _sample() == 2
    finally:
        sys.settrace(None)
    return seen


def test_the_first_line_of_a_finally_entered_from_its_try_body_is_never_cut() -> None:
    """A cut there skipped the ``finally`` -- redis-py's release of a single-connection
    client's lock in ``_execute_command``: the lock stayed held by a thread, and the other
    threads sharing the client hung (the threaded reply search). No real signal lands there:
    the last check point before it is inside the ``try`` (its handler runs)."""
    cut = _cuttable_lines()
    assert {1, 3, 4} <= cut  # acquire, the try body
    assert 6 not in cut  # the finally's release, entered from the try body
