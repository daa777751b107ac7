"""The fixed findings' schedules, pinned as plans (``test_simulation.FIXED_FINDINGS``).

Each is the schedule that shows its bug -- found by searching the seeds with the bug put back
(its mutant in :mod:`.mutants`), then shrunk -- written out as plain data, so the plan
generator can change without the regression test losing its scenario. The world still draws
latencies and rate-drawn faults from the plan's seed: a change to :mod:`.world` can move them,
which ``test_a_fixed_finding_fails_with_its_bug`` notices; then search and pin again:
``python -m tests.simulation.regressions CHECK`` prints a new plan.
"""

from __future__ import annotations

import dataclasses
import sys

from .plan import ActorPlan, Plan, ProcPlan, Rates, Session

# ghost: lock_acquire's SET NX path (mode 1) left the token's own queue entry from an earlier
# copy of the same retried attempt. A1#1's attempt queues it, its reply is lost; the retry finds
# the lock free and takes it; A1#1 releases and moves on; its stale entry is served later: a
# grant to nobody that waits. (Bug: lua:retried-join-stays-queued; first seen at seed 5651.)
GHOST = Plan(
    seed=5651,
    names=(("n0", "lock"),),
    procs=(
        ProcPlan(index=0, flavour="sync", retries=3, retry_timeouts=False),
        ProcPlan(index=1, flavour="async", retries=0, retry_timeouts=False),
    ),
    actors=(
        ActorPlan(
            index=0,
            proc=0,
            start=0.02954364242232635,
            sessions=(
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.1,
                    wait=4.0,
                    hold=0.0,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.2668049931485748,
                ),
            ),
        ),
        ActorPlan(
            index=1,
            proc=0,
            start=0.021991225082455754,
            sessions=(
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.3,
                    wait=0.05,
                    hold=0.07473551478760188,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.2800296037360568,
                ),
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.5,
                    wait=4.0,
                    hold=0.0,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.0,
                ),
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.1,
                    wait=0.3,
                    hold=0.09230348469339128,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.0,
                ),
            ),
        ),
        ActorPlan(
            index=2,
            proc=0,
            start=0.02631410705036041,
            sessions=(
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.1,
                    wait=None,
                    hold=0.16867504429312188,
                    limit=1,
                    auto_renew=False,
                    fencing=False,
                    think=0.29356439423324165,
                ),
            ),
        ),
    ),
    rates=Rates(
        reply_lost=0.05,
        never_ran=0.025,
        timeout=0.0,
        grant_lost=0.0,
        grant_delayed=0.0,
        grant_duplicated=0.0,
        subscribe_fails=0.2,
    ),
    timed=(),
    silenced=frozenset(),
)

# leftover: a waiter giving up after a plain SET NX kept the lease a client retry had taken.
# A3#0's SET NX lands, its reply is lost; the retry is told "busy" by A3#0's own lease; its wait
# (50 ms) has run out, and it gives up holding the lock for 5 s. (Bug:
# py:plain-give-up-keeps-lease; first seen at seed 533.)
LEFTOVER = Plan(
    seed=265,
    names=(("n0", "lock"),),
    procs=(
        ProcPlan(index=0, flavour="async", retries=3, retry_timeouts=False),
        ProcPlan(index=1, flavour="sync", retries=1, retry_timeouts=False),
        ProcPlan(index=2, flavour="async", retries=1, retry_timeouts=True),
    ),
    actors=(
        ActorPlan(
            index=3,
            proc=2,
            start=0.028337337228858075,
            sessions=(
                Session(
                    name="n0",
                    kind="lock",
                    ttl=5.0,
                    wait=0.05,
                    hold=0.0,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.0,
                ),
            ),
        ),
    ),
    rates=Rates(
        reply_lost=0.02,
        never_ran=0.0,
        timeout=0.0,
        grant_lost=0.0,
        grant_delayed=0.0,
        grant_duplicated=0.0,
        subscribe_fails=0.0,
    ),
    timed=(),
    silenced=frozenset(),
)

# fresh: a grant read by another thread while its waiter sat in a slow, retried attempt was
# taken when the waiter next waited, its age measured to when it was read: A0#0's queueing
# attempt loses its reply (noticed 0.374 s later), its grant is read meanwhile, and A0#0 then
# enters on a lease that ended long before. (Bug: py:fresh-measured-when-read; first seen at
# seed 24009.)
FRESH = Plan(
    seed=8335,
    names=(("n0", "lock"),),
    procs=(
        ProcPlan(index=0, flavour="sync", retries=1, retry_timeouts=True),
        ProcPlan(index=1, flavour="sync", retries=1, retry_timeouts=False),
    ),
    actors=(
        ActorPlan(
            index=0,
            proc=0,
            start=0.015893970138873986,
            sessions=(
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.1,
                    wait=4.0,
                    hold=0.0,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.0,
                ),
            ),
        ),
        ActorPlan(
            index=1,
            proc=0,
            start=0.00453237754788769,
            sessions=(
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.3,
                    wait=0.05,
                    hold=0.23253663032410685,
                    limit=1,
                    auto_renew=False,
                    fencing=False,
                    think=0.026838419328023697,
                ),
            ),
        ),
        ActorPlan(
            index=3,
            proc=1,
            start=0.011690655959528302,
            sessions=(
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.5,
                    wait=0.3,
                    hold=0.0,
                    limit=1,
                    auto_renew=True,
                    fencing=True,
                    think=0.0,
                ),
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.05,
                    wait=None,
                    hold=0.04789361185718856,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.0,
                ),
                Session(
                    name="n0",
                    kind="lock",
                    ttl=0.5,
                    wait=2.0,
                    hold=0.643478693193771,
                    limit=1,
                    auto_renew=True,
                    fencing=False,
                    think=0.0,
                ),
            ),
        ),
    ),
    rates=Rates(
        reply_lost=0.1,
        never_ran=0.0,
        timeout=0.0,
        grant_lost=0.0,
        grant_delayed=0.0,
        grant_duplicated=0.0,
        subscribe_fails=0.2,
    ),
    timed=(),
    silenced=frozenset(),
)

PLANS: dict[str, Plan] = {"ghost": GHOST, "leftover": LEFTOVER, "fresh": FRESH}
# Each finding's bug, as a mutant of :mod:`.mutants`.
BUGS: dict[str, str] = {
    "ghost": "lua:retried-join-stays-queued",
    "leftover": "py:plain-give-up-keeps-lease",
    "fresh": "py:fresh-measured-when-read",
}


def main(argv: list[str]) -> int:
    """Search the seeds for a schedule failing CHECK with its bug put back; print it shrunk."""
    from . import mutants, runner
    from . import plan as plans
    from .world import Options

    check = argv[0]
    mutant = mutants.by_name()[BUGS[check]]
    if mutant.lua:
        options = Options(transform=mutants.transform_of(mutant))
    else:
        mutants.apply_python(mutant)
        options = Options()
    for seed in range(int(argv[1]) if len(argv) > 1 else 100_000):
        result = runner.run_plan(plans.generate(seed), options)
        if result.violation is not None and result.violation.check == check:
            shrunk = runner.shrink(result.plan, options, budget=800)
            traced = runner.run_plan(shrunk, dataclasses.replace(options, trace=True))
            print(runner.format_trace(traced))
            print(f"\n{check.upper()} = {shrunk!r}")
            return 0
    print(f"no seed fails {check} with {mutant.name}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
