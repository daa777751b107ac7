"""``python -m tests.simulation``: run seeded schedules; replay and shrink a failing one.

python -m tests.simulation --seeds 1000000 --jobs 2     # the long run (prints coverage)
python -m tests.simulation --seed 4242                  # replay one seed: its schedule
python -m tests.simulation --seed 4242 --no-shrink      # ... as drawn, not shrunk
python -m tests.simulation --seeds 5000 --skip terms    # leave a check out
python -m tests.simulation --known fresh                # a finding already reported: a
                                                        # schedule failing it ends, uncounted
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import sys
import time
from collections import Counter

from redlock_deco import _scripts as scripts

from . import runner
from .invariants import CHECKS
from .world import Options

# The operations the simulated clients run, and their scripts.
OPERATIONS = {
    "acquire": ("lock_acquire", "shared_acquire", "sem_acquire"),
    "release": ("lock_release", "shared_release", "sem_release"),
    "extend": ("lock_extend", "shared_extend", "sem_extend"),
}


def coverage_report(coverage: Counter[str]) -> str:
    """Counts of every script reply and grant path reached, and the reply codes of the
    scripts the clients run that no schedule reached (holes in the fault weights)."""
    lines = ["coverage (times reached across all schedules):"]
    for key, count in sorted(coverage.items()):
        lines.append(f"  {count:>12,}  {key}")
    holes = []
    for (operation, code), _ in scripts.REPLIES.items():
        for script in OPERATIONS.get(operation, ()):
            if not coverage.get(f"script {script} -> {code}"):
                holes.append(f"{script} -> {code}")
    lines.append("reply codes never reached: " + (", ".join(holes) if holes else "none"))
    return "\n".join(lines)


def run_parallel(start: int, count: int, jobs: int, options: Options) -> runner.Summary:
    total = runner.Summary()
    began = time.perf_counter()
    chunk = 2000
    work = [(s, min(chunk, start + count - s), options) for s in range(start, start + count, chunk)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for part in pool.imap(runner.run_chunk, work):
            total.seeds += part.seeds
            total.events += part.events
            total.coverage.update(part.coverage)
            total.failures.extend(part.failures)
            if total.seeds % 20_000 < chunk:
                rate = total.seeds / (time.perf_counter() - began)
                print(f"  {total.seeds:,} schedules, {rate:,.0f}/s, "
                      f"{len(total.failures)} failing", flush=True)  # fmt: skip
            if total.failures:
                pool.terminate()
                break
    total.wall = time.perf_counter() - began
    return total


def replay(seed: int, options: Options, shrink: bool) -> int:
    plan = runner.plans.generate(seed)
    result = runner.run_plan(plan, options)
    if result.violation is None and result.known is not None:
        print(f"seed {seed}: ends on a known finding: {result.known}")
        return 0
    if result.violation is None:
        virtual = f"{result.events} events, {result.seconds:.2f}s virtual"
        print(f"seed {seed}: no violation ({virtual})")
        return 0
    if shrink:
        plan = runner.shrink(plan, options)
    traced = runner.run_plan(plan, dataclasses.replace(options, trace=True))
    print(runner.format_trace(traced))
    print(f"\nseed {seed} fails: {result.violation}")
    if traced.violation is not None and str(traced.violation) != str(result.violation):
        print(f"(shrunk, it fails with: {traced.violation})")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.simulation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", type=int, default=20_000, help="how many schedules")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="replay this seed and print its schedule")
    parser.add_argument("--no-shrink", action="store_true", help="print a failure as drawn")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--skip", default="", help=f"checks to leave out: {', '.join(CHECKS)}")
    parser.add_argument("--known", default="", help="checks that fail on the code as it is: "
                        "a schedule failing one ends there, not counted")  # fmt: skip
    args = parser.parse_args(argv)
    skip = frozenset(s for s in args.skip.split(",") if s)
    known = frozenset(s for s in args.known.split(",") if s)
    options = Options(skip=skip, known=known)
    unknown = (skip | known) - set(CHECKS)
    if unknown:
        parser.error(f"unknown checks {sorted(unknown)}; known: {', '.join(CHECKS)}")
    if args.seed is not None:
        return replay(args.seed, options, not args.no_shrink)
    print(f"running {args.seeds:,} schedules from seed {args.start}"
          + (f" on {args.jobs} processes" if args.jobs > 1 else ""), flush=True)  # fmt: skip
    if args.jobs > 1:
        summary = run_parallel(args.start, args.seeds, args.jobs, options)
    else:

        def progress(s: runner.Summary) -> None:
            print(f"  {s.seeds:,} schedules, {s.seeds / s.wall:,.0f}/s", flush=True)

        summary = runner.run_many(
            range(args.start, args.start + args.seeds), options, progress=progress
        )
    print(coverage_report(summary.coverage))
    print(
        f"{summary.seeds:,} schedules, {summary.events:,} events in {summary.wall:.1f}s "
        f"({summary.seeds / max(summary.wall, 1e-9):,.0f} schedules/s)"
    )
    if summary.failures:
        first = summary.failures[0]
        print(f"\nseed {first.plan.seed} fails: {first.violation}; its schedule, shrunk:\n")
        replay(first.plan.seed, options, shrink=True)
        return 1
    print("no invariant broken")
    return 0


if __name__ == "__main__":
    sys.exit(main())
