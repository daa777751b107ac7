"""``python -m benchmarks``: every scenario in one run, then BENCHMARKS.md and the plot.

Starts its own redis-server; needs the ``bench`` extra (python-redis-lock, pottery,
py-redis-semaphore, limits, pyrate-limiter, matplotlib) for the comparison libraries and the
plot, and ``pip install --no-deps redis-semaphore-eval`` for the last semaphore anchor (its
metadata pins redis<4, so it cannot be in the extra; skipped with a note when absent).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from redlock_deco._inspection import describe_server
from redlock_deco.testing import RedisServer

from . import (
    asyncio_bench,
    commands,
    contention,
    crash,
    quorum_bench,
    scale,
    semaphore_bench,
    shared_bench,
    throttle_bench,
    uncontended,
    waiters,
)
from .candidates import KEYED, LOCKS
from .report import Results, markdown, plot, plot_scale

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="per contention run (3)")
    parser.add_argument("--cycles", type=int, default=1000, help="per uncontended round (1000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--many", type=int, default=64, help="processes in the big run (64)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write files")
    args = parser.parse_args()
    started = time.monotonic()
    with RedisServer() as server:
        info = server.client().info("server")
        results = Results(
            command="python -m benchmarks " + " ".join(sys.argv[1:]),
            server=describe_server(info),
            redis_binary=server.binary,
        )
        results.rtt = _rtt(server.client())
        step("uncontended")
        results.uncontended = uncontended.measure(server.url, args.cycles, args.rounds)
        results.load = commands.per_cycle(server.url)
        results.listeners = uncontended.listener_overhead(server.url, args.cycles, args.rounds)
        for processes in (8, args.many):
            results.contended[processes] = {}
            for library in LOCKS:
                step(f"{processes} processes: {library}")
                results.contended[processes][library] = contention.contend(
                    server.url, library, processes, args.seconds
                )
        for library in ("redlock-deco @locked", "redis-py Lock"):
            step(f"8 processes, one of them profiled: {library}")
            results.profiled[library] = contention.contend(
                server.url, library, 8, args.seconds, profile=True
            )
        for library in LOCKS:
            step(f"8 processes, 1 ms of work inside: {library}")
            results.worked[library] = contention.contend(
                server.url, library, 8, args.seconds, work=0.001
            )
        for library in LOCKS:
            step(f"crash recovery: {library} ({args.rounds} kills)")
            results.crash[library] = [
                crash.recovery(server.url, library) for _ in range(args.rounds)
            ]
        found, results.semaphore_missing = semaphore_bench.available()
        for library, install in results.semaphore_missing.items():
            step(f"semaphore: {library} is not installed, skipped (`{install}`)")
        for library in found:
            step(f"semaphore: {library}")
            results.semaphore[library] = semaphore_bench.measure(
                server.url, library, 8, args.seconds
            )
        # Its tight-loop rounds are 0.1 s each (short, to interleave finely): twice as many.
        results.throttle = throttle_bench.measure(
            server.url, args.seconds, 2 * args.rounds, step=step
        )
        step("reader-writer lock: reader scaling, writer under a reader stream")
        results.shared = shared_bench.measure(server.url, args.seconds)
        for mode in ("threads", "asyncio tasks"):
            step(f"{waiters.WAITERS:,} waiters in one process: {mode}")
            results.waiters.append(waiters.measure(server.url, mode))
        for count in scale.NAMES:
            for library in KEYED:
                step(f"{count:,} names, Zipf, {scale.PROCESSES} processes: {library}")
                results.names.append(scale.names(server.url, library, count, args.seconds))
        step("memory per key")
        results.memory = scale.memory(server.url)
        for tasks in scale.QUEUES:
            step(f"hand-offs with {tasks:,} tasks cycling on one name")
            results.queue.append(scale.queue(server.url, tasks, args.seconds))
    step("asyncio")
    results.asyncio = asyncio_bench.report(*asyncio_bench.measure(args.cycles // 2, args.rounds))
    step("quorum")
    results.quorum = quorum_bench.measure(args.cycles // 2, args.rounds)
    results.seconds = time.monotonic() - started
    text = markdown(results)
    if args.no_write:
        print(text)
    else:
        (ROOT / "BENCHMARKS.md").write_text(text)
        plot(results, ROOT / "benchmarks" / "handoff.png")
        plot_scale(results, ROOT / "benchmarks" / "scale.png")
        print(text)
        print(f"\nwrote BENCHMARKS.md, benchmarks/handoff.png and scale.png in "
              f"{results.seconds:.0f} s")  # fmt: skip
    return 0


def _rtt(client: object) -> float:
    """Median idle round trip (PING), the unit of DESIGN.md's hand-off target."""
    import statistics

    samples = []
    for _ in range(2000):
        started = time.perf_counter()
        client.ping()  # type: ignore[attr-defined]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def step(what: str) -> None:
    print(f"... {what}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
