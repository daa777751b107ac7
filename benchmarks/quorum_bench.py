"""Redlock quorum cost: uncontended @locked cycles/s on 3 and 5 independent masters against
one master, interleaved in one run on throwaway servers."""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack

from redlock_deco import locked, register_provider
from redlock_deco.testing import RedisServer


def measure(cycles: int = 1000, rounds: int = 5) -> dict[str, float]:
    with ExitStack() as stack:
        servers = [stack.enter_context(RedisServer()) for _ in range(5)]
        register_provider("bench-single", servers[0].url)
        register_provider("bench-q3", [s.url for s in servers[:3]])
        register_provider("bench-q5", [s.url for s in servers])

        @locked("bench:{n}", provider="bench-single")
        def single(n: int) -> None: ...

        @locked("bench:{n}", provider="bench-q3")
        def quorum3(n: int) -> None: ...

        @locked("bench:{n}", provider="bench-q5")
        def quorum5(n: int) -> None: ...

        runs = {"1 master": single, "quorum of 3 masters": quorum3, "quorum of 5 masters": quorum5}
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for fn in runs.values():
            for _ in range(100):
                fn(1)
        for _ in range(rounds):
            for name, fn in runs.items():
                started = time.perf_counter()
                for _ in range(cycles):
                    fn(1)
                samples[name].append(cycles / (time.perf_counter() - started))
        return {name: statistics.median(values) for name, values in samples.items()}


def report(rates: dict[str, float]) -> str:
    single = next(iter(rates.values()))
    lines = ["| provider | cycles/s | vs 1 master |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {rate:,.0f} | {rate / single:.2f}x |" for name, rate in rates.items()]
    return "\n".join(lines)
