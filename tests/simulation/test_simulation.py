"""The deterministic simulator, run over many seeds (see tests/simulation/README.md).

The default run takes a few thousand schedules; the ``simulation`` leg runs at least 20,000
(``pytest -m simulation``), and ``python -m tests.simulation --seeds N`` runs any number.
"""

from __future__ import annotations

import os

import pytest

from . import plan as plans
from . import runner
from .world import Options

FAST_SEEDS = 1500
# The CI leg: at least 20,000 schedules, split so pytest-xdist can run the parts side by side.
LONG_SEEDS = int(os.environ.get("REDLOCK_DECO_SIMULATION_SEEDS", "24000"))
LONG_PARTS = 4


def _fail(summary: runner.Summary) -> None:
    if not summary.failures:
        return
    first = summary.failures[0]
    shrunk = runner.shrink(first.plan)
    traced = runner.run_plan(shrunk, Options(trace=True))
    pytest.fail(
        f"seed {first.plan.seed} fails: {first.violation}\n"
        f"replay: python -m tests.simulation --seed {first.plan.seed}\n\n"
        + runner.format_trace(traced),
        pytrace=False,
    )


def test_seeded_schedules() -> None:
    summary = runner.run_many(range(FAST_SEEDS))
    _fail(summary)
    assert summary.seeds == FAST_SEEDS


@pytest.mark.simulation
@pytest.mark.parametrize("part", range(LONG_PARTS))
def test_many_seeded_schedules(part: int) -> None:
    size = LONG_SEEDS // LONG_PARTS
    start = 1_000_000 + part * size
    summary = runner.run_many(range(start, start + size))
    _fail(summary)
    assert summary.seeds == size


def test_a_schedule_replays_exactly() -> None:
    """The same seed gives the same schedule, event for event."""
    for seed in (3, 17, 29):
        first = runner.run_plan(plans.generate(seed), Options(trace=True))
        second = runner.run_plan(plans.generate(seed), Options(trace=True))
        assert first.trace == second.trace and first.events == second.events > 20


def test_the_schedules_reach_every_reply_and_fault() -> None:
    """What the seeds reach: every reply code of the scripts the clients run, hand-offs,
    grants read, retries, and each kind of fault (a zero here is a hole in the weights)."""
    summary = runner.run_many(range(400))
    reached = summary.coverage
    for script, codes in {
        "lock_acquire": (0, 1),
        "shared_acquire": (0, 1),
        "sem_acquire": (0, 1),
        "lock_release": (0, 1, 2),
        "shared_release": (1, 2),
        "sem_release": (1, 2),
        "lock_extend": (0, 1),
        "sem_extend": (0, 1),
        "shared_extend": (0, 1),
    }.items():
        for code in codes:
            assert reached[f"script {script} -> {code}"], f"{script} never answered {code}"
    for path in (
        "grant: read by its waiter",
        "publish: nobody heard (waiter skipped)",
        "client retry re-sends a command",
        "NOSCRIPT -> EVAL",
        "renewal: extended",
        "renewal: lost",
        "session: LockLost",
        "fast path: taken",
        "fast path: busy",
    ):
        assert reached[path], f"no schedule reached {path!r}"
    for fault in ("pause", "holder", "kill", "drop", "restart", "stall", "jump"):
        assert reached[f"timed: {fault}"], f"no {fault} fault fired"
    for fault in ("cmd", "msg"):
        assert reached[f"fault: {fault}"], f"no {fault} fault fired"


def test_a_failure_is_found_replayed_and_shrunk() -> None:
    """The checks can fail: a script that serves a semaphore's queue without looking at the
    waiter's limit (the a02 finding) is caught, and shrinking keeps it failing with less."""

    def no_limit(source: str) -> str:
        return source.replace(
            "if redis.call('ZCARD', holders) >= own_limit then", "if false then"
        ).replace("while served < free do", "while served < 99 do")

    options = Options(transform=no_limit)
    summary = runner.run_many(range(3000), options)
    assert summary.failures, "a semaphore served past its waiters' limits went unnoticed"
    first = summary.failures[0]
    assert first.violation is not None and first.violation.check == "limit"
    again = runner.run_plan(first.plan, options)
    assert str(again.violation) == str(first.violation)
    shrunk = runner.shrink(first.plan, options)
    result = runner.run_plan(shrunk, options)
    assert result.violation is not None and result.violation.check == "limit"
    size = sum(len(a.sessions) for a in shrunk.actors)
    assert size <= sum(len(a.sessions) for a in first.plan.actors)
