"""Another thread holds a lock for a moment, and this one waits for its hand-off: the probe
the first-wait and connect tests use to see that hand-offs work (a freed lock handed on at
once, never while it is held)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from redlock_deco import Lock, LockNotAcquired

NAME = "first"


@contextmanager
def held_elsewhere(seconds: float) -> Iterator[list[float]]:
    """Another thread holds NAME for ``seconds``, from before the block starts; yields when
    (``time.monotonic()``) that thread began its hold."""
    taken = threading.Event()
    since: list[float] = []

    def hold() -> None:
        with Lock(NAME, ttl=5):
            since.append(time.monotonic())
            taken.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(5)
    try:
        yield since
    finally:
        thread.join(10)


def handed_within(hold: float, wait: float = 1.5) -> float | None:
    """A contended wait for NAME, held elsewhere for ``hold`` seconds: how long until this
    thread was inside (None: never within ``wait``)."""
    with held_elsewhere(hold) as since:
        # (Timed from the holder's start, not this thread's: woken late on a busy machine,
        # this thread measured a hand-off 12 ms shorter than the hold -- CI's interrupts leg.)
        try:
            with Lock(NAME, ttl=5, wait=wait):
                return time.monotonic() - since[0]
        except LockNotAcquired:
            return None
