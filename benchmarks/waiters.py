"""1,000 waiters on one name in ONE process -- threads through a sync ``@locked`` function, or
asyncio tasks through an ``async def`` one -- while another process holds the lock ~2 s.

Measured: how many connections the waiting process has open to Redis while they wait
(``CLIENT LIST``, sampled every 50 ms by this process: every connection that was not there
before the waiting process started, except the holder's, which it names through its provider
URL), what those connections are doing (blocked in a command, subscribed, or neither), and
the time from the holder's release to the last waiter out (each holds ~0 ms). Every waiter
has ``wait=60``; the whole scenario fails loudly if it has not finished in 120 s.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis

WAITERS = 1000
HOLD = 2.0  # seconds the holder keeps the lock once every waiter has been started
DEADLINE = 120.0
NAME = "bench:waiters"
HOLDER = "bench-holder"  # the holder's connections' name (CLIENT SETNAME, sent by redis-py)


@dataclass
class Waiters:
    mode: str  # "threads" or "asyncio tasks"
    waiters: int
    connections: int  # the most the waiting process had open at once while they waited
    doing: dict[str, int]  # at the end of the wait: blocked in X / subscribed / not blocked
    drain: float  # seconds from the release to the last waiter out
    entered: int
    overlaps: int  # waiters that found another one inside (must be 0)


def _hold(url: str, held: Any, release: Any, released_at: Any) -> None:
    from redlock_deco import Lock, register_provider

    register_provider("default", f"{url}{'&' if '?' in url else '?'}client_name={HOLDER}")
    with Lock(NAME, ttl=10, wait=10):
        held.set()
        release.wait(DEADLINE)
        released_at.value = time.monotonic()  # the release follows at once


class _Gate:
    """What every waiter does inside: count itself, notice overlaps, note when it left."""

    def __init__(self) -> None:
        self.inside = self.entered = self.overlaps = 0
        self.left = 0.0

    def enter(self) -> None:
        self.inside += 1
        self.entered += 1
        self.overlaps += self.inside > 1

    def leave(self) -> None:
        self.inside -= 1
        self.left = time.monotonic()


def _threads(gate: _Gate, started: Any) -> list[BaseException]:
    from redlock_deco import locked

    guard = threading.Lock()  # makes the gate's counting atomic, not the exclusion
    errors: list[BaseException] = []

    @locked(NAME, ttl=10, wait=60)
    def through() -> None:
        with guard:
            gate.enter()
        with guard:
            gate.leave()

    def waiter() -> None:
        try:
            through()
        except BaseException as exc:
            errors.append(exc)

    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(WAITERS)]
    for thread in threads:
        thread.start()
    started.set()
    for thread in threads:
        thread.join(DEADLINE)
    return errors


def _tasks(gate: _Gate, started: Any) -> list[BaseException]:
    from redlock_deco import locked

    @locked(NAME, ttl=10, wait=60)
    async def through() -> None:
        gate.enter()
        await asyncio.sleep(0)  # a task switch while inside, so an overlap could show
        gate.leave()

    async def main() -> list[BaseException]:
        tasks = [asyncio.create_task(through()) for _ in range(WAITERS)]
        await asyncio.sleep(0)  # every task has run up to its first await
        started.set()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DEADLINE)
        return [r for r in done if isinstance(r, BaseException)]

    return asyncio.run(main())


def _wait(mode: str, url: str, started: Any, out: Any) -> None:
    from redlock_deco import register_provider

    register_provider("default", url)
    gate = _Gate()
    errors = (_threads if mode == "threads" else _tasks)(gate, started)
    out.put((gate.entered, gate.overlaps, gate.left, [repr(e) for e in errors[:3]], len(errors)))


def _connections(client: Any, before: set[str]) -> list[dict[str, Any]]:
    """The waiting process's connections: all that are new since ``before``, but the holder's."""
    return [c for c in client.client_list() if c["id"] not in before and c["name"] != HOLDER]


def _doing(connection: dict[str, Any]) -> str:
    """What one connection of the waiting process is doing, from its CLIENT LIST entry."""
    if "b" in connection["flags"]:
        return f"blocked in {connection['cmd']}"
    if "P" in connection["flags"] or int(connection.get("sub", 0)) + int(connection.get("psub", 0)):
        return "subscribed"
    return "not blocked"


def measure(url: str, mode: str) -> Waiters:
    """``mode``: "threads" or "asyncio tasks"."""
    ctx = multiprocessing.get_context("fork")
    client = redis.Redis.from_url(url)
    client.flushall()
    held, release, started = ctx.Event(), ctx.Event(), ctx.Event()
    released_at, out = ctx.Value("d", 0.0), ctx.Queue()
    holder = ctx.Process(target=_hold, args=(url, held, release, released_at))
    waiting = ctx.Process(target=_wait, args=(mode, url, started, out))
    deadline = time.monotonic() + DEADLINE
    try:
        holder.start()
        if not held.wait(30):
            raise RuntimeError("1,000 waiters: the holder did not get the lock in 30 s")
        before = {c["id"] for c in client.client_list()}  # ours and the holder's
        waiting.start()
        if not started.wait(60):
            raise RuntimeError(f"1,000 waiters: the {mode} were not started in 60 s")
        peak, last = 0, []
        until = time.monotonic() + HOLD
        while time.monotonic() < until:
            last = _connections(client, before)
            peak = max(peak, len(last))
            time.sleep(0.05)
        release.set()
        try:
            entered, overlaps, left, errors, failed = out.get(
                timeout=max(1.0, deadline - time.monotonic())
            )
        except queue.Empty:
            raise RuntimeError(
                f"1,000 waiters ({mode}) did not all get through in {DEADLINE:.0f} s"
            ) from None
    finally:
        release.set()
        for process in (waiting, holder):
            if process.pid is None:  # never started
                continue
            process.join(10)
            if process.is_alive():
                process.kill()
    if not peak:
        raise RuntimeError(f"1,000 waiters ({mode}): no connection of theirs seen in CLIENT LIST")
    if failed or entered != WAITERS:
        raise RuntimeError(f"1,000 waiters ({mode}): {entered} got in, {failed} failed: {errors}")
    doing = dict(Counter(_doing(connection) for connection in last))
    return Waiters(mode, WAITERS, peak, doing, left - released_at.value, entered, overlaps)
