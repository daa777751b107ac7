"""The reader-writer lock (``Lock(name, shared=True)``): do readers scale, and how long does a
writer wait behind a stream of readers?

1. Reader scaling: 1 and then 8 processes, each looping ``with Lock(name, shared=True):``
   around ~5 ms of sleeping work, and the same 8 with an exclusive ``Lock(name)`` as the
   serialising baseline; completed holds per second, and the most holders inside at once.
2. Writer hand-off: 6 processes loop overlapping shared holds of ~20 ms (15-25 ms, so they
   do not march in step), while one writer process takes ``Lock(name, wait=30)`` 40 times,
   a pause apart, and times each acquire; FIFO means a queued writer stops new readers, so
   it should wait about one reader hold (the readers inside finish) plus a hand-off.

Workers are spawned, each builds its own client and warms up, then all start at a barrier
and run for a fixed time. A shared gauge counts holders inside: the most at once, and any
reader inside together with the writer (overlaps), are reported.

Standalone: ``python -m benchmarks.shared_bench [--seconds 3]`` (its own redis-server).
"""

from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from .contention import server_cpu

PROCESSES = 8
HOLD = 0.005  # reader scaling: simulated work per hold
STREAM_READERS = 6
STREAM_HOLD = (0.015, 0.025)  # writer hand-off: each reader hold, uniform in this range
WRITES = 40
SETTLE = 0.3  # the reader stream runs this long before the writer's first acquire


@dataclass
class SharedRun:
    # label -> (processes, shared?, completed holds/s, most holders inside at once, client
    # CPU and server CPU seconds per hold)
    scaling: dict[str, tuple[int, bool, float, int, float, float]] = field(default_factory=dict)
    waits: list[float] = field(default_factory=list)  # the writer's acquire waits, seconds
    stream_reads: float = 0.0  # readers' completed holds/s while the writer was at it
    inside_at_ask: int = 0  # writer acquires asked while a reader was inside
    overlaps: int = 0  # a reader inside together with the writer (must be 0)
    seconds: float = 0.0  # the scaling runs' duration each

    def percentile(self, fraction: float) -> float:
        if not self.waits:
            return float("nan")
        ordered = sorted(self.waits)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _setup(url: str) -> None:
    from redlock_deco import register_provider

    register_provider("default", url)


def _enter(gauge: Any, peak: Any) -> None:
    with gauge.get_lock():
        gauge.value += 1
        if gauge.value > peak.value:
            peak.value = gauge.value


def _leave(gauge: Any) -> None:
    with gauge.get_lock():
        gauge.value -= 1


def _scaling_worker(
    url: str, name: str, shared: bool, seconds: float, barrier: Any, gauge: Any, peak: Any,
    out: Any,
) -> None:  # fmt: skip
    from redlock_deco import Lock

    _setup(url)
    lock = Lock(name, shared=shared, wait=120)
    for _ in range(3):  # warm-up: connections, scripts loaded, worker threads started
        with lock:
            pass
    barrier.wait(120)
    stop = time.monotonic() + seconds
    count = 0
    cpu = time.process_time()
    while time.monotonic() < stop:
        with lock:
            _enter(gauge, peak)
            time.sleep(HOLD)
            _leave(gauge)
        if time.monotonic() <= stop:  # only holds completed within the run
            count += 1
    out.put((count, time.process_time() - cpu))


