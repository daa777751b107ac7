"""Renewal planning and settling, and the lease lifecycle, with injected times: what is due,
what a round sends, what its outcome means, the renewer's job table, and the transitions of
a lease. No server and no renewer thread are involved: ``plan`` only builds steps."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.core_helpers import drive, make_claim

from redlock_deco import _events as events
from redlock_deco import _protocol as protocol
from redlock_deco import _renewal as renewal
from redlock_deco._errors import LockLost
from redlock_deco._lifecycle import RENEW_FRACTION, RETRY_DELAY, Cleanup, Lease, State
from redlock_deco._protocol import Fanout
from redlock_deco._quorum import Quorum, held_for
from redlock_deco._renewal import FAILED, conclude, due, job_key, plan

T0 = 100.0  # the injected "now" a lease was granted at
TTL_MS = 3_000  # renew at T0 + 1 s, expires at T0 + 3 s (less held_for's millisecond)


class Target:
    """Stands in for a provider's target: plan() only reads its algorithm family."""

    def __init__(self, algorithms: Any = protocol.SINGLE) -> None:
        self.algorithms = algorithms

    def __repr__(self) -> str:
        return f"<Target {type(self.algorithms).__name__}>"


SINGLE = Target()
HELD = held_for(SINGLE, TTL_MS)  # what the holder counts on of TTL_MS: 2.999 s
QUORUM = Target(Quorum(3))


class OnLost:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[Lease] = []
        self.error = error

    def __call__(self, lease: Lease) -> None:
        self.calls.append(lease)
        if self.error is not None:
            raise self.error


def make_lease(
    *,
    started: float = T0,
    ttl_ms: int = TTL_MS,
    target: Target = SINGLE,
    alive: Callable[[], bool] = lambda: True,
    max_hold: float | None = None,
    on_lost: Callable[[Lease], object] | None = None,
    key: str = "lock:k",
) -> Lease:
    return Lease(
        make_claim(key, ttl_ms=ttl_ms),
        name=key,
        provider="default",
        target=target,
        started=started,
        io=None,
        alive=alive,
        max_hold=max_hold,
        on_lost=on_lost,
    )


def make_cleanup(
    *, started: float = T0, target: Target = SINGLE, key: str = "lock:k", token: str = "tok"
) -> Cleanup:
    return Cleanup(make_claim(key, token=token, ttl_ms=TTL_MS), target, started)


def ended(how: str) -> Lease:
    lease = make_lease()
    {"released": lease._release, "lost": lease._lose, "orphaned": lease._orphan}[how]()
    return lease


# -- due ----------------------------------------------------------------------------------


def test_a_new_lease_is_due_a_third_into_its_ttl() -> None:
    lease = make_lease()
    assert lease.next_renew == pytest.approx(T0 + HELD * RENEW_FRACTION)
    assert lease.expires_at == pytest.approx(T0 + HELD)


def test_due_picks_what_is_due_and_reports_the_next_wake_up() -> None:
    early, late = make_lease(started=T0), make_lease(started=T0 + 5)
    ready, upcoming = due([early, late], T0 + 0.5)
    assert ready == [] and upcoming == early.next_renew
    ready, upcoming = due([early, late], early.next_renew)  # exactly due counts
    assert ready == [early] and upcoming == late.next_renew
    ready, upcoming = due([early, late], late.next_renew + 1)
    assert ready == [early, late] and upcoming == math.inf


def test_due_skips_a_job_whose_round_is_in_flight() -> None:
    lease, cleanup = make_lease(), make_cleanup()
    lease.renewing = cleanup.renewing = True
    # Not due: the round wakes the renewer when done -- or, should it never come back, the
    # lease's end does (see the next test).
    assert due([lease, cleanup], T0 + 60) == ([], lease.expires_at)
    assert due([cleanup], T0 + 60) == ([], math.inf)
    dead = make_lease(alive=lambda: False)
    dead.renewing = True
    assert due([dead], T0) == ([], dead.expires_at)


def test_a_cleanup_is_due_at_once() -> None:
    cleanup = make_cleanup()
    assert due([cleanup], T0) == ([cleanup], math.inf)


