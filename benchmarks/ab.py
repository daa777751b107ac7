"""Same-run A/B of two source trees: ``python -m benchmarks.ab OLD NEW``.

Each tree is a folder holding a ``redlock_deco`` package (a ``git worktree add /tmp/old <rev>``
is one). Every round runs, for each tree in turn (the order alternates between rounds, so a
machine that slows down or speeds up hurts neither side more), a fresh Python process
importing that tree's package against one redis-server started here:

- ``uncontended``: a ``@locked`` function called in a loop: cycles per second, and the
  process's CPU time per cycle (client CPU: what a busy machine's other tenants disturb
  least);
- ``contended``: 8 processes taking one ``Lock`` in turn: critical sections per second,
  and all workers' CPU time per critical section.

Printed: each round, then the medians and NEW/OLD ratios. Issue 23 used it to compare the tree
before the refactor (67d8bd6) with its result, and found a renewer thread woken on every lock
cycle (1251185). On a shared 2-core machine a ratio within about 0.05 of 1 is noise.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODES = ("uncontended", "contended")
PROCESSES = 8


def _worker(url: str, start_at: float, stop_at: float, out: Any) -> None:
    import redlock_deco

    redlock_deco.register_provider("default", url)
    sections = 0
    time.sleep(max(0.0, start_at - time.time()))  # all together, once every one has started
    cpu = time.process_time()
    while time.time() < stop_at:
        with redlock_deco.Lock("ab:contended", ttl=10, wait=30):
            sections += 1
    out.put((sections, time.process_time() - cpu))


def child(url: str, mode: str, seconds: float) -> str:
    """One measurement, in a process whose ``redlock_deco`` is the tree's."""
    import redlock_deco

    redlock_deco.register_provider("default", url)
    if mode == "uncontended":

        @redlock_deco.locked("ab:{n}", ttl=10)
        def call(n: int) -> int:
            return n

        for n in range(300):  # warm: scripts loaded, connections made
            call(n)
        cpu, started, cycles = time.process_time(), time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            for n in range(100):
                call(n)
            cycles += 100
        elapsed = time.perf_counter() - started
        return f"{cycles / elapsed:.1f} {(time.process_time() - cpu) / cycles * 1e6:.1f}"
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    start_at = time.time() + 5.0  # spawned workers import first
    stop_at = start_at + seconds
    workers = [
        context.Process(target=_worker, args=(url, start_at, stop_at, out))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=seconds + 120) for _ in workers]
    for worker in workers:
        worker.join(30)
    total = sum(sections for sections, _ in results)
    cpu = sum(seconds for _, seconds in results)
    return f"{total / seconds:.1f} {cpu / max(1, total) * 1e6:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("old", type=Path, help="a folder holding the old redlock_deco")
    parser.add_argument("new", type=Path, help="a folder holding the new redlock_deco")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (3)")
    args = parser.parse_args(argv)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for tree in trees.values():
        if not (tree / "redlock_deco" / "__init__.py").exists():
            parser.error(f"{tree} holds no redlock_deco package")
    from redlock_deco.testing import RedisServer

    found: dict[tuple[str, str], list[tuple[float, float]]] = {
        (side, mode): [] for side in trees for mode in MODES
    }
    with RedisServer() as server:
        for round_ in range(args.rounds):
            sides = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
            for mode in MODES:
                for side, tree in sides:
                    done = subprocess.run(
                        [sys.executable, __file__, "--child", server.url, mode, str(args.seconds)],
                        env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                        text=True, timeout=args.seconds + 300, check=True,
                    )  # fmt: skip
                    rate, cpu = map(float, done.stdout.split())
                    found[(side, mode)].append((rate, cpu))
                    server.client().flushall()
            print(f"round {round_ + 1}:", {f"{s} {m}": v[-1][0] for (s, m), v in found.items()})
    for mode in MODES:
        old = statistics.median(rate for rate, _ in found[("old", mode)])
        new = statistics.median(rate for rate, _ in found[("new", mode)])
        print(f"{mode}: old {old:.0f}/s, new {new:.0f}/s, new/old {new / old:.3f}")
    for mode in MODES:
        old_cpu = statistics.median(cpu for _, cpu in found[("old", mode)])
        new_cpu = statistics.median(cpu for _, cpu in found[("new", mode)])
        print(f"{mode} client CPU: old {old_cpu:.1f} us, new {new_cpu:.1f} us per cycle, "
              f"new/old {new_cpu / old_cpu:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(child(sys.argv[2], sys.argv[3], float(sys.argv[4])))
    else:
        sys.exit(main())
