"""Running schedules: one seed, many seeds, replaying a failure, shrinking it."""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from . import plan as plans
from .invariants import KnownFinding, Violation
from .world import US, Options, World


@dataclass
class Result:
    plan: plans.Plan
    violation: Violation | None
    events: int
    seconds: float  # virtual
    coverage: Counter[str] = field(default_factory=Counter)
    trace: list[tuple[int, str]] = field(default_factory=list)
    known: Violation | None = None  # a known finding ended it

    @property
    def failed(self) -> bool:
        return self.violation is not None


def run_plan(plan: plans.Plan, options: Options | None = None) -> Result:
    world = World(plan, options)
    violation = None
    known = None
    try:
        world.run()
    except KnownFinding as exc:
        known = exc
        world.note(f"KNOWN FINDING {exc}")
        world.coverage[f"known finding: {exc.check}"] += 1
    except Violation as exc:
        violation = exc
        world.note(f"VIOLATION {exc}")
    except Exception as exc:  # the simulated code (or the simulator) raised
        where = traceback.extract_tb(exc.__traceback__)[-1]
        violation = Violation(
            "crash", f"{type(exc).__name__}: {exc} ({where.filename}:{where.lineno})"
        )
        world.note(f"CRASH {violation}")
    result = Result(plan, violation, world.events, world.now / US, world.coverage, world.trace)
    result.known = known
    return result


def run_seed(seed: int, options: Options | None = None) -> Result:
    return run_plan(plans.generate(seed), options)


@dataclass
class Summary:
    seeds: int = 0
    events: int = 0
    failures: list[Result] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0


def run_many(
    seeds: Iterable[int],
    options: Options | None = None,
    stop_after: int | None = 1,
    progress: Callable[[Summary], None] | None = None,
) -> Summary:
    summary = Summary()
    started = time.perf_counter()
    for seed in seeds:
        result = run_seed(seed, options)
        summary.seeds += 1
        summary.events += result.events
        summary.coverage.update(result.coverage)
        if result.failed:
            summary.failures.append(result)
            if stop_after is not None and len(summary.failures) >= stop_after:
                break
        if progress is not None and summary.seeds % 5000 == 0:
            summary.wall = time.perf_counter() - started
            progress(summary)
    summary.wall = time.perf_counter() - started
    return summary


def run_chunk(args: tuple[int, int, Options]) -> Summary:
    """``run_many`` over ``count`` seeds from ``start`` (a worker process's share)."""
    start, count, options = args
    return run_many(range(start, start + count), options, stop_after=1)


def same_failure(result: Result, check: str) -> bool:
    return result.violation is not None and result.violation.check == check


def shrink(plan: plans.Plan, options: Options | None = None, budget: int = 400) -> plans.Plan:
    """A smaller plan that still fails the same check: drop actors, sessions, timed faults and
    rate-drawn faults (by label) while it does."""
    first = run_plan(plan, options)
    if first.violation is None:
        return plan
    check = first.violation.check
    runs = 0

    def still_fails(candidate: plans.Plan) -> bool:
        nonlocal runs
        runs += 1
        return same_failure(run_plan(candidate, options), check)

    changed = True
    while changed and runs < budget:
        changed = False
        for actor in list(plan.actors):
            if len(plan.actors) > 1 and runs < budget:
                candidate = plan.without_actor(actor.index)
                if still_fails(candidate):
                    plan, changed = candidate, True
        for actor in list(plan.actors):
            sessions = actor.sessions
            for i in range(len(sessions)):
                if len(sessions) > 1 and runs < budget:
                    fewer = sessions[:i] + sessions[i + 1 :]
                    candidate = plan.with_sessions(actor.index, fewer)
                    if still_fails(candidate):
                        plan, changed = candidate, True
                        break
        for i in reversed(range(len(plan.timed))):
            if runs < budget:
                candidate = plan.without_timed(i)
                if still_fails(candidate):
                    plan, changed = candidate, True
        # Faults drawn from rates: silence each one that fired, while it still fails.
        traced = run_plan(plan, dataclasses.replace(options or Options(), trace=True))
        for label in fired_faults(traced):
            if runs < budget:
                candidate = plan.silencing(label)
                if still_fails(candidate):
                    plan, changed = candidate, True
        # Simpler sessions: no think time, shorter holds.
        for actor in list(plan.actors):
            for i, session in enumerate(actor.sessions):
                simpler = dataclasses.replace(session, think=0.0)
                if simpler != session and runs < budget:
                    sessions = (*actor.sessions[:i], simpler, *actor.sessions[i + 1 :])
                    candidate = plan.with_sessions(actor.index, sessions)
                    if still_fails(candidate):
                        plan, changed = candidate, True
                        actor = next(a for a in plan.actors if a.index == actor.index)
    return plan


def fired_faults(result: Result) -> list[str]:
    labels = []
    for _, text in result.trace:
        start = text.rfind("[")
        if start >= 0 and text.endswith("]"):
            label = text[start + 1 : -1]
            if label.startswith(("cmd:", "msg:", "sub:")):
                labels.append(label)
    return labels


def format_trace(result: Result) -> str:
    lines = [result.plan.describe(), "schedule:"]
    for when, text in result.trace:
        lines.append(f"  {when / US:9.4f}s  {text}")
    return "\n".join(lines)
