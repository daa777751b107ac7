"""One key contended by N processes, for each library in turn.

Workers are forked (cheap enough for 64 of them on 2 cores), start together at an agreed
instant, and run for a fixed time. Shared memory carries a deliberately non-atomic counter
(lost updates), the last release instant and its holder (hand-off latency: release -> next
holder inside, when the lock changes hands). Each worker reports its own count (fairness) and
its round trips; ``INFO commandstats`` gives the commands the server executed and the
microseconds it spent in them.
"""

from __future__ import annotations

import cProfile
import multiprocessing
import os
import pstats
import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from .candidates import LOCKS, count_round_trips
from .commands import server_load


@dataclass
class Contended:
    library: str
    processes: int
    cycles: int
    seconds: float
    lost_updates: int
    gaps: list[float]
    counts: list[int]
    round_trips: int
    commands: int
    server_usec: int
    client_cpu: float  # all workers' process time, seconds
    server_cpu: float  # the server's user + system CPU over the run (INFO cpu), seconds
    work: float = 0.0  # seconds slept inside each critical section
    client_system: float = 0.0  # of it, in the kernel (syscalls, scheduling), seconds
    switches: int = 0  # all workers' context switches (voluntary: blocked; and preempted)
    script_usec: int = 0  # the server's time in EVALSHA/EVAL, their inner commands included
    publishes: int = 0  # PUBLISH calls (a hand-off's grant message)
    # The hand-off broken down (seconds): each release, from just before it is sent to the
    # releaser's call returning; and, where the library reports a grant's arrival (ours),
    # release sent -> grant read by the next holder's process, and grant read -> inside.
    releases: list[float] = field(default_factory=list)
    deliveries: list[float] = field(default_factory=list)
    wake_ups: list[float] = field(default_factory=list)
    # One worker's own time under cProfile, by where it was spent (seconds), when profiled.
    profile: dict[str, float] = field(default_factory=dict)

    def per_cs(self, total: float) -> float:
        """``total`` per critical section (one acquire + release)."""
        return total / max(1, self.cycles)

    @property
    def throughput(self) -> float:
        return self.cycles / self.seconds

    @property
    def fairness(self) -> float:
        return min(self.counts) / max(self.counts) if max(self.counts) else 0.0

    def percentile(self, fraction: float) -> float:
        if not self.gaps:
            return float("nan")
        ordered = sorted(self.gaps)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def where(path: str, function: str) -> str:
    """The part of the client a profiled function belongs to."""
    if "redlock_deco" in path:
        return "redlock-deco: " + path.rsplit("/", 1)[-1].removesuffix(".py")
    if "/redis/" in path:
        if "connection" in path and function in ("get_connection", "release", "make_connection"):
            return "redis-py: pool checkout and return"
        return "redis-py: " + ("parser" if "_parsers" in path else "other")
    if path == "~":  # a builtin: say which kind
        if any(word in function for word in ("recv", "send", "poll", "select", "socket")):
            return "socket I/O (kernel calls)"
        if any(word in function for word in ("acquire", "release", "wait", "lock")):
            return "thread locks and waits"
        return "other builtins"
    if "benchmarks" in path:
        return "the benchmark's own loop"
    return "other Python (standard library)"


def _profiled(profile: cProfile.Profile) -> dict[str, float]:
    spent: dict[str, float] = {}
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (path, _, function), (_, _, own, _, _) in stats.items():
        part = where(path, function)
        spent[part] = spent.get(part, 0.0) + own
    return spent


