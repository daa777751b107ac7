"""Redlock over N masters, driven with scripted per-master replies, a fake clock and a fixed
``rand``: quorum sizes, validity after the round's time, release everywhere after a failed
round, backoff within the wait, extension, and counting holders. No server is involved."""

from __future__ import annotations

import asyncio
import builtins
import re
from typing import Any

import pytest
import redis.exceptions
from hypothesis import given
from hypothesis import strategies as st
from support.core_helpers import Clock, drive, make_claim

from redlock_deco import _protocol as protocol
from redlock_deco import _quorum as quorum
from redlock_deco._protocol import Eval, Fanout, Granted, NotGranted, Sleep
from redlock_deco._quorum import Quorum
from redlock_deco._scripts import ScriptReplyError

TTL_MS = 10_000
GRANT = [1, TTL_MS]  # acquire: {1, ttl ms}
BUSY = [0, 4_000]  # acquire: {0, ms until the holder's lease ends}

FAILURES = [
    redis.exceptions.ConnectionError("refused"),
    redis.exceptions.TimeoutError("socket timeout"),
    builtins.TimeoutError(),  # the sync driver's per-node deadline (concurrent.futures)
    asyncio.TimeoutError(),  # the async driver's per-node deadline
    builtins.ConnectionResetError(),
]


def lock_claim(ttl_ms: int = TTL_MS) -> protocol.Claim:
    return make_claim(ttl_ms=ttl_ms)


def sem_claim(limit: int) -> protocol.Claim:
    return make_claim("sem:k", kind=protocol.SEMAPHORE, limit=limit)


def sleeps_take_their_time(step: Any) -> float:
    return step.seconds if isinstance(step, Sleep) else 0.0


# -- quorum arithmetic ---------------------------------------------------------------------