def test_a_round_that_never_comes_back_still_ends_its_lease_loudly() -> None:
    """Review 4: a renewal stuck for good (a client without a socket timeout on a stalled
    server, a lost connection place) left its lease to expire in silence while the holder
    ran on. The renewer wakes when such a lease runs out, and reports it lost."""
    lease = make_lease()
    ready, _ = due([lease], lease.next_renew)
    assert ready == [lease]
    lease.renewing = True  # dispatched; its round never concludes
    before = lease.expires_at - 0.001
    assert due([lease], before) == ([], lease.expires_at)  # wakes when it runs out
    assert renewal.overdue([lease], before) == []
    assert renewal.overdue([lease], lease.expires_at) == [lease]
    assert lease._lose() and renewal.overdue([lease], lease.expires_at + 1) == []
    assert conclude(lease, T0, TTL_MS, True) is True  # the late round is dropped, still lost
    assert lease.lost


@pytest.mark.parametrize(
    "make",
    [
        lambda: make_lease(max_hold=0.5),  # held for max_hold already (now = T0 + 0.5)
        lambda: ended("released"),
        lambda: ended("lost"),
        lambda: ended("orphaned"),
    ],
    ids=["max-hold", "released", "lost", "orphaned"],
)
def test_due_hands_back_leases_to_drop_before_their_renewal_time(make: Any) -> None:
    lease, other = make(), make_lease(started=T0 + 10)
    ready, upcoming = due([lease, other], T0 + 0.5)  # well before lease.next_renew
    assert ready == [lease] and upcoming == other.next_renew


def test_due_judges_a_lease_whose_owner_ended_at_its_renewal_time() -> None:
    """Not at once: a generator's block left by another task just after its owner ended (its
    aclose() right after an ``async for ... break``) was reported lost while still held."""
    lease = make_lease(alive=lambda: False)
    assert due([lease], T0 + 0.5) == ([], lease.next_renew)
    assert due([lease], lease.next_renew) == ([lease], math.inf)


def test_due_keeps_a_lease_within_max_hold() -> None:
    lease = make_lease(max_hold=60)
    assert due([lease], T0 + 0.5) == ([], lease.next_renew)


@pytest.mark.parametrize("target", [SINGLE, QUORUM], ids=repr)
def test_an_added_extension_keeps_the_renewal_length_and_is_not_cut_short(target: Target) -> None:
    """extend(by=...) lengthens this lease only: later renewals keep the ttl, and the next
    one is due when as much is left as a renewal's usual point -- not so early that it sets
    the lease back to the shorter ttl."""
    lease = make_lease(target=target)
    length = lease.ttl_ms
    lease._renewed(T0 + 0.5, length + 20_000, keep_length=True)
    assert lease.ttl_ms == length
    left_at_renewal = lease.expires_at - lease.next_renew
    assert left_at_renewal == pytest.approx(renewal_length(lease) * (1 - RENEW_FRACTION))
    assert lease.next_renew > T0 + 0.5 + 20  # not before the added time has mostly passed
    lease._renewed(T0 + 1.0, 7_000)  # extend(to=7): a new length
    assert lease.ttl_ms == 7_000
    assert lease.next_renew == pytest.approx(T0 + 1.0 + renewal_length(lease) * RENEW_FRACTION)


def renewal_length(lease: Lease) -> float:
    """The seconds a renewal's ttl is believed for (a quorum's less its drift allowance)."""
    return held_for(lease.target, lease.ttl_ms)


# -- plan ---------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [SINGLE, QUORUM], ids=repr)
def test_plan_sends_an_extend_carrying_the_ttl_at_plan_time(target: Target) -> None:
    lease = make_lease(target=target)
    lease._renewed(T0 + 0.5, 7_000)  # an extend(7) set a new ttl before this round
    planned = plan(lease, lease.next_renew)
    assert planned is not None
    steps, ttl_ms = planned
    assert ttl_ms == 7_000
    expected = lease.claim.extend_step(7_000)
    assert next(steps) == (expected if target is SINGLE else Fanout(expected))
    assert expected.args == ("tok", 7_000) and expected.script is protocol.LOCK.extend_script
    assert lease.state is State.HELD


