"""@limited(limit=3) contended by 8 processes: throughput and the most holders ever inside."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import redis

from .candidates import redlock_deco_limited


def _worker(url: str, start: float, stop: float, gauge: Any, out: Any) -> None:
    run = redlock_deco_limited(3)(url, "bench:sem", 10.0)
    count = 0

    def body() -> None:
        nonlocal count
        with gauge.get_lock():
            gauge.value += 1
            peak = gauge.value
        time.sleep(0.001)  # hold the slot a moment, so the slots fill up
        with gauge.get_lock():
            gauge.value -= 1
        count += 1
        out_peaks.append(peak)

    out_peaks: list[int] = []
    time.sleep(max(0.0, start - time.monotonic()))
    while time.monotonic() < stop:
        run(body)
    out.put((count, max(out_peaks, default=0)))


def measure(url: str, processes: int = 8, seconds: float = 3.0) -> tuple[float, int]:
    ctx = multiprocessing.get_context("fork")
    redis.Redis.from_url(url).flushall()
    gauge, out = ctx.Value("i", 0), ctx.Queue()
    start = time.monotonic() + 1.0
    stop = start + seconds
    workers = [ctx.Process(target=_worker, args=(url, start, stop, gauge, out))
               for _ in range(processes)]  # fmt: skip
    for worker in workers:
        worker.start()
    results = [out.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join(10)
    return sum(r[0] for r in results) / seconds, max(r[1] for r in results)
