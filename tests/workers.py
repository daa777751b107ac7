"""Functions run in separate processes (multiprocessing "spawn": fresh interpreters)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import redis

from redlock_deco import Lock, Semaphore, limited, locked, register_provider


def increment_many(
    url: str, counter: str, times: int, ttl: float, masters: list[str] | None = None
) -> int:
    """A deliberately non-atomic read-modify-write under @locked; returns calls made.

    The counter lives at ``url``; the lock at ``url`` too, or on the quorum ``masters``."""
    register_provider("default", masters or url)
    client = redis.Redis.from_url(url)

    @locked("counter:{name}", ttl=ttl, wait=None)
    def bump(name: str) -> None:
        value = int(client.get(name) or 0)
        time.sleep(0.001)  # widen the race window: without the lock, updates get lost
        client.set(name, value + 1)

    for _ in range(times):
        bump(counter)
    return times


def hold_forever(url: str, name: str, ttl: float, ready: Any) -> None:
    """Take a lock (renewed) and signal readiness; the parent SIGKILLs this process."""
    register_provider("default", url)
    lock = Lock(name, ttl=ttl, wait=5)
    lock.acquire()
    ready.set()
    while True:
        time.sleep(1)


def hold_then_release(url: str, name: str, hold: float, ready: Any, out: Any) -> None:
    """Hold a lock for ``hold`` s, release it, and report when the release was sent."""
    register_provider("default", url)
    lock = Lock(name, ttl=10, wait=5)
    lock.acquire()
    ready.set()
    time.sleep(hold)
    released = time.time()  # stamped before the release is sent: nobody can enter earlier
    lock.release()
    out.put(released)


def stop_self() -> None:  # pragma: no cover - used in fault tests
    os.kill(os.getpid(), signal.SIGSTOP)


def gauge_many(url: str, name: str, limit: int, times: int, hold: float) -> int:
    """Run a @limited section ``times`` times; return the most holders seen inside at once."""
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    peak = 0

    @limited("gauge:{name}", limit=limit, ttl=5, wait=None)
    def section(name: str) -> None:
        nonlocal peak
        inside = int(client.incr(f"inside:{name}"))
        peak = max(peak, inside)
        time.sleep(hold)
        client.decr(f"inside:{name}")

    for _ in range(times):
        section(name)
    return peak


def hold_slot_forever(url: str, name: str, ttl: float, ready: Any) -> None:
    """Take a semaphore slot (renewed) and signal readiness; the parent SIGKILLs us."""
    register_provider("default", url)
    Semaphore(name, limit=1, ttl=ttl, wait=5).acquire()
    ready.set()
    while True:
        time.sleep(1)


def hold_until_stopped(url: str, name: str, ttl: float, ready: Any, out: Any) -> None:
    """Hold a lock through a long call; the parent SIGSTOPs and later SIGCONTs us. Reports
    how the call ended."""
    from redlock_deco import LockLost

    register_provider("default", url)

    @locked(name, ttl=ttl, wait=5)
    def long_call() -> None:
        ready.set()
        time.sleep(1.0)  # the parent stops us in here, for longer than the ttl

    try:
        long_call()
        out.put("completed")
    except LockLost:
        out.put("LockLost")