@pytest.mark.parametrize(
    ("make", "now"),
    [
        (lambda: make_lease(max_hold=1.0), T0 + 1.0),  # exactly at max_hold
        (lambda: make_lease(max_hold=1.0), T0 + 2.5),
    ],
    ids=["at-max-hold", "past-max-hold"],
)
def test_plan_orphans_a_lease_held_too_long(make: Any, now: float) -> None:
    lease = make()
    assert plan(lease, now) is None  # not a word to Redis: it expires within its ttl
    assert lease.state is State.ORPHANED and not lease.held
    assert lease.remaining(now) > 0  # still the server's until it expires


def test_plan_tells_a_lease_whose_owner_ended_that_it_is_lost() -> None:
    """Only a generator's block can outlive its owner: it must not run on as if it held
    while its unrenewed lease expires under it (review 16, 01)."""
    told: list[object] = []
    lease = make_lease(alive=lambda: False)
    lease.on_lost = told.append
    assert plan(lease, T0 + 1) is None  # not a word to Redis: it expires within its ttl
    assert lease.lost and told == [lease]
    assert plan(lease, T0 + 1.1) is None and told == [lease]  # told once


def test_plan_renews_just_before_max_hold() -> None:
    lease = make_lease(max_hold=1.0)
    assert plan(lease, T0 + 0.999) is not None and lease.state is State.HELD


@pytest.mark.parametrize("how", ["released", "lost", "orphaned"])
def test_plan_drops_a_lease_no_longer_held(how: str) -> None:
    lease = ended(how)
    before = lease.state
    assert plan(lease, T0 + 1) is None
    assert lease.state is before


def test_plan_abandons_a_cleanup_on_a_single_node() -> None:
    cleanup = make_cleanup()
    planned = plan(cleanup, T0)
    assert planned is not None
    steps, ttl_ms = planned
    seen, _ = drive(steps, [0])
    claim = cleanup.claim
    # One release that also leaves the queue (and passes on a hand-off that reached it).
    assert ttl_ms == 0 and seen == [claim.release_step(leaving=True)]


def test_plan_abandons_a_cleanup_on_every_master() -> None:
    cleanup = make_cleanup(target=QUORUM)
    planned = plan(cleanup, T0)
    assert planned is not None
    seen, _ = drive(planned[0], [[0, 1, TimeoutError()]])
    assert seen == [Fanout(cleanup.claim.release_step())]


# -- conclude -----------------------------------------------------------------------------


def test_a_renewal_records_its_expiry_from_when_it_was_sent() -> None:
    lease = make_lease()
    sent = T0 + 1.0
    assert conclude(lease, sent, TTL_MS, True) is False  # keep renewing
    assert lease.expires_at == pytest.approx(sent + HELD)
    assert lease.next_renew == pytest.approx(sent + HELD * RENEW_FRACTION)
    assert lease.state is State.HELD


def test_a_renewal_overtaking_an_extend_records_the_ttl_it_carried() -> None:
    """The extend(60) was sent first, the renewal (planned with the old ttl) after it: the
    server ran the renewal last and keeps 3 s, so the holder must believe 3 s, not 60 s."""
    lease = make_lease()
    extend_sent, renewal_sent = T0 + 0.9, T0 + 1.0
    planned = plan(lease, renewal_sent)
    assert planned is not None and planned[1] == TTL_MS
    lease._renewed(extend_sent, 60_000)  # the extend's reply arrives first
    conclude(lease, renewal_sent, planned[1], True)  # then the renewal's
    assert lease.ttl_ms == TTL_MS
    assert lease.expires_at == pytest.approx(renewal_sent + HELD)
    assert lease.next_renew == pytest.approx(renewal_sent + HELD * RENEW_FRACTION)


