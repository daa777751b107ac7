"""A step run by another thread, for tests of who holds what: its answer, or its exception
raised in the calling thread; and whether another thread gets a name in at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
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
