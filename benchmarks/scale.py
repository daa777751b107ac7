"""How the cost grows with the work (issue 25): many names, memory per key, a long queue.

- ``names``: 16 processes take locks on names drawn from a Zipf popularity (s = 1: the most
  popular of 10,000 names gets ~10% of the calls), for 100, 1,000 and 10,000 names, each
  library through its blocking API. Per run: critical sections per second, the server's CPU
  per section (``INFO cpu``), and the p99 wait (from calling to inside).
- ``memory``: ``MEMORY USAGE ... SAMPLES 0`` (exact) of every key a held lock and its queued
  waiters create, against redis-py's lock key: bytes per held lock, and per queued waiter as
  the queue grows.
- ``queue``: N asyncio tasks in one process loop ``async with Lock(name)`` on one name, so
  about N - 1 wait queued at every hand-off (each releaser queues again at the tail). Per
  run: the server's CPU per hand-off (``INFO cpu``) and the time its queue join (``ZADD``,
  from ``INFO commandstats``) costs -- the command of the hot path whose work an ordered
  queue could make grow with the queue (a list's ``LPOS`` did).
"""

from __future__ import annotations

import asyncio
import bisect
import multiprocessing
import random
import time
from dataclasses import dataclass
from typing import Any

import redis

from .candidates import KEYED
from .contention import server_cpu

NAMES = (100, 1_000, 10_000)
PROCESSES = 16
QUEUES = (2, 10, 100, 1_000)
QUEUE = "{lock:bench:mem}:queue"  # the waiter queue of Lock("bench:mem") (_protocol.sibling)


@dataclass
class NamesRun:
    library: str
    names: int
    sections: int
    seconds: float
    server_cpu: float
    waits: list[float]

    @property
    def throughput(self) -> float:
        return self.sections / self.seconds

    @property
    def cpu_per_cs(self) -> float:
        return self.server_cpu / max(1, self.sections)

    def p99(self) -> float:
        ordered = sorted(self.waits)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


def _zipf(names: int) -> list[float]:
    """Cumulative Zipf (s = 1) weights of ``names`` names."""
    total, cumulative = 0.0, []
    for rank in range(1, names + 1):
        total += 1.0 / rank
        cumulative.append(total)
    return [c / total for c in cumulative]


def _names_worker(library: str, url: str, names: int, index: int, start: float,
                  stop: float, out: Any) -> None:  # fmt: skip
    run = KEYED[library](url, 10.0)
    weights = _zipf(names)
    pick = random.Random(index)
    waits: list[float] = []
    sections = 0
    entered = [0.0]

    def body() -> None:
        entered[0] = time.monotonic()

    time.sleep(max(0.0, start - time.monotonic()))
    while time.monotonic() < stop:
        key = f"bench:names:{bisect.bisect_left(weights, pick.random())}"
        called = time.monotonic()
        run(key, body)
        waits.append(entered[0] - called)
        sections += 1
    out.put((sections, waits[:: max(1, len(waits) // 2000)]))  # a sample keeps the queue light


def names(url: str, library: str, count: int, seconds: float) -> NamesRun:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    client = redis.Redis.from_url(url)
    client.flushall()
    start = time.monotonic() + 1.0 + PROCESSES * 0.02
    workers = [
        ctx.Process(target=_names_worker,
                    args=(library, url, count, i, start, start + seconds, out))
        for i in range(PROCESSES)
    ]  # fmt: skip
    for worker in workers:
        worker.start()
    time.sleep(max(0.0, start - time.monotonic()))
    before = server_cpu(client)
    results = [out.get(timeout=seconds + 120) for _ in workers]
    used = server_cpu(client) - before
    for worker in workers:
        worker.join(30)
    return NamesRun(library, count, sum(r[0] for r in results), seconds, used,
                    [w for r in results for w in r[1]])  # fmt: skip


@dataclass
class Memory:
    redis_py_key: int  # bytes: redis-py's lock key
    held: int  # bytes: our lock key, held, nobody waiting
    queued: dict[int, float]  # waiters queued -> bytes per queued waiter (the queue key)


def _usage(client: Any, key: str) -> int:
    return int(client.memory_usage(key, samples=0) or 0)


def memory(url: str) -> Memory:
    import redis.lock

    from redlock_deco import Lock, register_provider
    from redlock_deco import asyncio as aio

    register_provider("default", url)
    client = redis.Redis.from_url(url)
    client.flushall()
    theirs = redis.lock.Lock(client, "bench:mem:redis-py", timeout=10)
    assert theirs.acquire(blocking=False)
    redis_py_key = _usage(client, "bench:mem:redis-py")
    theirs.release()
    queued: dict[int, float] = {}
    # Held by an object, not by this thread's section: tasks of a loop this thread runs may
    # wait for it (for a section around the loop they could only wait for themselves, which
    # the library refuses at once).
    holder = Lock("bench:mem", ttl=30, wait=1)
    assert holder.acquire()
    try:
        held = _usage(client, "lock:bench:mem")
        assert held, "the lock key is not where this benchmark looks for it"
        for count in (1, 10, 100, 1_000):

            async def queue_up(count: int = count) -> float:
                tasks = [
                    asyncio.ensure_future(aio.Lock("bench:mem", ttl=30, wait=30).acquire())
                    for _ in range(count)
                ]
                deadline = time.monotonic() + 30
                while client.zcard(QUEUE) < count:
                    assert time.monotonic() < deadline, "the waiters did not queue"
                    await asyncio.sleep(0.01)
                size = _usage(client, QUEUE)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                return size / count

            queued[count] = asyncio.run(queue_up())
    finally:
        holder.release()
    return Memory(redis_py_key, held, queued)


@dataclass
class QueueRun:
    tasks: int
    sections: int
    seconds: float
    server_cpu: float
    join_usec: float  # per queue join (ZADD)

    @property
    def cpu_per_cs(self) -> float:
        return self.server_cpu / max(1, self.sections)


def queue(url: str, tasks: int, seconds: float) -> QueueRun:
    from redlock_deco import asyncio as aio
    from redlock_deco import register_provider

    register_provider("default", url)
    client = redis.Redis.from_url(url)
    client.flushall()

    async def main() -> tuple[int, float]:
        done = [0]
        stop = [False]

        async def loop() -> None:
            while not stop[0]:
                async with aio.Lock("bench:queue", ttl=30, wait=60):
                    done[0] += 1
                await asyncio.sleep(0)

        running = [asyncio.ensure_future(loop()) for _ in range(tasks)]
        await asyncio.sleep(1.0)  # every task queued once
        client.config_resetstat()
        first, before = done[0], server_cpu(client)
        await asyncio.sleep(seconds)
        used, sections = server_cpu(client) - before, done[0] - first
        stop[0] = True
        await asyncio.gather(*running)
        return sections, used

    sections, used = asyncio.run(main())
    # Only the queue joins ZADD here: no semaphore, no reader.
    joins = client.info("commandstats").get("cmdstat_zadd", {"calls": 0, "usec": 0})
    per_join = joins["usec"] / joins["calls"] if joins["calls"] else 0.0
    return QueueRun(tasks, sections, seconds, used, per_join)
