"""One key contended by N processes, for each library in turn.

Workers are forked (cheap enough for 64 of them on 2 cores), start together at an agreed
instant, and run for a fixed time. Shared memory carries a deliberately non-atomic counter
(lost updates), the last release instant and its holder (hand-off latency: release -> next
holder inside, when the lock changes hands). Each worker reports its own count (fairness) and
its round trips; ``INFO commandstats`` gives the commands the server executed and the
microseconds it spent in them.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from dataclasses import dataclass
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


def _worker(
    library: str, url: str, key: str, index: int, start: float, stop: float,
    shared: Any, out: Any, work: float,
) -> None:  # fmt: skip
    trips = count_round_trips()
    factory, _ = LOCKS[library]
    run = factory(url, key, 10.0)
    counter, last_release, last_holder = shared
    gaps: list[float] = []
    count = 0

    def body() -> None:
        nonlocal count
        entered = time.monotonic()
        if last_holder.value not in (index, -1) and last_release.value > start:
            gaps.append(entered - last_release.value)
        value = counter.value
        counter.value = value + 1  # not atomic on purpose: overlaps lose updates
        count += 1
        if work:
            time.sleep(work)
        last_holder.value = index
        last_release.value = time.monotonic()  # the release follows at once

    time.sleep(max(0.0, start - time.monotonic()))
    baseline = trips()
    cpu = time.process_time()
    while time.monotonic() < stop:
        run(body)
    out.put((index, count, gaps, trips() - baseline, time.process_time() - cpu))


def server_cpu(client: Any) -> float:
    """The server's user + system CPU seconds so far: networking included, and a script's
    inner commands counted once (unlike commandstats)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def contend(url: str, library: str, processes: int, seconds: float, work: float = 0.0) -> Contended:
    """``processes`` workers loop critical sections on one key for ``seconds``, each section
    sleeping ``work`` seconds inside (0: a tight loop)."""
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
        ctx.Process(target=_worker, args=(library, url, key, i, start, stop, shared, out, work))
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
        server_cpu=cpu_after - cpu_before,
        work=work,
    )


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")
