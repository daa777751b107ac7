"""asyncio figures: uncontended cycles/s against a raw ``redis.asyncio`` floor, and hand-off
latency with 50 tasks contending for one key -- both on one loop and one throwaway server."""

from __future__ import annotations

import asyncio
import statistics
import time

import redis.asyncio

from redlock_deco import locked, register_provider
from redlock_deco.testing import RedisServer

from .candidates import RELEASE


async def _uncontended(url: str, cycles: int, rounds: int) -> dict[str, float]:
    client = redis.asyncio.Redis.from_url(url)
    sha = await client.script_load(RELEASE)

    async def floor() -> None:
        await client.set("bench:afloor", "token", nx=True, px=30000)
        await client.evalsha(sha, 1, "bench:afloor", "token")

    @locked("bench:async:{n}")
    async def with_locked(n: int) -> None: ...

    runs = {
        "raw redis.asyncio (SET NX PX + EVALSHA)": floor,
        "async @locked": lambda: with_locked(1),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        for _ in range(200):
            await fn()
    for _ in range(rounds):
        for name, fn in runs.items():
            started = time.perf_counter()
            for _ in range(cycles):
                await fn()
            samples[name].append(cycles / (time.perf_counter() - started))
    await client.aclose()
    return {name: statistics.median(values) for name, values in samples.items()}


async def _hand_off(tasks: int, calls: int) -> list[float]:
    """Time from one holder's release to the next holder's entry, across ``tasks`` tasks."""
    gaps: list[float] = []
    last_release = 0.0

    @locked("bench:handoff", ttl=10, wait=None)
    async def critical() -> None:
        nonlocal last_release
        entered = time.perf_counter()
        if last_release:
            gaps.append(entered - last_release)
        await asyncio.sleep(0.0005)  # a little work, so others are waiting
        last_release = time.perf_counter()

    async def worker() -> None:
        for _ in range(calls):
            await critical()

    await asyncio.gather(*(worker() for _ in range(tasks)))
    return gaps


def measure(cycles: int = 1000, rounds: int = 5) -> tuple[dict[str, float], list[float]]:
    with RedisServer() as server:
        register_provider("default", server.url)

        async def both() -> tuple[dict[str, float], list[float]]:
            return await _uncontended(server.url, cycles, rounds), await _hand_off(50, 10)

        return asyncio.run(both())


def report(rates: dict[str, float], gaps: list[float]) -> str:
    floor = next(iter(rates.values()))
    lines = ["| candidate | cycles/s | vs raw |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {rate:,.0f} | {rate / floor:.2f}x |" for name, rate in rates.items()]
    ordered = sorted(gaps)
    p50 = ordered[len(ordered) // 2] * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    lines += [
        "",
        f"hand-off, 50 tasks on one key ({len(gaps)} hand-offs, release -> next entry): "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms",
    ]
    return "\n".join(lines)