def docstring_table() -> list[tuple[int, int, int, int]]:
    rows = re.findall(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", quorum.__doc__ or "", re.M)
    return [tuple(map(int, row)) for row in rows]  # type: ignore[misc]  # 4 groups per row


def test_the_docstring_table_is_what_quorum_computes() -> None:
    table = docstring_table()
    assert len(table) == 6  # the table was found, every row of it
    for masters, limit, needed, tolerates in table:
        assert quorum.quorum(masters, limit) == needed, (masters, limit)
        assert masters - needed == tolerates, (masters, limit)


@pytest.mark.parametrize(
    ("masters", "limit", "needed"),
    [
        (3, 1, 2),
        (4, 1, 3),
        (5, 1, 3),
        (6, 1, 4),
        (7, 1, 4),
        (3, 2, 3),  # a majority (2) would let three holders in
        (4, 2, 3),
        (5, 2, 4),
        (5, 3, 4),
        (5, 4, 5),
        (7, 2, 5),
        (7, 3, 6),
        (9, 4, 8),
        (3, 10, 3),  # a large limit needs every master
    ],
)
def test_quorum_size(masters: int, limit: int, needed: int) -> None:
    assert quorum.quorum(masters, limit) == needed


def test_a_lock_needs_a_simple_majority() -> None:
    assert [quorum.quorum(n) for n in range(3, 10)] == [n // 2 + 1 for n in range(3, 10)]


@given(masters=st.integers(3, 9), limit=st.integers(1, 5))
def test_quorum_never_over_admits_and_is_reachable(masters: int, limit: int) -> None:
    needed = quorum.quorum(masters, limit)
    assert needed <= masters  # reachable with every master up
    # limit + 1 holders with `needed` grants each need more grants than all masters can give.
    assert (limit + 1) * needed > masters * limit
    assert needed > masters * limit / (limit + 1)


@given(masters=st.integers(3, 9), limit=st.integers(1, 5))
def test_one_fewer_than_the_quorum_would_admit_one_holder_too_many(
    masters: int, limit: int
) -> None:
    """Q is the smallest safe quorum: with Q - 1, limit + 1 holders can each collect Q - 1
    distinct masters while no master admits more than ``limit`` (round-robin placement)."""
    fewer = quorum.quorum(masters, limit) - 1
    load = [0] * masters
    for holder in range(limit + 1):
        owned = {(holder * fewer + i) % masters for i in range(fewer)}
        assert len(owned) == fewer  # distinct masters
        for master in owned:
            load[master] += 1
    assert max(load) <= limit  # every master stayed within its limit, yet limit + 1 got in


def test_validity_subtracts_the_round_and_the_drift_allowance() -> None:
    assert quorum.validity_ms(10_000, 0) == pytest.approx(10_000 - 100 - 2)
    assert quorum.validity_ms(10_000, 500) == pytest.approx(10_000 - 500 - 102)
    assert quorum.validity_ms(1_000, 990) < 0


def test_fewer_than_three_masters_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3 masters"):
        Quorum(2)


# -- acquire -------------------------------------------------------------------------------


@pytest.mark.parametrize("listening", [False, True])
def test_exactly_a_quorum_of_grants_is_granted_without_a_release(listening: bool) -> None:
    claim = lock_claim()
    algorithm = Quorum(5).acquire(claim, 0, listening, Clock())
    steps, result = drive(algorithm, [[GRANT] * 3 + [BUSY] * 2])
    assert result == Granted()
    # Mode TRY even where hand-offs could be heard: a quorum never queues on its masters.
    assert steps == [Fanout(claim.acquire_step(protocol.TRY))]
    assert steps[0].step.args[:3] == ("tok", TTL_MS, protocol.TRY)


def test_one_grant_short_is_not_granted_and_releases_on_every_master() -> None:
    claim = lock_claim()
    replies = [[GRANT] * 2 + [BUSY] * 3, [1, 1, 0, 0, 0]]
    steps, result = drive(Quorum(5).acquire(claim, 0, False, Clock()), replies)
    assert result == NotGranted()
    assert steps == [Fanout(claim.acquire_step(0)), Fanout(claim.release_step())]


@pytest.mark.parametrize("failure", FAILURES, ids=lambda e: type(e).__qualname__)
def test_failed_masters_grant_nothing(failure: BaseException) -> None:
    claim = lock_claim()
    _, result = drive(Quorum(3).acquire(claim, 0, False, Clock()), [[GRANT, GRANT, failure]])
    assert result == Granted()  # two of three is the quorum; the failure is just no grant
    replies = [[GRANT, failure, failure], [1, failure, failure]]
    steps, result = drive(Quorum(3).acquire(claim, 0, False, Clock()), replies)
    assert result == NotGranted()
    assert steps[-1] == Fanout(claim.release_step())


def test_a_round_where_every_master_failed_still_releases_everywhere() -> None:
    """A SET that timed out may have landed: the release goes to every master regardless."""
    claim = lock_claim()
    failures = [redis.exceptions.TimeoutError()] * 3
    steps, result = drive(Quorum(3).acquire(claim, 0, False, Clock()), [failures, failures])
    assert result == NotGranted()
    assert steps == [Fanout(claim.acquire_step(0)), Fanout(claim.release_step())]


@pytest.mark.parametrize("round_s", [9.9, 9.95, 12.0])
def test_a_round_that_ate_the_validity_is_not_granted_and_released(round_s: float) -> None:
    """Every master granted, but the round took so long that ttl - elapsed - drift <= 0 (ttl
    10 s, drift allowance 102 ms: nothing is left after 9.898 s). The grants are worthless
    and must be given back on every master."""
    claim = lock_claim()
    clock = Clock()
    replies = [[GRANT] * 3, [1, 1, 1]]
    algorithm = Quorum(3).acquire(claim, 0, False, clock)
    steps, result = drive(algorithm, replies, clock, {Fanout: round_s})
    assert result == NotGranted()
    assert steps == [Fanout(claim.acquire_step(0)), Fanout(claim.release_step())]


def test_a_round_with_validity_left_is_granted() -> None:
    claim = lock_claim()
    clock = Clock()
    _, result = drive(
        Quorum(3).acquire(claim, 0, False, clock), [[GRANT] * 3], clock, {Fanout: 9.8}
    )
    assert result == Granted()


def test_validity_uses_the_claims_ttl() -> None:
    short = lock_claim(ttl_ms=1_000)  # drift 12 ms: gone after 988 ms
    for round_s, granted in [(0.9, True), (0.99, False)]:
        clock = Clock()
        _, result = drive(
            Quorum(3).acquire(short, 0, False, clock),
            [[GRANT] * 3, [1, 1, 1]],
            clock,
            {Fanout: round_s},
        )
        assert (result == Granted()) is granted, round_s


def test_wait_zero_tries_exactly_once() -> None:
    steps, result = drive(
        Quorum(3).acquire(lock_claim(), 0, False, Clock(), rand=lambda: 0.5),
        [[BUSY] * 3, [0, 0, 0]],
    )
    assert result == NotGranted()
    assert [type(s) for s in steps] == [Fanout, Fanout]  # one attempt, one release, no sleep


@pytest.mark.parametrize("rand_value", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("wait", [0.003, 0.05, 0.3, 1.0])
def test_backoff_sleeps_are_bounded_by_the_wait_left(wait: float, rand_value: float) -> None:
    claim = lock_claim()
    clock = Clock()
    deadline = clock.now + wait
    trace: list[tuple[float, float]] = []  # (sleep, wait left when it was chosen)

    def advance(step: Any) -> float:
        if isinstance(step, Sleep):
            trace.append((step.seconds, deadline - clock.now))
            return step.seconds
        return 0.0

    replies = [[BUSY] * 3, [0] * 3, None] * 200
    algorithm = Quorum(3).acquire(claim, wait, False, clock, rand=lambda: rand_value)
    steps, result = drive(algorithm, replies, clock, advance)
    assert result == NotGranted()
    assert trace, "a positive wait retries after a pause"
    for failures, (slept, left) in enumerate(trace, start=1):
        assert slept == pytest.approx(min(left, protocol.backoff(failures, lambda: rand_value)))
        assert 0 < slept <= left
    assert sum(s for s, _ in trace) == pytest.approx(wait)  # waited the whole wait, no more
    # Every failed attempt was followed by a release on every master.
    rounds = [s for s in steps if isinstance(s, Fanout)]
    assert rounds[1::2] == [Fanout(claim.release_step())] * (len(rounds) // 2)


def test_wait_none_keeps_trying_with_capped_backoff() -> None:
    claim = lock_claim()
    replies = [[BUSY] * 3, [0] * 3, None] * 30 + [[GRANT] * 3]
    algorithm = Quorum(3).acquire(claim, None, False, Clock(), rand=lambda: 1.0)
    steps, result = drive(algorithm, replies)
    assert result == Granted()
    sleeps = [s.seconds for s in steps if isinstance(s, Sleep)]
    assert len(sleeps) == 30 and max(sleeps) == protocol.BACKOFF_CAP
    assert sleeps[:3] == pytest.approx([0.01, 0.02, 0.04])


@pytest.mark.parametrize(
    ("masters", "limit", "grants", "granted"),
    [
        (3, 2, 2, False),  # a majority is not enough for a semaphore of 2
        (3, 2, 3, True),
        (5, 2, 3, False),
        (5, 2, 4, True),
        (5, 3, 4, True),
        (7, 2, 4, False),
        (7, 2, 5, True),
    ],
)
def test_a_semaphore_needs_its_larger_quorum(
    masters: int, limit: int, grants: int, granted: bool
) -> None:
    claim = sem_claim(limit)
    replies = [[GRANT] * grants + [BUSY] * (masters - grants), [1] * masters]
    steps, result = drive(Quorum(masters).acquire(claim, 0, False, Clock()), replies)
    assert (result == Granted()) is granted
    args = steps[0].step.args
    assert args[:3] == ("tok", TTL_MS, protocol.TRY) and args[6] == limit  # each master's limit


# -- release, extend, owned, holders, abandon ---------------------------------------------


@pytest.mark.parametrize(
    ("replies", "released"),
    [
        ([1, 1, 1], True),
        ([1, 1, 0], True),
        ([1, 0, 0], False),  # two masters *answered* someone else's: no quorum can have it
        ([1, 2, 2], False),  # gone on two (expired, or the data was lost): same
        ([1, 2, 1], True),
        ([1, 1, redis.exceptions.ConnectionError()], True),
        # Nobody refused, too few confirmed in time (queued or paused masters): unconfirmed,
        # left to the holder's own clock -- never a LockLost from a merely slow master.
        ([1, builtins.TimeoutError(), redis.exceptions.ConnectionError()], None),
        # One refusal proves nothing (review 41): the acquire needed a quorum, not every
        # master, and a master that refused it (someone's stale lease there) refuses the
        # release too. Unconfirmed, to the holder's clock, as above.
        ([0, builtins.TimeoutError(), redis.exceptions.ConnectionError()], None),
        ([builtins.TimeoutError(), 1, 0], None),
        ([builtins.TimeoutError(), 0, 2], False),  # refused on two: the rest is no quorum
    ],
)
def test_release_is_lost_only_when_masters_answered_so(
    replies: list[Any], released: bool | None
) -> None:
    claim = lock_claim()
    steps, result = drive(Quorum(3).release(claim), [replies])
    assert result is released
    assert steps == [Fanout(claim.release_step())]


def test_a_semaphore_release_needs_its_quorum() -> None:
    # limit 2 over 3 masters needs all 3: one "ended" answer already rules a quorum out.
    assert drive(Quorum(3).release(sem_claim(2)), [[1, 1, 0]])[1] is False
    assert drive(Quorum(3).release(sem_claim(2)), [[1, 1, 1]])[1] is True


@pytest.mark.parametrize(
    ("replies", "owned"),
    [([1, 1, 0], True), ([1, 0, 0], False), ([1, 1, TimeoutError()], True), ([0, 0, 0], False)],
)
def test_owned_is_true_iff_a_quorum_still_has_the_token(replies: list[Any], owned: bool) -> None:
    claim = lock_claim()
    steps, result = drive(Quorum(3).owned(claim), [replies])
    assert result is owned and steps == [Fanout(claim.owned_step())]


@pytest.mark.parametrize(
    ("replies", "extended"),
    [
        ([1, 1, 1], True),
        ([1, 1, 0], True),
        ([1, 1, redis.exceptions.TimeoutError()], True),
        ([1, 0, 0], False),  # short of the quorum
        ([1, redis.exceptions.ConnectionError(), TimeoutError()], False),
    ],
)
def test_extend_needs_a_quorum(replies: list[Any], extended: bool) -> None:
    claim = lock_claim()
    clock = Clock()
    steps, result = drive(Quorum(3).extend(claim, 5_000, clock), [replies], clock, {Fanout: 0.01})
    assert result is extended
    assert steps == [Fanout(claim.extend_step(5_000))]
    assert steps[0].step.args == ("tok", 5_000)


@pytest.mark.parametrize(("round_s", "extended"), [(0.9, True), (0.99, False), (5.0, False)])
def test_extend_too_slow_for_its_new_ttl_fails(round_s: float, extended: bool) -> None:
    """Validity is judged against the ttl the extension carried (1 s here, drift 12 ms), not
    the claim's original ttl (10 s): after 0.99 s nothing of the new lease is left."""
    clock = Clock()
    algorithm = Quorum(3).extend(lock_claim(), 1_000, clock)
    _, result = drive(algorithm, [[1, 1, 1]], clock, {Fanout: round_s})
    assert result is extended


def test_a_semaphore_extension_needs_its_quorum() -> None:
    clock = Clock()
    assert drive(Quorum(3).extend(sem_claim(2), 5_000, clock), [[1, 1, 0]])[1] is False
    assert drive(Quorum(3).extend(sem_claim(2), 5_000, clock), [[1, 1, 1]])[1] is True


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ([0, 0, 0], 0),
        ([1, 0, 1], 1),
        ([0, 0, 1], 0),  # one master with a stale holder does not make the lock held
        ([1, 1, redis.exceptions.ConnectionError()], 1),
        ([0, TimeoutError(), TimeoutError()], 2**31),  # a quorum unreachable: count as full
        ([3, 0, 1, 2, ConnectionError()], 2),  # N=5: the 3rd smallest of 0,1,2,3,inf
        ([0, 0, ConnectionError(), TimeoutError(), TimeoutError()], 2**31),
        ([4, 4, 4, 0, 0], 4),
    ],
)
def test_holders_is_the_quorum_th_smallest_count(counts: list[Any], expected: int) -> None:
    steps, result = drive(Quorum(len(counts)).holders(protocol.SEMAPHORE, "sem:k"), [counts])
    assert result == expected
    assert steps == [Fanout(protocol.SEMAPHORE.count_step("sem:k"))]


@pytest.mark.parametrize(
    ("counts", "limit"),
    [
        ([0, 1, 1], 1),  # a lock: the majority's count decides, as it should
        ([0, 0, 2], 2),  # N=3, L=2 needs all 3 masters; the third is full
        ([1, 1, 2], 2),
        ([0, 0, 0, 2, 2], 2),  # N=5, L=2 needs 4 masters; only 3 have room
    ],
)
def test_holders_agrees_with_admission(counts: list[int], limit: int) -> None:
    """``holders`` is documented as "the holder count that decides admission", and
    ``Semaphore.locked()`` is ``holders() >= limit``. So whenever an acquire with ``limit``
    is refused by every master's count, holders must be >= limit (and < limit when it is
    admitted). A semaphore's quorum is larger than a lock's, so the lock's quorum-th count
    can be below the limit while the semaphore's quorum cannot be reached."""
    masters = len(counts)
    claim = make_claim("sem:k", kind=protocol.SEMAPHORE, limit=limit)
    # Each master admits the claim iff it counts fewer than `limit` holders.
    grants = [GRANT if count < limit else BUSY for count in counts]
    _, acquired = drive(Quorum(masters).acquire(claim, 0, False, Clock()), [grants, [0] * masters])
    _, holders = drive(Quorum(masters).holders(protocol.SEMAPHORE, "sem:k", limit), [counts])
    assert (holders >= limit) is (acquired == NotGranted()), (holders, acquired)


def test_abandon_releases_on_every_master() -> None:
    claim = lock_claim()
    steps, result = drive(Quorum(3).abandon(claim), [[0, 1, TimeoutError()]])
    assert result is None and steps == [Fanout(claim.release_step())]


# -- unknown reply codes ------------------------------------------------------------------


@pytest.mark.parametrize("bad", [7, -1, None, b"1", "1", [9, 100], (1, TTL_MS)])
def test_an_unknown_reply_from_any_master_is_an_error_not_a_no(bad: object) -> None:
    claim = lock_claim()
    clock = Clock()
    algorithms = {
        "acquire": (Quorum(3).acquire(claim, 0, False, clock), GRANT),
        "release": (Quorum(3).release(claim), 1),
        "extend": (Quorum(3).extend(claim, 5_000, clock), 1),
        "owned": (Quorum(3).owned(claim), 1),
    }
    for operation, (algorithm, good) in algorithms.items():
        with pytest.raises(ScriptReplyError, match=f"unexpected reply .* to {operation}"):
            drive(algorithm, [[good, bad, good]], clock)


def test_steps_are_fanouts_of_the_single_node_steps() -> None:
    """A quorum runs exactly the scripts a single node runs, on every master."""
    claim = lock_claim()
    first = next(Quorum(3).acquire(claim, 1.0, False, Clock()))
    assert isinstance(first, Fanout) and isinstance(first.step, Eval)
    assert first.step.script is claim.kind.acquire_script
