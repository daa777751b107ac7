"""The protocol core driven step by step with scripted replies and a fake clock: the waiting
arithmetic is deterministic here. (Behaviour against a real server is in the other files.)"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from support.core_helpers import Clock, drive, make_claim, own_length

from redlock_deco import _protocol as protocol
from redlock_deco._protocol import (
    AGAIN,
    HANDOFF_MS,
    QUEUE,
    QUEUE_WINDOW_MS,
    RECHECK,
    TRY,
    Call,
    Claim,
    Eval,
    Keys,
    Listen,
    Sleep,
    Wait,
)
from redlock_deco._scripts import ScriptReplyError


class Registration:
    """Stands in for the driver's registration: the core only passes it to Wait and
    closes it when the acquire ends."""

    closed = False
    cut_short: bool | None = None

    def close(self, cut_short: bool = False) -> None:
        self.closed, self.cut_short = True, cut_short


# These tests' leases last 30 s unless they say otherwise.
claim = functools.partial(make_claim, ttl_ms=30_000)


def modes(steps: list[Any]) -> list[Any]:
    """The acquire mode of each attempt (ARGV[3])."""
    acquire = protocol.LOCK.acquire_script
    return [s.args[2] for s in steps if isinstance(s, Eval) and s.script is acquire]


def test_keys_share_the_lock_keys_hash_slot() -> None:
    keys = Keys.for_key("lock:order:7")
    assert keys.queue == "{lock:order:7}:queue"
    tagged = Keys.for_key("lock:{user1}:x", fencing=True)
    assert tagged.queue == "lock:{user1}:x:queue" and tagged.fence == "lock:{user1}:x:fence"
    assert protocol.hash_tag(tagged.queue) == "user1"
    assert protocol.hash_tag("a{}b") is None


@pytest.mark.parametrize("key", ["lock:a}b", "lock:cfg:{}", "lock:}{", "lock:x{}y}"])
def test_waiter_keys_share_the_slot_even_for_keys_with_a_stray_brace(key: str) -> None:
    from redis.crc import key_slot

    keys = Keys.for_key(key, protocol.SEMAPHORE, fencing=True)
    siblings = (keys.queue, keys.limit or "", keys.fence or "")
    assert {key_slot(k.encode()) for k in (key, *siblings)} == {key_slot(key.encode())}


def test_the_fast_try_is_one_plain_set_where_its_success_alone_grants() -> None:
    """Nobody of ours listens on this server (no contention lately): the cheapest command,
    sent by the caller itself; a script wherever more is needed."""
    plain = protocol.SINGLE.fast_try(claim(), 10, False)
    assert plain == Call(("SET", "lock:k", "tok", "NX", "PX", 30000), acquiring=True)
    assert protocol.fast_granted(b"OK", 1.0) == protocol.Granted()
    assert protocol.fast_granted(None, 1.0) is None
    assert protocol.SINGLE.fast_try(claim(), 0, False) is None  # try-once: the script
    assert protocol.SINGLE.fast_try(claim(), 10, True) is None  # contended: queue at once
    assert protocol.SINGLE.fast_try(claim(fencing=True), 10, False) is None
    replicated = Claim(protocol.LOCK, Keys.for_key("lock:k"), "tok", 30_000, replicas=1)
    assert protocol.SINGLE.fast_try(replicated, 10, False) is None


def test_acquire_first_try_while_listening_queues_at_once() -> None:
    """Grants are heard here already: the waiter registers for its grant, then its first
    attempt queues if the lock is busy (a grant then always finds its waiter registered)."""
    clock = Clock()
    registration = Registration()
    algorithm = protocol.SINGLE.acquire(claim(), 10, True, clock)
    steps, result = drive(algorithm, [registration, [1, 30000]], clock, own_length())
    assert result == protocol.Granted()
    assert steps == [Listen("tok", 10), claim().acquire_step(QUEUE)]
    assert steps[1].args == ("tok", 30000, QUEUE, QUEUE_WINDOW_MS, HANDOFF_MS, 1, 1)
    assert registration.closed and not registration.cut_short  # a late grant copy: ignored


@pytest.mark.parametrize("fencing", [False, True])
def test_fenced_and_try_once_first_tries_use_the_script(fencing: bool) -> None:
    clock = Clock()
    fenced = claim(fencing=True) if fencing else claim()
    wait = 10 if fencing else 0
    steps, _ = drive(
        protocol.SINGLE.acquire(fenced, wait, False, clock), [[1, 30000, 7]], clock, own_length()
    )
    assert steps == [fenced.acquire_step(TRY)]


@pytest.mark.parametrize("listening", [False, True])
def test_try_once_neither_registers_nor_queues(listening: bool) -> None:
    clock = Clock()
    algorithm = protocol.SINGLE.acquire(claim(), 0, listening, clock)
    steps, result = drive(algorithm, [[0, 5000]], clock, own_length())
    assert result == protocol.NotGranted()
    assert len(steps) == 1 and modes(steps) == [TRY]  # never joins the queue, never listens


def test_a_waiter_starts_listening_before_it_queues() -> None:
    """A grant published before anyone listens would be lost (and the waiter skipped as
    gone): the first attempt only tries, the one after Listen queues, without waiting."""
    clock = Clock()
    registration = Registration()
    replies = [[0, 20_000], registration, [0, 20_000], None, [1, 30000]]
    steps, result = drive(
        protocol.SINGLE.acquire(claim(), 5.0, False, clock), replies, clock, own_length()
    )
    assert result == protocol.Granted()
    assert [type(s) for s in steps] == [Eval, Listen, Eval, Wait, Eval]
    assert steps[1] == Listen("tok", 5.0) and modes(steps) == [TRY, QUEUE, AGAIN]
    assert steps[3].registration is registration and registration.closed


def test_wait_is_bounded_by_lease_left_deadline_and_recheck() -> None:
    clock = Clock()
    registration = Registration()
    replies = [registration, [0, 300], None] + [[0, 20_000], None] * 5 + [[0, 20_000], 1]
    steps, result = drive(
        protocol.SINGLE.acquire(claim(), 5.0, True, clock), replies, clock, own_length()
    )
    waits = [s for s in steps if isinstance(s, Wait)]
    assert waits[0].timeout == pytest.approx(0.302)  # holder's lease ends in 300 ms
    # A lost grant costs at most RECHECK: then the waiter asks the server itself.
    assert [w.timeout for w in waits[1:-1]] == pytest.approx([RECHECK] * 4)
    assert waits[-1].timeout == pytest.approx(0.698)  # what is left of the 5 s wait
    assert all(w.registration is registration for w in waits)
    assert result == protocol.NotGranted()
    # Each check after the first keeps the waiter's place (AGAIN); giving up leaves the queue.
    assert modes(steps) == [QUEUE] + [AGAIN] * 6
    assert steps[-1] == claim().release_step(leaving=True)
    assert registration.closed and not registration.cut_short  # it left the queue itself


def test_a_wake_up_at_the_deadline_still_gets_its_attempt() -> None:
    clock = Clock()
    replies = [Registration(), [0, 20_000], None, [1, 30000]]
    steps, result = drive(
        protocol.SINGLE.acquire(claim(), 1.0, True, clock), replies, clock, own_length()
    )
    assert result == protocol.Granted()
    assert modes(steps) == [QUEUE, AGAIN]  # AGAIN: finds a hand-off whose grant went astray


def test_never_expiring_holder_waits_in_rechecks_forever_with_wait_none() -> None:
    clock = Clock()
    replies = [Registration(), [0, -1], None] + [[0, -1], None] * 49 + [[1, 30000]]
    steps, result = drive(
        protocol.SINGLE.acquire(claim(), None, True, clock), replies, clock, own_length()
    )
    assert result == protocol.Granted()
    assert {s.timeout for s in steps if isinstance(s, Wait)} == {RECHECK}
    assert sum(isinstance(s, Listen) for s in steps) == 1  # registered once, for good


def test_a_fresh_grant_is_used_without_a_round_trip() -> None:
    clock = Clock()
    replies = [Registration(), [0, 20_000], clock.now + 0.1]
    algorithm = protocol.SINGLE.acquire(claim(), 5.0, True, clock)
    steps, result = drive(algorithm, replies, clock, own_length({Wait: 0.1}))
    assert [type(s) for s in steps] == [Listen, Eval, Wait]  # woken up holding it
    # The waiter's own ttl (the grant gave it that), measured from the last attempt (the
    # grant followed it): no constant hand-off lease stands in for it.
    assert result == protocol.Granted()
    assert result.sent_at == 100.0


@pytest.mark.parametrize("ttl_ms", [100, 400, 30_000, 120_000])
def test_a_grant_read_within_half_the_waiters_own_ttl_is_used_as_is(ttl_ms: int) -> None:
    """Freshness is judged against the waiter's own ttl, which the grant gave it: a grant
    read later than half of it is confirmed first (the lease may be gone by then)."""
    for late, confirmed in ((ttl_ms / 1000 * 0.45, False), (ttl_ms / 1000 * 0.55, True)):
        clock = Clock()
        replies = [Registration(), [0, 20_000], clock.now + late, [1, ttl_ms]]
        algorithm = protocol.SINGLE.acquire(claim(ttl_ms=ttl_ms), 500.0, True, clock)
        steps, result = drive(algorithm, replies, clock, own_length({Wait: late}))
        assert result == protocol.Granted()
        assert modes(steps) == ([QUEUE, AGAIN] if confirmed else [QUEUE])


@pytest.mark.parametrize("confirm", [True, False], ids=["confirm", "stale-grant"])
def test_a_grant_is_confirmed_when_it_must_be_or_arrived_late(confirm: bool) -> None:
    """Fencing, replicas or no renewer (confirm), or a grant read long after the attempt
    (a stopped process): one more attempt, in mode AGAIN, before the lease is used."""
    clock = Clock()
    late = 0.1 if confirm else 30.0  # the whole lease: stale
    replies = [Registration(), [0, 20_000], clock.now + late, [1, 30000, 77]]
    algorithm = protocol.SINGLE.acquire(claim(confirm=confirm), 5.0, True, clock)
    steps, result = drive(algorithm, replies, clock, own_length({Wait: late}))
    assert modes(steps) == [QUEUE, AGAIN]
    assert result == protocol.Granted(77)


def test_backoff_fallback_without_a_subscription() -> None:
    clock = Clock()
    replies = [[0, 10_000], None, None, [0, 10_000], None, [0, 10_000], None, [1, 30000]]
    steps, result = drive(
        protocol.SINGLE.acquire(claim(), 5.0, False, clock, rand=lambda: 1.0),
        replies,
        clock,
        own_length(),
    )
    sleeps = [s.seconds for s in steps if isinstance(s, Sleep)]
    assert result == protocol.Granted()
    assert sleeps == [0.01, 0.02, 0.04]  # growing, jittered (rand=1)
    assert sum(isinstance(s, Listen) for s in steps) == 1  # asked once; nobody would hear
    assert set(modes(steps)) == {TRY}  # no queue entries: a grant could not reach it


def test_release_and_extend_outcomes() -> None:
    clock = Clock()
    assert drive(protocol.SINGLE.release(claim()), [1], clock)[1] is True
    assert drive(protocol.SINGLE.release(claim()), [0], clock)[1] is False
    assert drive(protocol.SINGLE.release(claim()), [2], clock)[1] is False  # gone
    assert drive(protocol.SINGLE.extend(claim(), 5000), [1], clock)[1] is True
    assert drive(protocol.SINGLE.extend(claim(), 5000), [0], clock)[1] is False


def test_abandon_is_one_release_that_leaves_the_queue() -> None:
    steps, result = drive(protocol.SINGLE.abandon(claim()), [1], Clock())
    assert steps == [claim().release_step(leaving=True)] and result is None
    assert steps[0].args == ("tok", HANDOFF_MS, 1, 1, "tok|30000|1", 1)


@pytest.mark.parametrize("reply", [7, b"1", None, -1])
def test_unknown_reply_codes_are_errors_not_false(reply: object) -> None:
    with pytest.raises(ScriptReplyError, match="unexpected reply"):
        drive(protocol.SINGLE.release(claim()), [reply], Clock())


def test_after_a_busy_fast_try_the_waiter_queues_before_it_waits_even_if_listening_now() -> None:
    """fast_try's plain SET never queues; by the time the algorithm runs, another thread may
    have made the subscription. The waiter must still queue (a wait nobody would end)."""
    clock = Clock()
    claim_ = claim()
    assert protocol.SINGLE.fast_try(claim_, 5.0, False) == claim_.plain_step()
    assert protocol.SINGLE.fast_try(claim_, 5.0, True) is None  # contended: the script
    registration = Registration()
    algorithm = protocol.SINGLE.acquire(claim_, 5.0, True, clock, tried=True)
    steps, result = drive(algorithm, [registration, [0, 20_000], 0.0], clock, own_length())
    assert [type(s) for s in steps] == [Listen, Eval, Wait] and modes(steps) == [QUEUE]
    assert result == protocol.Granted()


def test_a_waiter_giving_up_after_a_plain_set_releases_what_a_retry_may_have_taken() -> None:
    """fast_try's plain SET NX, re-sent by a client retry after its reply was lost, is
    answered "busy" by the waiter's own lease. A waiter that then gives up without another
    attempt must release it, or its lease keeps the lock for its whole ttl (found by the
    simulator, seed 533)."""
    clock = Clock()
    algorithm = protocol.SINGLE.acquire(claim(), 0.05, False, clock, tried=True)
    # No subscription could be made, and by then the wait ran out: it gives up at once.
    steps, result = drive(algorithm, [None, 1], clock, own_length({Listen: 0.06}))
    assert result == protocol.NotGranted()
    assert steps[-1] == claim().release_step(leaving=True)


def test_a_waiter_cut_short_says_so_and_one_that_left_or_took_it_does_not() -> None:
    """The subscriber gives back a grant only for a waiter cut short before it could leave
    the queue: anything else nobody waits for is a late copy of a grant already taken."""
    clock = Clock()
    registration = Registration()
    algorithm = protocol.SINGLE.acquire(claim(), 5.0, True, clock)
    assert next(algorithm) == Listen("tok", 5.0)
    assert algorithm.send(registration) == claim().acquire_step(QUEUE)
    assert isinstance(algorithm.send([0, 20_000]), Wait)
    with pytest.raises(KeyboardInterrupt):
        algorithm.throw(KeyboardInterrupt)
    assert registration.closed and registration.cut_short


def test_a_grant_read_early_but_taken_late_is_confirmed_first() -> None:
    """Its age is measured when it is used: a grant another thread read while this waiter
    sat in a slow attempt, taken 20 s later, may be a lease long passed on (found by the
    simulator, seed 24009)."""
    clock = Clock()
    replies = [Registration(), [0, 20_000], clock.now + 0.1, [1, 30_000]]
    algorithm = protocol.SINGLE.acquire(claim(), 60.0, True, clock)
    steps, result = drive(algorithm, replies, clock, own_length({Wait: 20.0}))
    assert result == protocol.Granted()
    assert modes(steps) == [QUEUE, AGAIN]  # asked the server before using it


def test_a_cut_short_waiters_grant_is_given_back_only_on_its_own_database() -> None:
    """Review 39: grant channels ignore the database, so a subscriber of the process on
    database 1 heard the grant of a waiter cut short on database 0, took the give-back, and
    sent it on database 1, where no such key is: the grant was lost, the lock held by
    nobody for the waiter's whole ttl. Only a subscriber on the waiter's own database gives
    it back; one whose location is unknown still does (a cluster's)."""
    from redlock_deco import _waiting as waiting

    saved = waiting.registry
    waiting.registry = waiting.Registry()
    try:
        db0, db1 = 0, 1
        cut = waiting.Board(True, db0)
        cut.add("p:1:w", object())
        cut.forget("p:1:w", next(iter(cut.waiting.values())), cut_short=True)
        message = "p:1:w L lock:x"
        assert waiting.Board(True, db1).deliver(message) == (None, None)  # not its own
        waiter, claim = waiting.Board(True, db0).deliver(message)
        assert waiter is None and claim is not None and claim.token == "p:1:w"
        assert waiting.Board(True, db0).deliver(message) == (None, None)  # once

        cut.add("p:1:v", object())
        cut.forget("p:1:v", next(iter(cut.waiting.values())), cut_short=True)
        waiter, claim = waiting.Board(True, None).deliver("p:1:v L lock:x")
        assert claim is not None  # a subscriber whose location is unknown: as before
    finally:
        waiting.registry = saved


def test_a_clients_location_is_its_database_whatever_the_address() -> None:
    """Review 41: the location compared host, port and socket path too, so one server
    reached as ``localhost`` and as ``127.0.0.1``, or over a unix socket and TCP, counted as
    two, and a dead waiter's grant was not given back (each held the lock for its ttl). A
    grant reaches only the subscribers of the server that published it: the database is all
    there is left to tell apart."""
    import redis

    from redlock_deco._waiting import location

    assert location(redis.Redis(host="h", port=1, db=3)) == 3
    assert location(redis.Redis(host="localhost", port="1", db="3")) == 3
    assert location(redis.Redis(unix_socket_path="/tmp/r.sock", db=3)) == 3
    assert location(redis.Redis(host="127.0.0.1", port=1)) == 0
    assert location(object()) is None


def test_looking_for_closed_loops_survives_a_subscriber_added_meanwhile() -> None:
    """Review 40, 3: the process's subscribers are a WeakSet, iterated in Python, and every
    new event loop's first wait adds one. A subscriber that heard a grant it did not know
    looked for closed loops while another thread added a subscriber, and "Set changed size
    during iteration" came out of a waiter's acquire. Here the set grows during the first
    iteration, as another thread's add would make it."""
    import weakref

    from redlock_deco import _waiting as waiting

    class Subscriber:
        def loop_closed(self) -> bool:
            return False

    kept = [Subscriber() for _ in range(3)]

    class Growing(weakref.WeakSet):  # type: ignore[type-arg]
        grew = False

        def __iter__(self):  # type: ignore[no-untyped-def]
            for item in super().__iter__():
                if not self.grew:
                    self.grew = True
                    kept.append(Subscriber())
                    self.add(kept[-1])  # another thread's new loop, meanwhile
                yield item

    saved = waiting._subscribers
    waiting._subscribers = Growing(kept)
    try:
        assert waiting.abandon_closed() is False
        assert waiting._subscribers.grew
    finally:
        waiting._subscribers = saved