def test_a_renewal_reply_older_than_the_recorded_extend_does_not_undo_it() -> None:
    """The renewal was sent first (ttl 3 s), the extend(60) after it: the server's last word
    is 60 s. A late reply of the earlier renewal must not make the holder believe 3 s -- its
    next renewal would then carry 3 s and silently undo the caller's extend.

    (Renewal rounds and extend() hold the lease's ``io`` lock, which rules this interleaving
    out in the renewers today; this checks the rule in the core itself, where
    ``Lease.renewed`` says "a reply records what the server was told".)"""
    lease = make_lease()
    renewal_sent, extend_sent = T0 + 1.0, T0 + 1.1
    planned = plan(lease, renewal_sent)
    assert planned is not None and planned[1] == TTL_MS
    lease._renewed(extend_sent, 60_000)  # the later request's reply is recorded first
    conclude(lease, renewal_sent, planned[1], True)  # the earlier request's reply, late
    assert lease.ttl_ms == 60_000
    assert lease.expires_at == pytest.approx(extend_sent + held_for(SINGLE, 60_000))
    next_round = plan(lease, lease.next_renew)
    assert next_round is not None and next_round[1] == 60_000


def test_a_refused_renewal_loses_the_lease_and_tells_once() -> None:
    on_lost = OnLost()
    lease = make_lease(on_lost=on_lost)
    assert conclude(lease, T0 + 1, TTL_MS, False) is True  # drop the job
    assert lease.state is State.LOST and lease.lost and lease.remaining(T0 + 1) == 0
    assert on_lost.calls == [lease]
    conclude(lease, T0 + 2, TTL_MS, False)
    assert on_lost.calls == [lease]  # news once


def test_a_raising_on_lost_callback_does_not_stop_the_renewer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    on_lost = OnLost(RuntimeError("callback bug"))
    lease = make_lease(on_lost=on_lost)
    with caplog.at_level(logging.ERROR, logger="redlock_deco"):
        assert conclude(lease, T0 + 1, TTL_MS, False) is True
    assert lease.state is State.LOST and len(on_lost.calls) == 1
    assert "on_lost callback" in caplog.text


def test_events_for_renewed_and_lost() -> None:
    seen: list[events.LockEvent] = []
    events.add_listener(seen.append)
    try:
        lease = make_lease()
        conclude(lease, T0 + 1, TTL_MS, True)
        conclude(lease, T0 + 2, TTL_MS, False)
        conclude(make_lease(key="lock:other"), T0 + 1, TTL_MS, True)
    finally:
        events.remove_listener(seen.append)
    assert [(e.kind, e.key) for e in seen] == [
        ("renewed", "lock:k"),
        ("lost", "lock:k"),
        ("renewed", "lock:other"),
    ]


def test_failed_renewals_retry_until_the_lease_would_have_ended() -> None:
    on_lost = OnLost()
    lease = make_lease(on_lost=on_lost)  # expires at T0 + HELD
    sent = lease.next_renew  # T0 + 1: 2 s left (less held_for's millisecond)
    assert conclude(lease, sent, TTL_MS, FAILED) is False
    assert lease.next_renew == pytest.approx(sent + min(RETRY_DELAY, (T0 + HELD - sent) / 4))
    sent = T0 + 2.6  # 0.399 s left: retry sooner than RETRY_DELAY
    assert conclude(lease, sent, TTL_MS, FAILED) is False
    assert lease.next_renew == pytest.approx(sent + (HELD - 2.6) / 4)
    assert lease.held and on_lost.calls == []
    assert conclude(lease, T0 + 3.0, TTL_MS, FAILED) is True  # nothing left: presumed gone
    assert lease.state is State.LOST and on_lost.calls == [lease]


@given(
    ttl_ms=st.integers(10, 120_000),
    delays=st.lists(st.floats(0, 5, allow_nan=False), min_size=1, max_size=40),
)
def test_failed_rounds_retry_before_the_end_then_lose_once(
    ttl_ms: int, delays: list[float]
) -> None:
    on_lost = OnLost()
    lease = make_lease(ttl_ms=ttl_ms, on_lost=on_lost)
    for delay in delays:
        if not lease.held:
            break
        sent = lease.next_renew + delay  # a round starts when due, or later
        left = lease.expires_at - sent
        dropped = conclude(lease, sent, ttl_ms, FAILED)
        if left > 0:
            assert not dropped and lease.state is State.HELD
            assert lease.next_renew == pytest.approx(sent + min(RETRY_DELAY, left / 4))
            assert lease.next_renew < lease.expires_at  # one more try before the end
        else:
            assert dropped and lease.state is State.LOST
    assert len(on_lost.calls) == (0 if lease.held else 1)


