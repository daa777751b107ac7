"""Uncontended acquire+release cycles/s, interleaved rounds on one throwaway server.

Every candidate runs in each round, in turn, so machine noise hits them alike; the report is
the median per candidate and its ratio to the raw floor (SET NX PX + one EVALSHA) measured in
the same run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import redis
import redis.lock

from redlock_deco import Lock, limited, locked, register_provider
from redlock_deco.testing import RedisServer

RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


def candidates(url: str) -> dict[str, Callable[[], object]]:
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    sha = client.script_load(RELEASE)

    def floor() -> None:
        client.set("bench:floor", "token", nx=True, px=30000)
        client.evalsha(sha, 1, "bench:floor", "token")

    theirs = redis.lock.Lock(redis.Redis.from_url(url), "bench:redis-py", timeout=30)

    def redis_py() -> None:
        theirs.acquire()
        theirs.release()

    @locked("bench:{n}")
    def with_locked(n: int) -> None: ...

    @limited("bench:{n}", limit=3)
    def with_limited(n: int) -> None: ...

    ours = Lock("bench:ctx")

    def with_lock_object() -> None:
        with ours:
            pass

    return {
        "floor (SET NX PX + EVALSHA)": floor,
        "redis-py Lock": redis_py,
        "@locked": lambda: with_locked(1),
        "@limited(limit=3)": lambda: with_limited(1),
        "with Lock(...)": with_lock_object,
    }


def measure(cycles: int = 2000, rounds: int = 7) -> dict[str, float]:
    with RedisServer() as server:
        runs = candidates(server.url)
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for fn in runs.values():
            for _ in range(200):  # warm up connections and script caches
                fn()
        for _ in range(rounds):
            for name, fn in runs.items():
                started = time.perf_counter()
                for _ in range(cycles):
                    fn()
                samples[name].append(cycles / (time.perf_counter() - started))
        return {name: statistics.median(values) for name, values in samples.items()}


def report(results: dict[str, float]) -> str:
    floor = next(iter(results.values()))
    locked_rate = results["@locked"]
    lines = [
        "| candidate | cycles/s | vs floor | vs @locked |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, rate in results.items():
        lines.append(f"| {name} | {rate:,.0f} | {rate / floor:.2f}x | {rate / locked_rate:.2f}x |")
    return "\n".join(lines)