def _worker(
    library: str, url: str, key: str, index: int, start: float, stop: float,
    shared: Any, out: Any, work: float, profile: bool = False,
) -> None:  # fmt: skip
    trips = count_round_trips()
    factory, _ = LOCKS[library]
    run = factory(url, key, 10.0)
    counter, last_release, last_holder = shared
    gaps: list[float] = []
    releases: list[float] = []
    deliveries: list[float] = []
    wake_ups: list[float] = []
    grant = _grants_seen()
    count = 0

    def body() -> None:
        nonlocal count
        entered = time.monotonic()
        if last_holder.value not in (index, -1) and last_release.value > start:
            gaps.append(entered - last_release.value)
            if grant[0] > last_release.value:  # this entry came by a grant, read then
                deliveries.append(grant[0] - last_release.value)
                wake_ups.append(entered - grant[0])
        value = counter.value
        counter.value = value + 1  # not atomic on purpose: overlaps lose updates
        count += 1
        if work:
            time.sleep(work)
        last_holder.value = index
        last_release.value = time.monotonic()  # the release follows at once

    time.sleep(max(0.0, start - time.monotonic()))
    baseline = trips()
    # CPU time, not the wall clock: a worker asleep waiting for its grant spends nothing.
    profiler = cProfile.Profile(time.process_time) if profile and index == 0 else None
    cpu, system, switched = time.process_time(), os.times().system, _switches()
    if profiler is not None:
        profiler.enable()
    while time.monotonic() < stop:
        run(body)
        if last_holder.value == index:
            releases.append(time.monotonic() - last_release.value)
    if profiler is not None:
        profiler.disable()
    out.put((index, count, gaps, trips() - baseline, time.process_time() - cpu, releases,
             deliveries, wake_ups, os.times().system - system, _switches() - switched,
             _profiled(profiler) if profiler is not None else {}))  # fmt: skip


def _switches() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def _scripts_and_publishes(client: Any) -> tuple[int, int]:
    """(µs in EVALSHA and EVAL, PUBLISH calls) since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    scripts = sum(stats.get(f"cmdstat_{name}", {}).get("usec", 0) for name in ("evalsha", "eval"))
    return scripts, stats.get("cmdstat_publish", {}).get("calls", 0)


def _grants_seen() -> list[float]:
    """[when this process last read a grant] (0.0: never), kept by wrapping redlock-deco's
    grant delivery (the benchmark's own instrument: the library keeps no such record)."""
    from redlock_deco import _waiting

    seen = [0.0]
    original = _waiting.Handoff.granted

    def granted(self: Any, at: float) -> None:
        seen[0] = at
        original(self, at)

    _waiting.Handoff.granted = granted  # type: ignore[method-assign]
    return seen


def server_cpu(client: Any) -> float:
    """The server's user + system CPU seconds so far: networking included, and a script's
    inner commands counted once (unlike commandstats)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def contend(url: str, library: str, processes: int, seconds: float, work: float = 0.0,
            profile: bool = False) -> Contended:  # fmt: skip
    """``processes`` workers loop critical sections on one key for ``seconds``, each section
    sleeping ``work`` seconds inside (0: a tight loop); ``profile``: worker 0 under cProfile
    (it slows that worker: its figures are for where the time goes, not how much)."""
    ctx = multiprocessing.get_context("fork")
    key = f"bench:contended:{processes}:{work}"
    shared = (ctx.Value("q", 0, lock=False), ctx.Value("d", 0.0, lock=False),
              ctx.Value("i", -1, lock=False))  # fmt: skip
    out = ctx.Queue()
    client = redis.Redis.from_url(url)
    client.flushall()
    client.config_resetstat()
    start = time.monotonic() + 1.0 + processes * 0.02  # everyone forked and connected by then
    stop = start + seconds
    workers = [
        ctx.Process(
            target=_worker, args=(library, url, key, i, start, stop, shared, out, work, profile)
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(max(0.0, start - time.monotonic()))
    cpu_before = server_cpu(client)
    results = [out.get(timeout=seconds + 120) for _ in workers]
    for worker in workers:
        worker.join(30)
    cpu_after = server_cpu(client)
    commands, usec = server_load(client)
    scripts, publishes = _scripts_and_publishes(client)
    cycles = sum(r[1] for r in results)
    return Contended(
        library=library,
        processes=processes,
        cycles=cycles,
        seconds=seconds,
        lost_updates=cycles - shared[0].value,
        gaps=[g for r in results for g in r[2]],
        counts=[r[1] for r in sorted(results)],
        round_trips=sum(r[3] for r in results),
        commands=commands,
        server_usec=usec,
        client_cpu=sum(r[4] for r in results),
        client_system=sum(r[8] for r in results),
        switches=sum(r[9] for r in results),
        script_usec=scripts,
        publishes=publishes,
        releases=[x for r in results for x in r[5]],
        deliveries=[x for r in results for x in r[6]],
        wake_ups=[x for r in results for x in r[7]],
        server_cpu=cpu_after - cpu_before,
        work=work,
        profile=next((r[10] for r in results if r[10]), {}),
    )


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")
