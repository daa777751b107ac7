"""A holder SIGKILLed while a waiter waits: how long after the holder's lease ended does the
waiter get the lock? (Renewing libraries' leases end later after a kill; this measures the
wake-up, not the lease length: recovery - lease left at the kill.) One sample per call; the
run takes several per library for a median."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Any

import redis

from .candidates import LOCKS

TTL = 1.0


def _hold(library: str, url: str, key: str, ready: Any) -> None:
    factory, _ = LOCKS[library]
    run = factory(url, key, TTL)

    def forever() -> None:
        ready.set()
        time.sleep(3600)

    run(forever)


def _wait(library: str, url: str, key: str, out: Any) -> None:
    factory, _ = LOCKS[library]
    run = factory(url, key, TTL)
    run(lambda: out.put(time.monotonic()))


def recovery(url: str, library: str) -> tuple[float, float]:
    """(seconds from the kill to the waiter's entry, lease left at the kill)."""
    ctx = multiprocessing.get_context("fork")
    key = "bench:crash"
    client = redis.Redis.from_url(url)
    client.flushall()
    ready, out = ctx.Event(), ctx.Queue()
    holder = ctx.Process(target=_hold, args=(library, url, key, ready))
    holder.start()
    assert ready.wait(30)
    waiter = ctx.Process(target=_wait, args=(library, url, key, out))
    waiter.start()
    time.sleep(0.5)  # the waiter is waiting; a renewing holder has renewed once by now
    left = max(0, int(client.pttl(LOCKS[library][1](key)))) / 1000
    read = time.monotonic()
    os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
    killed = time.monotonic()
    entered = out.get(timeout=30)
    waiter.join(10)
    holder.join(10)
    return entered - killed, max(0.0, left - (killed - read))  # PTTL is in whole ms
