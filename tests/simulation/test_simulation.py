"""The deterministic simulator, run over many seeds (see tests/simulation/README.md).

The default run takes a few thousand schedules; the ``simulation`` CI leg runs at least
20,000 and a rotating sample of the mutants (``pytest -m simulation tests/simulation``), and
``python -m tests.simulation --seeds N`` runs any number.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator

import pytest

from . import mutants, regressions, runner, scenarios
from . import plan as plans
from .world import Options

FAST_SEEDS = 1500
# The CI leg: at least 20,000 schedules, in parts that pytest-xdist runs side by side.
LONG_SEEDS = int(os.environ.get("REDLOCK_DECO_SIMULATION_SEEDS", "20000"))
# Small parts (a few seconds each) keep both workers busy to the end.
LONG_PARTS = 20
# Mutants per CI run (all of them with REDLOCK_DECO_MUTANTS=all), rotating by the day.
MUTANT_SAMPLE = 4
# Each is tried on its recorded killing seed first (mutants.SEED_HINTS), then on the rest.
MUTANT_SEEDS = 20_000

# Findings on the code as it is, each a check that fails (see the README): left out of the
# runs above until fixed, and each kept failing by a test below -- strict, so the fix shows
# as an unexpected pass, and the entry here must then go.
KNOWN_FINDINGS: dict[str, str] = {}
# Where each was first seen, and a few thousand seeds on.
FINDING_SEEDS: dict[str, range] = {}
CHECKED = Options(known=frozenset(KNOWN_FINDINGS))


@contextlib.contextmanager
def unmeasured() -> Iterator[None]:
    """Coverage off for a while: under a tracer the long run takes three times as long, and
    the README's run already measures what it reaches."""
    try:
        import coverage
    except ImportError:  # pragma: no cover - coverage is a test dependency
        yield
        return
    current = coverage.Coverage.current()
    if current is None:
        yield
        return
    current.stop()
    try:
        yield
    finally:
        current.start()


def _fail(summary: runner.Summary, options: Options = CHECKED) -> None:
    if not summary.failures:
        return
    first = summary.failures[0]
    shrunk = runner.shrink(first.plan, options)
    traced = runner.run_plan(shrunk, Options(known=options.known, trace=True))
    pytest.fail(
        f"seed {first.plan.seed} fails: {first.violation}\n"
        f"replay: python -m tests.simulation --seed {first.plan.seed}"
        + (f" --known {','.join(sorted(options.known))}" if options.known else "")
        + "\n\n"
        + runner.format_trace(traced),
        pytrace=False,
    )


def test_seeded_schedules() -> None:
    summary = runner.run_many(range(FAST_SEEDS), CHECKED)
    _fail(summary)
    assert summary.seeds == FAST_SEEDS


