"""Waiting processes for tests/test_handoff.py (multiprocessing "spawn": fresh interpreters)."""

from __future__ import annotations

import time
from typing import Any

from redlock_deco import Lock, LockLost, Semaphore, register_provider


def wait_then_hold(
    url: str, name: str, index: int, hold: float, out: Any, limit: int = 0, ttl: float = 10
) -> None:
    """Wait for ``name`` (a lock, or a semaphore of ``limit``), hold it ``hold`` seconds and
    report (index, entered, left) in monotonic time (one clock for every process here), or
    (index, error name) when the lease turned out lost."""
    register_provider("default", url)
    primitive: Any = (
        Semaphore(name, limit=limit, ttl=ttl, wait=30) if limit else Lock(name, ttl=ttl, wait=30)
    )
    try:
        with primitive:
            entered = time.monotonic()
            time.sleep(hold)
            left = time.monotonic()
    except LockLost as exc:
        out.put((index, type(exc).__name__))
        return
    out.put((index, entered, left))


def hand_around(url: str, name: str, hold: float, until: float, started: Any) -> None:
    """Three threads handing ``name`` around, each holding it ``hold`` seconds, until the
    wall-clock time ``until``; ``started`` (an Event) set once the first holds it."""
    import threading

    register_provider("default", url)

    def turns() -> None:
        while time.time() < until:
            with Lock(name, ttl=10, wait=30):
                started.set()
                time.sleep(hold)

    threads = [threading.Thread(target=turns) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def third_in_line(url: str, name: str, go: Any, out: Any) -> None:
    """For each item ``go`` gives (None ends it): once two waiters queue for the lock
    ``name``, queue third, and when in, note "E" in the list ``order``; then put "done"."""
    import redis

    register_provider("default", url)
    client = redis.Redis.from_url(url)
    queue = "{lock:" + name + "}:queue"
    while go.get() is not None:
        deadline = time.monotonic() + 5
        while client.zcard(queue) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        with Lock(name, ttl=5, wait=10):
            client.rpush("order", "E")
            time.sleep(0.05)
        out.put("done")