@pytest.mark.parametrize("outcome", [True, False, FAILED], ids=["extended", "refused", "failed"])
def test_a_reply_for_a_released_lease_records_nothing(outcome: Any) -> None:
    on_lost = OnLost()
    lease = make_lease(on_lost=on_lost)
    lease._release()  # given back while the round was in flight
    before = (lease.ttl_ms, lease.expires_at, lease.next_renew)
    assert conclude(lease, T0 + 10, 60_000, outcome) is True  # drop the job
    assert lease.state is State.RELEASED and on_lost.calls == []
    assert (lease.ttl_ms, lease.expires_at, lease.next_renew) == before


def test_a_reply_for_an_orphaned_lease_records_no_renewal() -> None:
    lease = ended("orphaned")
    before = lease.expires_at
    assert conclude(lease, T0 + 1, TTL_MS, True) is True
    assert lease.state is State.ORPHANED and lease.expires_at == before


# -- clean-ups ----------------------------------------------------------------------------


def test_a_cleanup_retries_until_done_or_past_its_ttl() -> None:
    cleanup = make_cleanup()  # until T0 + 3
    assert cleanup.next_renew == T0 and cleanup.until == pytest.approx(T0 + 3)
    assert cleanup.attempted(T0 + 0.1, done=False) is False
    assert cleanup.next_renew == pytest.approx(T0 + 0.1 + RETRY_DELAY)
    assert cleanup.attempted(T0 + 1, done=True) is True
    fresh = make_cleanup()
    assert fresh.attempted(T0 + 2.9, done=False) is False
    assert fresh.attempted(T0 + 3.0, done=False) is True  # the server dropped it by now


def test_conclude_settles_a_cleanup() -> None:
    # conclude() reads the monotonic clock for clean-ups, so these start from it.
    now = time.monotonic()
    assert conclude(make_cleanup(started=now), now, 0, None) is True  # the release landed
    pending = make_cleanup(started=now)
    assert conclude(pending, now, 0, FAILED) is False
    assert pending.next_renew >= now + RETRY_DELAY
    assert conclude(make_cleanup(started=now - 3.1), now, 0, FAILED) is True  # expired


# -- the renewer's job table --------------------------------------------------------------


def test_job_keys_dedupe_cleanups_by_target_key_and_token() -> None:
    assert job_key(make_cleanup()) == job_key(make_cleanup())
    assert job_key(make_cleanup()) != job_key(make_cleanup(token="other"))
    assert job_key(make_cleanup()) != job_key(make_cleanup(key="lock:other"))
    assert job_key(make_cleanup()) != job_key(make_cleanup(target=QUORUM))
    assert job_key(make_lease()) != job_key(make_lease())  # a lease is its own job


def test_jobs_dedupe_and_count_only_leases() -> None:
    table = renewal._Jobs()
    lease = make_lease()
    assert table.add(lease) is True and table.add(lease) is False
    assert table.add(make_cleanup()) is True
    assert table.add(make_cleanup()) is False  # the same clean-up again counts once
    assert table.add(make_cleanup(token="t2")) is True
    assert (len(table.jobs), table.cleanups, table.leases()) == (3, 2, 1)
    table.remove(lease)
    assert (table.cleanups, table.leases()) == (2, 0)
    table.remove(lease)  # removing twice is harmless
    table.remove(make_cleanup(token="t2"))  # an equal clean-up removes the one kept
    assert (len(table.jobs), table.cleanups, table.leases()) == (1, 1, 0)


def test_the_cleanup_bound_drops_the_oldest_and_never_a_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = renewal._Jobs()
    lease = make_lease()
    table.add(lease)
    cleanups = [make_cleanup(token=f"t{i}") for i in range(renewal.MAX_CLEANUPS + 2)]
    with caplog.at_level(logging.WARNING, logger="redlock_deco"):
        for cleanup in cleanups:
            assert table.add(cleanup) is True
    assert table.cleanups == renewal.MAX_CLEANUPS and table.leases() == 1
    kept = [job for job in table.jobs.values() if type(job) is Cleanup]
    assert kept == cleanups[2:]  # the two oldest went
    assert job_key(lease) in table.jobs
    # One warning for both: a storm drops hundreds a second, and each warning takes logging's
    # locks, which an interrupt can leave held before Python 3.13 (review 43, F3).
    assert caplog.text.count("too many pending clean-ups") == 1
    assert "dropped 1 since the last warning" in caplog.text
    table.warned_at -= renewal.DROP_WARNING  # later: the next drop warns again, with its count
    with caplog.at_level(logging.WARNING, logger="redlock_deco"):
        table.add(make_cleanup(token="later"))
    assert caplog.text.count("too many pending clean-ups") == 2
    assert "dropped 2 since the last warning" in caplog.text