@pytest.mark.simulation
@pytest.mark.timeout(300)  # a part takes a few seconds; a loaded machine may take many times that
@pytest.mark.parametrize("part", range(LONG_PARTS))
def test_many_seeded_schedules(part: int) -> None:
    size = -(-LONG_SEEDS // LONG_PARTS)
    start = 1_000_000 + part * size
    with unmeasured():
        summary = runner.run_many(range(start, start + size), CHECKED)
    _fail(summary)
    assert summary.seeds == size


@pytest.mark.parametrize("check", sorted(KNOWN_FINDINGS))
@pytest.mark.xfail(strict=True, reason="a finding on the code as it is (see KNOWN_FINDINGS)")
def test_known_finding_is_fixed(check: str) -> None:
    options = Options(known=frozenset(KNOWN_FINDINGS) - {check})
    for seed in FINDING_SEEDS[check]:
        result = runner.run_seed(seed, options)
        assert result.violation is None or result.violation.check != check, (
            f"seed {seed}: {result.violation} -- {KNOWN_FINDINGS[check]}"
        )


# Findings fixed since: regression tests, each a schedule pinned as a plan (regressions.py:
# the generator can change without them) that fails its check with the bug put back (a mutant).
FIXED_FINDINGS: dict[str, str] = {
    "ghost": "lock_acquire's SET NX path (mode 1) left the token's own queue entry from an "
    "earlier copy of the same retried attempt (first seen at seeds 5651+)",
    "leftover": "a waiter giving up after a plain SET NX kept the lease a client retry had "
    "taken (first seen at seed 533)",
    "fresh": "a grant read by another thread while its waiter sat in a slow, retried attempt "
    "was taken when the waiter next waited, however old (its age was measured to when it was "
    "read, not to when it was used): a section began on a lease that had passed on (first "
    "seen at seed 24009)",
}


@pytest.mark.parametrize("check", sorted(FIXED_FINDINGS))
def test_a_fixed_finding_stays_fixed(check: str) -> None:
    result = runner.run_plan(regressions.PLANS[check], CHECKED)
    assert result.violation is None, f"{result.violation} -- once: {FIXED_FINDINGS[check]}"


@pytest.mark.parametrize("check", sorted(FIXED_FINDINGS))
def test_a_fixed_finding_fails_with_its_bug(check: str) -> None:
    """The pinned schedule still shows the bug: with it put back (its mutant, in a child
    process), the plan fails the finding's check. When the world's draws move, pin anew
    (``python -m tests.simulation.regressions CHECK``)."""
    assert set(regressions.PLANS) == set(regressions.BUGS) == set(FIXED_FINDINGS)
    bug = regressions.BUGS[check]
    result = mutants.spawn(bug, 0, frozenset(), CHECKED.known, regression=check)
    assert result.get("killed") and result.get("by") == check, (
        f"with {bug} put back, the pinned {check} plan no longer fails {check}: {result}"
    )


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_a_directed_scenario_passes(name: str) -> None:
    scenarios.SCENARIOS[name](None)


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_a_directed_scenario_kills_its_mutants(name: str) -> None:
    """Each scenario is there for the mutants that name it, which it must kill."""
    named = [m for m in mutants.MUTANTS if m.scenario == name]
    assert named, f"no mutant names {name}"
    for mutant in named:
        with pytest.raises(AssertionError):
            scenarios.SCENARIOS[name](mutants.transform_of(mutant))


def test_a_schedule_replays_exactly() -> None:
    """The same seed gives the same schedule, event for event."""
    for seed in (3, 17, 29):
        first = runner.run_plan(plans.generate(seed), Options(trace=True))
        second = runner.run_plan(plans.generate(seed), Options(trace=True))
        assert first.trace == second.trace and first.events == second.events > 20


def test_the_schedules_reach_every_reply_and_fault() -> None:
    """What the seeds reach: every reply code of the scripts the clients run, hand-offs,
    grants read, retries, and each kind of fault (a zero here is a hole in the weights)."""
    summary = runner.run_many(range(400), CHECKED)
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
    for fault in ("pause", "holder", "kill", "drop", "restart", "stall", "jump", "interrupt"):
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

    options = Options(transform=no_limit, known=CHECKED.known)
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


def test_every_mutant_names_code_that_exists() -> None:
    """A mutant whose text left the code kills nothing: it must follow the change."""
    stale = {m.name: problem for m in mutants.MUTANTS if (problem := mutants.stale(m))}
    assert not stale, stale
    assert len(mutants.MUTANTS) >= 30


def _sample() -> list[mutants.Mutant]:
    """Today's sample of the mutants that must be killed (all with REDLOCK_DECO_MUTANTS=all)."""
    chosen = [m for m in mutants.MUTANTS if not m.equivalent]
    if os.environ.get("REDLOCK_DECO_MUTANTS") != "all":
        day = datetime.date.today().toordinal()
        start = day * MUTANT_SAMPLE % len(chosen)
        chosen = (chosen + chosen)[start : start + MUTANT_SAMPLE]
    return chosen


def test_every_simulator_mutant_has_a_seed_hint() -> None:
    """CI's sample runs each mutant's recorded killing seed first: one without a hint would be
    searched for over thousands of schedules (``python -m tests.simulation.mutants --hints``
    prints them)."""
    searched = [m for m in mutants.MUTANTS if not (m.equivalent or m.tests or m.scenario)]
    missing = [m.name for m in searched if m.name not in mutants.SEED_HINTS]
    assert not missing, missing
    unknown = set(mutants.SEED_HINTS) - set(mutants.by_name())
    assert not unknown, unknown


# Positions in the sample, not names: what is collected must not depend on the day (pytest-xdist
# workers collecting either side of midnight).
_SAMPLED = (
    len([m for m in mutants.MUTANTS if not m.equivalent])
    if os.environ.get("REDLOCK_DECO_MUTANTS") == "all"
    else MUTANT_SAMPLE
)


@pytest.mark.simulation
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("position", range(_SAMPLED))
def test_a_rotating_sample_of_mutants_is_killed(position: int) -> None:
    mutant = _sample()[position]
    first = mutants.hint(mutant)
    result = mutants.spawn(mutant.name, MUTANT_SEEDS, frozenset(), CHECKED.known, first)
    assert result.get("killed"), f"{mutant.name} survives: {result}"
    if first and not mutant.tests:
        assert result.get("seed") in first, (
            f"{mutant.name} is killed, but by seed {result.get('seed')}, not by its hint "
            f"{first[0]}: the plan generator or the code changed; record the hints anew "
            "(python -m tests.simulation.mutants --jobs 2 --hints, into mutants.SEED_HINTS)"
        )
