"""Uncontended acquire+release cycles/s, interleaved rounds on one throwaway server.

Every candidate runs in each round, in turn, so machine noise hits them alike; the report is
the median per candidate and its ratio to the raw floor (SET NX PX + one EVALSHA) measured in
the same run.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import redis

from .candidates import LOCKS, RELEASE, redlock_deco_limited

FLOOR = "floor (SET NX PX + EVALSHA)"
SCRIPTS = "redlock-deco's two Lua scripts, called raw"


def candidates(url: str) -> dict[str, Callable[[], object]]:
    client = redis.Redis.from_url(url)
    sha = client.script_load(RELEASE)

    def floor() -> None:
        client.set("bench:floor", "token", nx=True, px=30000)
        client.evalsha(sha, 1, "bench:floor", "token")

    runs: dict[str, Callable[[], object]] = {FLOOR: floor}
    ours = our_scripts(client)
    if ours:
        runs[SCRIPTS] = ours
    for library, (factory, _) in LOCKS.items():
        if library != "raw 1 ms polling":  # uncontended, it is the floor
            run = factory(url, f"bench:{library}", 30.0)
            runs[library] = lambda run=run: run(_nothing)
    limited_run = redlock_deco_limited(3)(url, "bench:limited", 30.0)
    runs["redlock-deco @limited(limit=3)"] = lambda: limited_run(_nothing)
    return runs


def our_scripts(client: redis.Redis) -> Callable[[], object] | None:
    """Our acquire and release scripts sent directly, laid out by the library's own protocol
    core: separates what the Lua costs from what the library does. These are internals, so
    when they no longer fit this harness the row is left out with a note, not the run."""
    try:
        from redlock_deco import _drivers as drivers
        from redlock_deco import _protocol as protocol

        claim = protocol.Claim(
            kind=protocol.LOCK,
            keys=protocol.Keys.for_key("bench:ours", protocol.LOCK),
            token="host:1:" + "0" * 32,
            ttl_ms=30000,
        )
        acquire, release = claim.acquire_step(0), claim.release_step()  # 0: try once
        for step in (acquire, release):
            client.script_load(step.script.source)
        if client.execute_command(*drivers.command(acquire))[0] != 1:
            raise RuntimeError("the raw acquire did not acquire")
        client.execute_command(*drivers.command(release))
    except Exception as exc:
        print(f"... skipped {SCRIPTS!r}: {exc!r}", file=sys.stderr, flush=True)
        return None
    first, second = drivers.command(acquire), drivers.command(release)
    return lambda: (client.execute_command(*first), client.execute_command(*second))


def _nothing() -> None:
    pass


def measure(url: str, cycles: int = 2000, rounds: int = 7) -> dict[str, float]:
    runs = candidates(url)
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


def listener_overhead(url: str, cycles: int = 1000, rounds: int = 7) -> tuple[float, float]:
    """Uncontended @locked cycles/s with no listener and with one (counting events),
    interleaved round by round. Returns (without, with)."""
    from redlock_deco import add_listener, locked, register_provider, remove_listener

    register_provider("default", url)

    @locked("bench:listened", ttl=30)
    def cycle() -> None: ...

    counted = [0]

    def count(event: object) -> None:
        counted[0] += 1

    samples: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(200):
        cycle()
    for _ in range(rounds):
        for listening in (False, True):
            if listening:
                add_listener(count)
            started = time.perf_counter()
            for _ in range(cycles):
                cycle()
            samples[listening].append(cycles / (time.perf_counter() - started))
            if listening:
                remove_listener(count)
    assert counted[0] == 2 * cycles * rounds  # acquired + released, every cycle
    return statistics.median(samples[False]), statistics.median(samples[True])
