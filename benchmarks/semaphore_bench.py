"""A limit-3 semaphore contended by 8 processes, each holding its slot ~1 ms: acquisitions/s
and the most holders ever inside at once (over-admission), for redlock-deco's ``@limited``
and the Python Redis semaphores people reach for, each through its documented blocking API
with default settings.

redis-semaphore-eval pins ``redis<4`` in its metadata but runs on redis-py 8; it cannot go in
the ``bench`` extra, so install it with ``pip install --no-deps redis-semaphore-eval``. A
library that is not installed is skipped, with a note.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import redis

from .candidates import Runner, redlock_deco_limited
from .contention import server_cpu

LIMIT = 3
HOLD = 0.001  # seconds each holder keeps its slot
OURS = "redlock-deco @limited(limit=3)"


def py_redis_semaphore(url: str, key: str, ttl: float) -> Runner:
    """PyPI ``py-redis-semaphore`` (import ``redis_semaphore``): ``with Semaphore(...)``
    blocks until a slot is free (BLPOP wake-ups by default; no acquire_timeout)."""
    from redis_semaphore import Semaphore, SemaphoreConfig

    semaphore = Semaphore(
        redis.Redis.from_url(url), SemaphoreConfig(name=key, limit=LIMIT, lock_timeout=ttl)
    )

    def run(body: Callable[[], None]) -> None:
        with semaphore:
            body()

    return run


def redis_semaphore_eval(url: str, key: str, ttl: float) -> Runner:
    """PyPI ``redis-semaphore-eval``: ``with semaphore(..., timeout=1)`` tries, BLPOPs for a
    release signal once (up to ``timeout`` s), tries once more and otherwise raises
    FailedToAcquireLock -- so a caller that must get in retries, as here."""
    from redis_semaphore_eval import FailedToAcquireLock, semaphore

    client = redis.Redis.from_url(url)

    def run(body: Callable[[], None]) -> None:
        while True:
            try:
                with semaphore(client, key, LIMIT, expire_in=max(1, round(ttl)), timeout=1):
                    body()
                return
            except FailedToAcquireLock:  # its one wake-up lost the race (body never raises it)
                continue

    return run


#: name -> (factory, module that must be importable, how to install it)
SEMAPHORES: dict[str, tuple[Callable[[str, str, float], Runner], str, str]] = {
    OURS: (redlock_deco_limited(LIMIT), "redlock_deco", ""),
    "py-redis-semaphore": (py_redis_semaphore, "redis_semaphore", "pip install py-redis-semaphore"),
    "redis-semaphore-eval": (
        redis_semaphore_eval, "redis_semaphore_eval",
        "pip install --no-deps redis-semaphore-eval",
    ),
}  # fmt: skip


def available() -> tuple[list[str], dict[str, str]]:
    """(libraries to measure, library -> install hint for those not installed)."""
    found, missing = [], {}
    for name, (_, module, install) in SEMAPHORES.items():
        if importlib.util.find_spec(module):
            found.append(name)
        else:
            missing[name] = install
    return found, missing


def _worker(library: str, url: str, start: float, stop: float, gauge: Any, out: Any) -> None:
    run = SEMAPHORES[library][0](url, "bench:sem", 10.0)
    count = peak = 0

    def body() -> None:
        nonlocal count, peak
        with gauge.get_lock():
            gauge.value += 1
            peak = max(peak, gauge.value)
        time.sleep(HOLD)  # hold the slot a moment, so the slots fill up
        with gauge.get_lock():
            gauge.value -= 1
        count += 1

    time.sleep(max(0.0, start - time.monotonic()))
    cpu = time.process_time()
    while time.monotonic() < stop:
        run(body)
    out.put((count, peak, time.process_time() - cpu))


def measure(
    url: str, library: str, processes: int = 8, seconds: float = 3.0
) -> tuple[float, int, float, float]:
    """(acquisitions/s, the most holders ever inside at once, client CPU and server CPU
    seconds per acquisition) for ``library``."""
    ctx = multiprocessing.get_context("fork")
    client = redis.Redis.from_url(url)
    client.flushall()
    gauge, out = ctx.Value("i", 0), ctx.Queue()
    start = time.monotonic() + 1.0
    stop = start + seconds
    workers = [ctx.Process(target=_worker, args=(library, url, start, stop, gauge, out))
               for _ in range(processes)]  # fmt: skip
    for worker in workers:
        worker.start()
    time.sleep(max(0.0, start - time.monotonic()))
    before = server_cpu(client)
    results = [out.get(timeout=seconds + 60) for _ in workers]
    used = server_cpu(client) - before
    for worker in workers:
        worker.join(10)
    total = max(1, sum(r[0] for r in results))
    return (total / seconds, max(r[1] for r in results), sum(r[2] for r in results) / total,
            used / total)  # fmt: skip