class JobTable(RuleBasedStateMachine):
    """The table against a model: clean-ups keyed by (target, key, token) in arrival order,
    at most MAX_CLEANUPS of them (the oldest dropped), leases keyed by identity."""

    BOUND = 3

    def __init__(self) -> None:
        super().__init__()
        self.saved_bound = renewal.MAX_CLEANUPS
        renewal.MAX_CLEANUPS = self.BOUND
        self.table = renewal._Jobs()
        self.leases: list[Lease] = []
        self.cleanups: dict[Any, Cleanup] = {}  # insertion-ordered, like the table

    def teardown(self) -> None:
        renewal.MAX_CLEANUPS = self.saved_bound

    @rule()
    def add_lease(self) -> None:
        lease = make_lease()
        assert self.table.add(lease) is True
        self.leases.append(lease)

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def add_a_lease_again(self, data: st.DataObject) -> None:
        assert self.table.add(data.draw(st.sampled_from(self.leases))) is False

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def remove_lease(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        self.table.remove(lease)
        self.leases.remove(lease)

    @rule(
        token=st.sampled_from("abcde"),
        server=st.sampled_from([SINGLE, QUORUM]),
        key=st.sampled_from(["lock:k", "lock:j"]),
    )
    def add_cleanup(self, token: str, server: Target, key: str) -> None:
        cleanup = make_cleanup(token=token, target=server, key=key)
        added = self.table.add(cleanup)
        assert added is (job_key(cleanup) not in self.cleanups)
        if added:
            if len(self.cleanups) >= self.BOUND:
                del self.cleanups[next(iter(self.cleanups))]  # the oldest goes
            self.cleanups[job_key(cleanup)] = cleanup

    @precondition(lambda self: bool(self.cleanups))
    @rule(data=st.data())
    def remove_cleanup(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(list(self.cleanups)))
        self.table.remove(self.cleanups.pop(key))

    @invariant()
    def matches_the_model(self) -> None:
        assert self.table.leases() == len(self.leases)
        assert self.table.cleanups == len(self.cleanups) <= self.BOUND
        kept = [job for job in self.table.jobs.values() if type(job) is Cleanup]
        assert kept == list(self.cleanups.values())


TestJobTable = JobTable.TestCase
TestJobTable.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


# -- the lease lifecycle ------------------------------------------------------------------


def live_lease(**kwargs: Any) -> Lease:
    """A lease granted just now by the real monotonic clock (reenter() reads it)."""
    return make_lease(started=time.monotonic(), ttl_ms=30_000, **kwargs)


def test_release_of_a_held_lease() -> None:
    lease = make_lease()
    lease._release()
    assert lease.state is State.RELEASED and not lease.held and not lease.lost
    assert lease.remaining(T0) == 0  # ended, though its expiry is still ahead


def test_lose_of_a_held_lease_is_news_once() -> None:
    lease = make_lease()
    assert lease._lose() is True and lease.state is State.LOST and lease.lost
    assert lease._lose() is False
    assert lease.remaining(T0) == 0


def test_an_orphan_expires_by_itself() -> None:
    lease = make_lease()
    lease._orphan()
    assert lease.state is State.ORPHANED and not lease.held and not lease.lost
    assert lease.remaining(T0 + 1) == pytest.approx(HELD - 1)  # kept until expiry
    lease._release()
    assert lease.state.value == "released"
    orphan = ended("orphaned")
    assert orphan._lose() is True and orphan.state is State.LOST


def test_lose_after_release_is_a_no_op() -> None:
    lease = ended("released")
    assert lease._lose() is False and lease.state is State.RELEASED


def test_release_after_lose_stays_lost() -> None:
    lease = ended("lost")
    lease._release()
    assert lease.state is State.LOST
    lease._orphan()
    assert lease.state is State.LOST


def test_remaining_counts_down_to_zero() -> None:
    lease = make_lease()
    assert lease.remaining(T0) == pytest.approx(HELD)
    assert lease.remaining(T0 + 2.5) == pytest.approx(HELD - 2.5)
    assert lease.remaining(T0 + 10) == 0


def test_reenter_and_exit_track_the_open_sections() -> None:
    lease = live_lease()
    outer, middle, inner = object(), object(), object()
    lease._enter(outer)
    lease._reenter(middle)
    lease._reenter(inner)
    assert lease.sections == {outer, middle, inner}
    # Leaving one twice (the clean-up of an interrupted exit repeats it) changes nothing:
    # a count would have dropped to zero with the outer section still open.
    assert [lease._exit(middle), lease._exit(middle), lease._exit(outer)] == [False, False, False]
    assert lease._exit(inner)  # the last one out


@pytest.mark.parametrize("how", ["released", "lost", "orphaned", "expired"])
def test_reenter_of_an_ended_lease_raises_lock_lost(how: str) -> None:
    if how == "expired":
        lease = make_lease(started=time.monotonic() - 60, ttl_ms=30_000)
    else:
        lease = live_lease()
        {"released": lease._release, "lost": lease._lose, "orphaned": lease._orphan}[how]()
    with pytest.raises(LockLost, match="re-entering") as raised:
        lease._reenter(object())
    assert raised.value.key == "lock:k" and raised.value.name == "lock:k"
    assert not lease.sections  # a failed re-entry does not count


OPERATIONS = st.sampled_from(["release", "lose", "orphan", "renewed", "failed"])


@given(
    operations=st.lists(
        st.tuples(OPERATIONS, st.floats(0, 10, allow_nan=False), st.integers(1, 60_000)),
        max_size=25,
    )
)
def test_transitions_keep_final_states_final(
    operations: list[tuple[str, float, int]],
) -> None:
    """Any sequence of transitions against a model: RELEASED and LOST never change, a loss is
    news exactly once, ORPHANED is reached only from HELD, and only a HELD lease records a
    renewal."""
    lease = make_lease()
    state, news, recorded = State.HELD, 0, T0
    for operation, offset, ttl_ms in operations:
        at = T0 + offset
        before = (lease.ttl_ms, lease.expires_at)
        if operation == "release":
            lease._release()
            state = state if state is State.LOST else State.RELEASED
        elif operation == "lose":
            fresh = lease._lose()
            assert fresh is (state in (State.HELD, State.ORPHANED))
            news += fresh
            state = State.LOST if fresh else state
        elif operation == "orphan":
            lease._orphan()
            state = State.ORPHANED if state is State.HELD else state
        elif operation == "renewed":
            lease._renewed(at, ttl_ms)
            if state is State.HELD and at >= recorded:  # an older reply records nothing
                recorded = at
                assert (lease.ttl_ms, lease.expires_at) == (ttl_ms, at + held_for(SINGLE, ttl_ms))
            elif state is State.HELD:
                assert (lease.ttl_ms, lease.expires_at) == before
        else:
            fresh = lease._renewal_failed(at)
            assert fresh is (state is State.HELD and before[1] <= at)
            news += fresh
            state = State.LOST if fresh else state
        assert lease.state is state
        if state is not State.HELD:
            assert (lease.ttl_ms, lease.expires_at) == before  # nothing recorded
        if state in (State.RELEASED, State.LOST):
            assert lease.remaining(at) == 0
    assert news == (1 if state is State.LOST else 0)


def test_a_renewal_answer_for_a_lease_being_released_is_left_to_the_release() -> None:
    """A round in flight when the owner starts releasing: its "not the owner" answer (the
    release landed first) must not turn a clean release into a lost lease."""
    lease = make_lease()
    lease._releasing()
    assert conclude(lease, T0, lease.ttl_ms, False) is True  # dropped
    assert lease.state is State.RELEASING and not lease.lost
    lease._release()
    assert lease.state is State.RELEASED