def scaling(
    url: str, processes: int, shared: bool, seconds: float
) -> tuple[float, int, float, float]:
    """(completed holds/s, most holders inside at once, client CPU and server CPU seconds per
    hold) for ``processes`` looping holds."""
    ctx = multiprocessing.get_context("spawn")
    client = redis.Redis.from_url(url)
    client.flushall()
    name = f"bench:shared:{processes}:{shared}"
    barrier, out = ctx.Barrier(processes + 1), ctx.Queue()  # + this process: the start
    gauge, peak = ctx.Value("i", 0), ctx.Value("i", 0)
    workers = [
        ctx.Process(
            target=_scaling_worker,
            args=(url, name, shared, seconds, barrier, gauge, peak, out),
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    barrier.wait(180)
    before = server_cpu(client)
    results = [out.get(timeout=seconds + 180) for _ in workers]
    used = server_cpu(client) - before
    for worker in workers:
        worker.join(30)
    holds = max(1, sum(count for count, _ in results))
    return (sum(count for count, _ in results) / seconds, peak.value,
            sum(cpu for _, cpu in results) / holds, used / holds)  # fmt: skip


def _stream_reader(
    url: str, name: str, index: int, barrier: Any, done: Any, gauge: Any, writing: Any,
    overlaps: Any, out: Any,
) -> None:  # fmt: skip
    from redlock_deco import Lock

    _setup(url)
    lock = Lock(name, shared=True, wait=120)
    with lock:
        pass
    rng = random.Random(index)
    barrier.wait(120)
    time.sleep(index * sum(STREAM_HOLD) / 2 / STREAM_READERS)  # staggered: always one inside
    finished: list[float] = []
    while not done.is_set():
        with lock:
            with gauge.get_lock():
                gauge.value += 1
            if writing.value:
                with overlaps.get_lock():
                    overlaps.value += 1
            time.sleep(rng.uniform(*STREAM_HOLD))
            with gauge.get_lock():
                gauge.value -= 1
        finished.append(time.monotonic())
    out.put(("reads", finished))


def _writer(
    url: str, name: str, pause: float, barrier: Any, done: Any, gauge: Any, writing: Any,
    overlaps: Any, out: Any,
) -> None:  # fmt: skip
    from redlock_deco import Lock

    _setup(url)
    with Lock(name, wait=30):  # warm-up, before the readers start
        pass
    barrier.wait(120)
    time.sleep(SETTLE)
    began = time.monotonic()
    waits: list[float] = []
    inside_at_ask = 0
    for _ in range(WRITES):
        time.sleep(pause)
        inside_at_ask += gauge.value > 0
        asked = time.perf_counter()
        with Lock(name, wait=30):
            waits.append(time.perf_counter() - asked)
            writing.value = 1
            if gauge.value:
                with overlaps.get_lock():
                    overlaps.value += 1
            writing.value = 0
    ended = time.monotonic()
    done.set()
    out.put(("writer", (waits, inside_at_ask, began, ended)))


def writer_under_readers(url: str, seconds: float) -> tuple[list[float], float, int, int]:
    """(the writer's acquire waits, readers' holds/s meanwhile, acquires asked with a reader
    inside, overlaps) for one writer among ``STREAM_READERS`` looping readers."""
    ctx = multiprocessing.get_context("spawn")
    redis.Redis.from_url(url).flushall()
    name = "bench:shared:stream"
    pause = max(0.05, seconds / WRITES)
    barrier, done, out = ctx.Barrier(STREAM_READERS + 1), ctx.Event(), ctx.Queue()
    gauge, writing, overlaps = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Value("i", 0)
    common = (barrier, done, gauge, writing, overlaps, out)
    workers = [ctx.Process(target=_writer, args=(url, name, pause, *common))]
    workers += [
        ctx.Process(target=_stream_reader, args=(url, name, i, *common))
        for i in range(STREAM_READERS)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=WRITES * (pause + 30) + 180) for _ in workers]
    for worker in workers:
        worker.join(30)
    waits, inside_at_ask, began, ended = next(v for k, v in results if k == "writer")
    reads = sum(began <= t <= ended for k, v in results if k == "reads" for t in v)
    return waits, reads / (ended - began), inside_at_ask, overlaps.value


def measure(url: str, seconds: float = 3.0) -> SharedRun:
    run = SharedRun(seconds=seconds)
    for label, processes, shared in (
        ("1 reader, shared", 1, True),
        (f"{PROCESSES} readers, shared", PROCESSES, True),
        (f"{PROCESSES} processes, exclusive", PROCESSES, False),
    ):
        run.scaling[label] = (processes, shared, *scaling(url, processes, shared, seconds))
    run.waits, run.stream_reads, run.inside_at_ask, run.overlaps = writer_under_readers(
        url, seconds
    )
    return run


def summary(run: SharedRun) -> str:
    one = next(iter(run.scaling.values()))[2]
    lines = [f"reader scaling ({run.seconds:g} s each, {HOLD * 1000:g} ms hold):"]
    for label, (_, _, rate, peak, _, _) in run.scaling.items():
        lines.append(f"  {label:<24} {rate:8,.1f} holds/s  {rate / one:5.2f}x vs 1  peak {peak}")
    lines += [
        f"writer under {STREAM_READERS} readers ({len(run.waits)} acquires, reader holds "
        f"{STREAM_HOLD[0] * 1000:g}-{STREAM_HOLD[1] * 1000:g} ms):",
        f"  wait p50 {run.percentile(0.5) * 1000:.1f} ms, p95 {run.percentile(0.95) * 1000:.1f} "
        f"ms, max {max(run.waits, default=float('nan')) * 1000:.1f} ms",
        f"  readers meanwhile {run.stream_reads:,.1f} holds/s; asked with a reader inside "
        f"{run.inside_at_ask}/{len(run.waits)}; overlaps {run.overlaps}",
    ]
    return "\n".join(lines)


def main() -> int:
    import argparse

    from redlock_deco.testing import RedisServer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.shared_bench", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="per scaling run (3)")
    args = parser.parse_args()
    started = time.monotonic()
    with RedisServer() as server:
        run = measure(server.url, args.seconds)
    print(summary(run))
    print(f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
