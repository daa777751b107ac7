"""A step run by another thread, for tests of who holds what: its answer, or its exception
raised in the calling thread; whether another thread gets a name in at once; and a step
switched in at a given line of the code under test."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Collection
from typing import Any

from redlock_deco import Lock, LockNotAcquired


def in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in another thread: its result, or its exception raised here."""
    out: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as exc:  # (a LockError may be what the test looks for)
            out.append((False, exc))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(10)
    assert out, "the other thread did not finish"
    done, value = out[0]
    if not done:
        raise value
    return value


def another_gets_in(name: str) -> bool:
    """Whether another thread's ``with Lock(name, wait=0)`` gets in at once."""

    def attempt() -> bool:
        try:
            with Lock(name, ttl=5, wait=0):
                return True
        except LockNotAcquired:
            return False

    return bool(in_thread(attempt))


class AtLine:
    """Runs ``act`` at the ``at``-th line event of the frames running one of ``codes``,
    while it is active (``with``): "another thread" switched in there, whole or started.
    ``lines``: how many it counted (``at`` 0: none acted on, the count of a plain run)."""

    def __init__(self, codes: Collection[Any], at: int, act: Callable[[], Any]) -> None:
        self.codes, self.at, self.act = codes, at, act
        self.lines = 0

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines == self.at:
                self.act()
        return self._local

    def _tracer(self, frame: Any, event: str, arg: Any) -> Any:
        return self._local if frame.f_code in self.codes else None

    def __enter__(self) -> AtLine:
        sys.settrace(self._tracer)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)
