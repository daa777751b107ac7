"""Redlock quorum over independent masters: locks and semaphores, the semaphore quorum,
validity, faults (masters killed or paused), and mutual exclusion across processes."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from support import workers
from support.flavours import Api
from support.samples import wait_until

import redlock_deco
from redlock_deco import Lock, LockNotAcquired, Semaphore, locked, register_provider
from redlock_deco._quorum import validity_ms
from redlock_deco.testing import RedisServer

spawn = multiprocessing.get_context("spawn")


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[RedisServer]]:
    servers = [RedisServer() for _ in range(5)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.__exit__(None, None, None)


@pytest.fixture
def masters(fleet: list[RedisServer]) -> Iterator[list[RedisServer]]:
    """Three live, empty masters registered as the quorum provider "q"."""
    for server in fleet:
        if server.process is None:
            server.start()
        server.resume()
        server.client().flushall()
    three = fleet[:3]
    register_provider("q", [s.url for s in three])
    yield three
    for server in three:
        if server.process is not None:
            server.resume()


def on_masters(masters: list[RedisServer], key: str) -> list[bool]:
    return [bool(s.client().exists(key)) for s in masters if s.process is not None]


def test_lock_lives_on_every_master_in_both_flavours(api: Api, masters: list[RedisServer]) -> None:
    async def body(n: int) -> list[bool]:
        return on_masters(masters, f"lock:q:{n}")

    decorated = api.decorate(locked("q:{n}", provider="q"), body)

    async def scenario(api: Api) -> list[bool]:
        async with api.Lock("obj", provider="q", ttl=5) as lock:
            assert await lock.owned()
            assert on_masters(masters, "lock:obj") == [True] * 3
        result: list[bool] = await api.call(decorated, 1)
        return result

    assert api.run(scenario) == [True] * 3
    assert on_masters(masters, "lock:q:1") == [False] * 3
    assert on_masters(masters, "lock:obj") == [False] * 3


def test_renewed_by_quorum_and_exclusive_meanwhile(masters: list[RedisServer]) -> None:
    refused: list[bool] = []

    @locked("renew", provider="q", ttl=0.4)
    def holder() -> None:
        other = threading.Thread(
            target=lambda: refused.append(not Lock("renew", provider="q", wait=0.2).acquire())
        )
        other.start()
        time.sleep(1.0)  # past two ttls: kept alive by quorum extensions
        other.join()

    holder()  # no LockLost
    assert refused == [True]
    assert on_masters(masters, "lock:renew") == [False] * 3


def test_remaining_on_a_quorum_is_redlock_validity(api: Api, masters: list[RedisServer]) -> None:
    """remaining() is what the holder may count on: on a quorum, ttl less the round's time
    *and* the clock-drift allowance, after acquiring and after an extension (which records
    its expiry the way a renewal does); on one Redis, the whole ttl (b13: it ignored drift)."""

    async def scenario(api: Api) -> list[float]:
        seen = []
        async with api.Lock("v", provider="q", ttl=100, auto_renew=False) as lock:
            seen.append(lock.lease.remaining())
            await lock.extend(to=50)
            seen.append(lock.lease.remaining())
        async with api.Lock("v", ttl=100, auto_renew=False) as single:
            seen.append(single.lease.remaining())
        return seen

    acquired, extended, single = api.run(scenario)
    assert 95 < acquired <= validity_ms(100_000, 0) / 1000  # 98.998 s at most
    assert 45 < extended <= validity_ms(50_000, 0) / 1000  # 49.498 s at most
    assert 99.5 < single <= 100


def test_a_lease_too_short_for_the_round_is_never_granted(masters: list[RedisServer]) -> None:
    # ttl 10 ms (the shortest allowed) with two masters answering 200 ms late: the round takes
    # longer than the lease, so validity is negative although a quorum granted it. The
    # provider's connections are opened first: on a busy CI machine, connecting took longer
    # than a 20 ms pause, the pause was over before the write came, and the lock was granted.
    warm = Lock("warm", provider="q", ttl=1, wait=0)
    assert warm.acquire()
    warm.release()
    for master in masters[:2]:
        with master.client() as pauser:
            pauser.execute_command("CLIENT", "PAUSE", 200, "WRITE")
    assert not Lock("tiny", provider="q", ttl=0.01, wait=0).acquire()
    # released on every master, once the paused ones run the release
    assert wait_until(lambda: on_masters(masters, "lock:tiny") == [False] * 3, timeout=3)


def test_semaphore_quorum_refuses_a_third_holder_of_two_slots(masters: list[RedisServer]) -> None:
    """With 3 masters and limit 2, holders A (masters 0,1) and B (masters 1,2) leave one free
    slot on masters 0 and 2: a majority (2 of 3) would admit a third holder -- three holders
    of a two-slot semaphore. The semaphore quorum (3 of 3) refuses it."""
    seconds, _ = masters[0].client().time()
    far = (seconds + 60) * 1000
    for index, holders in enumerate([["A"], ["A", "B"], ["B"]]):
        masters[index].client().zadd("sem:pair", {h: far for h in holders})
    third = Semaphore("pair", limit=2, provider="q", wait=0)
    assert not third.acquire()
    assert [s.client().zcard("sem:pair") for s in masters] == [1, 2, 1]  # nothing left behind


def test_semaphore_under_quorum_bound(masters: list[RedisServer]) -> None:
    from redlock_deco import _providers as providers

    # (replies, not timing: a master slower than the 0.25 s node timeout on a busy machine
    # cost a wait=0 acquire its quorum once)
    providers.sync_target("q").node_timeout = 2.0  # type: ignore[union-attr]
    sem = Semaphore("slots", limit=2, provider="q", ttl=5, wait=0)
    assert sem.acquire() and sem.acquire()
    assert not sem.acquire()
    assert sem.holders() == 2 and sem.locked()
    sem.release()
    sem.release()
    assert [s.client().exists("sem:slots") for s in masters] == [0, 0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_a_minority_down_still_locks(masters: list[RedisServer], fault: str) -> None:
    down = masters[2]
    down.kill() if fault == "kill" else down.pause()
    started = time.monotonic()
    with Lock("minority", provider="q", ttl=5, wait=2) as lock:
        assert lock.owned()
    assert time.monotonic() - started < 1.5  # one short per-node timeout per round, at most
    assert on_masters(masters[:2], "lock:minority") == [False, False]


def test_leases_held_through_a_quorum_provider_registered_again_are_renewed_and_released(
    masters: list[RedisServer],
) -> None:
    """Review 63, F1: the leases keep the target they were taken through; registered again,
    that target's masters are retired, and a retired master handed back at once the
    connection made for the round waiting for it. No round got one: every lease was reported
    lost (a block whose body ended normally raised LockLost), and a release left its keys on
    every master until their ttl."""
    lost: list[str] = []
    locks = [
        Lock(f"kept:{n}", provider="q", ttl=1.5, on_lost=lambda lease: lost.append(lease.name))
        for n in range(3)
    ]
    for lock in locks:
        assert lock.acquire()
    register_provider("q", [s.url for s in masters])  # (the same masters, again)
    # (renewed through the retired target, past two ttls; a 0.6 s ttl was reported lost
    # once on a loaded machine)
    time.sleep(3.2)
    try:
        assert lost == []
        assert all(lock.owned() for lock in locks)
    finally:
        for lock in locks:
            lock.release()
    assert [on_masters(masters, f"lock:kept:{n}") for n in range(3)] == [[False] * 3] * 3


@pytest.mark.slow
def test_many_leases_are_renewed_while_a_minority_of_masters_is_stopped(
    masters: list[RedisServer],
) -> None:
    """Review 61, F1: every sync renewal round of a target ran on one worker, one at a time,
    and a quorum round waits the node timeout (0.25 s) for a stopped master -- four renewals
    a second: of 12 leases of 2 s, 7 were reported lost while two masters of three ran, and
    the README promises a minority of failed masters costs nothing. Rounds of one target now
    run side by side (up to RENEWAL_LANES)."""
    lost: list[str] = []
    locks = [
        Lock(f"many:{n}", provider="q", ttl=2, on_lost=lambda lease: lost.append(lease.name))
        for n in range(16)
    ]
    for lock in locks:
        assert lock.acquire()
    masters[2].pause()
    try:
        time.sleep(4)  # two ttls
    finally:
        masters[2].resume()
    try:
        assert lost == []
        assert all(lock.owned() for lock in locks)
    finally:
        for lock in locks:
            lock.release()


@pytest.mark.slow
def test_a_majority_down_fails_within_wait_and_leaves_nothing(masters: list[RedisServer]) -> None:
    masters[1].kill()
    masters[2].pause()

    @locked("majority", provider="q", ttl=5, wait=1.0)
    def f() -> None: ...

    started = time.monotonic()
    with pytest.raises(LockNotAcquired):
        f()
    assert time.monotonic() - started < 1.0 + 0.6  # wait + at most one more round
    assert not masters[0].client().exists("lock:majority")


@pytest.mark.slow
def test_no_lost_updates_across_processes_under_quorum(
    masters: list[RedisServer], server: RedisServer, r: redis.Redis
) -> None:
    urls = [s.url for s in masters]
    procs, times = 3, 25
    with spawn.Pool(procs) as pool:
        done = pool.starmap(
            workers.increment_many, [(server.url, "qcounter", times, 5.0, urls)] * procs
        )
    assert sum(done) == procs * times
    assert int(r.get("qcounter") or 0) == procs * times


def test_a_master_paused_past_the_round_keeps_no_lease_of_a_finished_call(
    api: Api, masters: list[RedisServer]
) -> None:
    """Finding b04: master A paused while calls run (each round gives up on it after the
    node timeout; the calls go on with the other two). Once A had owed replies for longer
    than MAX_BEHIND, its connection was closed and the next release went out on another
    one: on resume A ran the late acquire (the release was lost, or ran first), keeping a
    lease of a finished call for its whole ttl. On resume every acquire A runs must be
    followed by its release: no key left, in both flavours."""
    from redlock_deco._fanout import MAX_BEHIND, NODE_TIMEOUT

    cycles = int(MAX_BEHIND / (2 * NODE_TIMEOUT)) + 4  # past MAX_BEHIND with A paused

    async def scenario(api: Api) -> None:
        async with api.Lock("warm", provider="q", ttl=30):
            pass
        masters[0].pause()
        try:
            for n in range(cycles):
                async with api.Lock(f"job:{n}", provider="q", ttl=30):
                    pass
        finally:
            masters[0].resume()

    api.run(scenario)
    with masters[0].client() as a:
        deadline = time.monotonic() + 5
        while a.keys("lock:job:*") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.keys("lock:job:*") == []


def test_a_master_that_refused_the_acquire_does_not_make_its_release_lost(
    api: Api, masters: list[RedisServer]
) -> None:
    """Review 41: master C holds someone's stale lease, so the acquire wins on A and B only;
    A is paused at the release. B confirms, C refuses (it never granted this lease), A does
    not answer: the release reported the lease lost (LockLost) for a lease held 0.1 s of its
    30 s. One refusal proves nothing; the holder's clock decides, and it had 29.9 s left."""
    masters[2].client().set("lock:stale-on-c", "someone-else", px=30_000)

    async def scenario(api: Api) -> None:
        async with api.Lock("stale-on-c", provider="q", ttl=30):
            await api.sleep(0.1)
            masters[0].pause()
        masters[0].resume()

    try:
        api.run(scenario)  # no LockLost
    finally:
        masters[0].resume()


@pytest.mark.parametrize("again", [False, True], ids=["registered", "registered-again"])
def test_aclose_waits_for_what_a_stalled_master_still_owes(
    masters: list[RedisServer], again: bool
) -> None:
    """Review 41, F3: asyncio, one master paused while calls run, then aclose(): it closed the
    clients after a second, dropping the releases queued behind acquires the master still
    owed; on resume the master ran those acquires, and each left a lease of a finished call
    for its ttl. aclose() now waits for what is owed, up to its SHUTDOWN_TIMEOUT. Review 64,
    F5: so also for the target of a provider registered again meanwhile (forgotten, it was
    closed at once under what it owed)."""
    import asyncio
    import threading

    import redlock_deco.asyncio as aio

    async def scenario() -> None:
        async with aio.Lock("warm", provider="q", ttl=30):
            pass
        masters[0].pause()
        for n in range(3):
            async with aio.Lock(f"owed:{n}", provider="q", ttl=30):
                pass
        if again:
            register_provider("q", [s.url for s in masters])
        threading.Timer(1.5, masters[0].resume).start()
        await redlock_deco.aclose()

    try:
        asyncio.run(scenario())
    finally:
        masters[0].resume()
    assert masters[0].client().keys("lock:owed:*") == []


def test_more_calls_than_a_paused_master_may_owe_leave_no_lease_on_it(
    masters: list[RedisServer],
) -> None:
    """Found in review: asyncio, one master paused while 40 tasks each take and release a
    lock (more than MAX_OWED commands owed). Refusing the releases past MAX_OWED left the
    acquires queued before them as orphan leases when the master came back; only new acquire
    attempts are refused."""
    import asyncio

    from redlock_deco._fanout import MAX_OWED
    from redlock_deco.asyncio import Lock as AsyncLock

    calls = MAX_OWED + 8

    async def main() -> int:
        done = 0

        async def one(n: int) -> None:
            nonlocal done
            # A long wait: with one master paused every call needs both others within the
            # round's node timeout, which a loaded machine can miss a few times in a row.
            async with AsyncLock(f"many:{n}", provider="q", ttl=30, wait=30):
                pass
            done += 1

        masters[2].pause()
        try:
            await asyncio.gather(*(one(n) for n in range(calls)))
        finally:
            masters[2].resume()
        await asyncio.sleep(1.0)  # the resumed master runs what it had received
        return done

    assert asyncio.run(main()) == calls
    paused = masters[2].client()
    deadline = time.monotonic() + 5
    while paused.keys("lock:many:*") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert paused.keys("lock:many:*") == []


def test_a_lease_handed_over_is_adopted_on_every_master(
    api: Api, masters: list[RedisServer]
) -> None:
    async def scenario(api: Api) -> None:
        giver = api.Lock("adopted", provider="q", ttl=30, wait=0)
        assert await giver.acquire()
        token = await giver.hand_over()
        masters[2].pause()  # a minority away: the quorum still answers
        try:
            taker = api.Lock("adopted", provider="q", ttl=5)
            assert await taker.adopt(token)
            assert [0 < s.client().pttl("lock:adopted") <= 5_000 for s in masters[:2]] == [
                True,
                True,
            ]
            assert not await api.Lock("adopted", provider="q").adopt(token + "x")
            await taker.release()
        finally:
            masters[2].resume()
        assert on_masters(masters, "lock:adopted")[:2] == [False, False]

    api.run(scenario)


def test_extend_by_adds_on_a_quorum_even_when_small(masters: list[RedisServer]) -> None:
    """Review 6, F3: extend(by=S) measured what was left by the holder's drift-reduced
    reckoning, so on a quorum it shortened the lease whenever S was under 1% of it."""
    lock = Lock("by-q", provider="q", ttl=600, auto_renew=False)
    assert lock.acquire()
    try:
        for _ in range(3):
            before = min(s.client().pttl("lock:by-q") for s in masters)
            lock.extend(by=1)
            after = min(s.client().pttl("lock:by-q") for s in masters)
            assert 800 < after - before <= 1_100, (before, after)
    finally:
        lock.release()


def connections(masters: list[RedisServer]) -> list[int]:
    """Connections to each master, the probe's own left out."""
    counts = []
    for master in masters:
        with master.client() as probe:
            counts.append(len(probe.client_list()) - 1)
    return counts


def back_to(before: list[int], masters: list[RedisServer]) -> Callable[[], bool]:
    """Whether each master has no more connections than ``before`` (taken before the provider
    under test connected: a connection of an earlier test of this worker, still closing,
    is not this test's; CI's 3.12 leg saw [1, 0, 0] on the master earlier tests paused)."""
    return lambda: all(now <= then for now, then in zip(connections(masters), before, strict=True))


def test_unregistering_a_quorum_provider_closes_its_connections(masters: list[RedisServer]) -> None:
    """A provider built from URLs owns its clients: unregistered (or registered again), its
    idle connections close at once -- the masters' and the eviction check's, kept in spare
    slots, included. They waited for the cycle collector, which may close a socket before its
    connection: a ResourceWarning, an error under -W error (CI, at a worker's exit)."""

    before = connections(masters)
    lock = Lock("conns", provider="q", ttl=1, wait=0)
    assert lock.acquire()
    lock.release()
    assert min(connections(masters)) >= 1  # the round's (and the eviction check's, on first use)
    # The check may still be running (a slow machine): its slot's connection closes as it
    # is freed, so wait for it, as for any command in flight.
    assert wait_until(
        lambda: not any(t.name == "redlock-deco-check" for t in threading.enumerate()), 5
    )
    gc.disable()  # closed by the library, not by the collector when it happens to run
    try:
        redlock_deco.unregister_provider("q")
        assert wait_until(back_to(before, masters), timeout=3), (before, connections(masters))
    finally:
        gc.enable()


def test_a_lagging_masters_connection_closes_once_drained_after_unregistering(
    masters: list[RedisServer],
) -> None:
    """A master that answered late (paused) has its connection drained in the background
    before it goes back to its pool. Drained after the provider was unregistered, it went
    back open, into a pool already closed, and stayed so until the collector came (the 3.12
    CI leg: [1, 0, 0] connections left)."""

    before = connections(masters)
    with Lock("lagging", provider="q", ttl=5):
        pass  # connected, and the first call's server check done
    assert wait_until(
        lambda: not any(t.name == "redlock-deco-check" for t in threading.enumerate()), 5
    )
    masters[0].pause()
    try:
        with Lock("lagging", provider="q", ttl=5):
            pass  # the other two answer: master 0 owes its replies
        gc.disable()  # closed by the library, not by the collector when it happens to run
        redlock_deco.unregister_provider("q")
    finally:
        masters[0].resume()
    try:
        assert wait_until(back_to(before, masters), timeout=5), (before, connections(masters))
    finally:
        gc.enable()
    assert masters[0].client().keys("lock:*") == []  # what it ran late was released


def _block_traced(name: str, ttl: float, wait: float, tracer: Any, profile: Any = None) -> None:
    """A ``with`` block of ``name`` on the quorum "q", run under ``tracer`` (and ``profile``)
    for this thread; a KeyboardInterrupt they raise ends it, and is dropped."""
    import sys

    sys.settrace(tracer)
    sys.setprofile(profile)
    try:
        with Lock(name, provider="q", ttl=ttl, wait=wait):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
        sys.settrace(None)


def test_an_interrupt_at_every_line_of_a_quorum_round_leaves_no_reply_off(
    masters: list[RedisServer],
) -> None:
    """Review 42: an interrupt between a pipelined read and its count left a connection a
    reply off, and a later round read an earlier command's reply as its acquire's
    (ScriptReplyError; once two holders with no LockLost). A KeyboardInterrupt at each line of
    the fan-out's sends and reads, in turn, on a lock's acquire and release: the next calls
    must work."""
    from types import FrameType

    from redlock_deco import _fanout

    def ours(frame: FrameType) -> bool:
        # The pipelined sends and reads (the clean-up's lanes have the test below; an
        # interrupt on its lines may lose a connection, a documented limit).
        return frame.f_code in (_fanout._Call.read.__code__, _fanout._Call.send.__code__)

    def run(fire_at: int | None) -> int:
        seen = 0

        def tracer(frame: FrameType, event: str, arg: Any) -> Any:
            nonlocal seen
            if event == "call":
                return tracer if ours(frame) else None
            if event == "line":
                seen += 1
                if seen == fire_at:
                    raise KeyboardInterrupt
            return tracer

        _block_traced("intr", 0.5, 2, tracer)
        return seen

    with Lock("intr", provider="q", ttl=0.5, wait=2):  # warm: scripts loaded, connections made
        pass
    points = run(None)
    assert points > 10
    for n in range(1, points + 1):
        run(n)
        for _ in range(2):  # on this thread's connections, whatever the interrupt left
            with Lock("intr", provider="q", ttl=0.5, wait=2) as held:
                assert held.lease is not None and held.lease.remaining() > 0, n


@pytest.mark.timeout(300)
def test_an_interrupt_wherever_a_signal_lands_in_a_quorum_round_loses_no_lane_place(
    masters: list[RedisServer],
) -> None:
    """A KeyboardInterrupt at each point of a quorum round (acquire and release) where a real
    signal lands -- as a function of the fan-out starts, as any call returns into it (a
    Python function's, a C function's, a type's), as a loop jumps back -- each of its first
    two times, in turn: after each, every master's lanes have all their places (a lane place
    lost made every renewal and release of the process wait PLACE_WAIT, the interrupt's own
    clean-up first: review 97 F1, a cut between two masters' settle() in the round's
    `finally`; review 98 F1, a cut as the `map()` building the give-back returned), and the
    next call gets in at once."""
    import collections
    import dis
    import sys
    from types import FrameType

    from redlock_deco import _fanout
    from redlock_deco import _providers as providers

    quorum = providers.sync_target("q")
    assert isinstance(quorum, _fanout.QuorumSyncTarget)
    source = _fanout.__file__
    the_round = _fanout.QuorumSyncTarget._round.__code__
    Point = tuple[object, str, int, int]  # code, what, line, which time (1 or 2)

    def in_round(frame: FrameType | None) -> bool:
        while frame is not None:
            if frame.f_code is the_round:
                return True
            frame = frame.f_back
        return False

    # After each of these a real signal is raised (CPython checks as any call returns into
    # the frame: a Python function's, a C function's or a type's, such as map()).
    calls = frozenset(op for op in dis.opname if op.startswith("CALL") and "INTRINSIC" not in op)

    def run(fire_at: Point | None) -> list[Point]:
        seen: collections.Counter[tuple[object, str, int]] = collections.Counter()
        points: list[Point] = []
        last: dict[FrameType, int] = {}  # a frame's last instruction run

        def point(frame: FrameType, what: str) -> None:
            where = (frame.f_code, what, frame.f_lineno)
            seen[where] += 1
            if seen[where] <= 2:
                points.append((*where, seen[where]))
                if points[-1] == fire_at:
                    sys.settrace(None)
                    raise KeyboardInterrupt

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                before = last.get(frame)
                last[frame] = frame.f_lasti
                if before is not None and dis.opname[frame.f_code.co_code[before]] in calls:
                    point(frame, f"after the call at {before}")
                elif before is not None and frame.f_lasti < before:
                    point(frame, "back")  # a jump back
            return local

        def tracer(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "call" and frame.f_code.co_filename == source and in_round(frame):
                point(frame, f"call {frame.f_code.co_name}")
                frame.f_trace_opcodes = True
                return local
            return None

        _block_traced("lanes", 2, 1, tracer)
        return points

    def places() -> list[list[tuple[int, int]]]:
        return [
            [(lane._free.qsize(), lane._n) for lane in master.lanes or ()]
            for master in quorum._masters
        ]

    def whole() -> bool:
        return all(free == n for lanes in places() for free, n in lanes)

    with Lock("lanes", provider="q", ttl=2, wait=1):  # warm: scripts loaded, connections made
        pass
    listed = run(None)
    assert wait_until(whole, 1.5), places()  # (a master's late reply may hold one a moment)
    assert len(listed) > 30, listed
    kinds = {what.split()[0] for _, what, _, _ in listed}
    if kinds == {"call"} and sys.version_info[:2] == (3, 12):
        pytest.skip(f"Python {sys.version.split()[0]}'s settrace delivers no opcode events")
    assert {"call", "after", "back"} <= kinds, kinds
    for fire_at in listed:
        run(fire_at)
        where = f"{fire_at[1]} at line {fire_at[2]} (time {fire_at[3]})"
        assert wait_until(whole, 1.5), (
            f"a lane place lost after an interrupt at {where}: {places()}"
        )
        started = time.monotonic()
        with Lock("lanes", provider="q", ttl=2, wait=1):
            pass
        assert time.monotonic() - started < 1.5, where


@pytest.mark.interrupts  # one call per interrupt point: the interrupts CI leg
@pytest.mark.timeout(120)  # (a wedge can stop this thread too: 20 s when none does)
def test_an_interrupt_in_a_round_waiting_for_a_connect_wedges_no_other_call(
    masters: list[RedisServer],
) -> None:
    """Review 43, F4: a round whose master's connect was under way waited for it with
    ``concurrent.futures.wait()``, whose ``__enter__`` takes each future's Condition in Python
    code. A KeyboardInterrupt as that returned left a Condition held for good: the master's
    worker blocked in ``set_result``, and every later call through the quorum hung whatever
    its wait. With a master paused (its connect under way throughout), a KeyboardInterrupt
    at each line of the library's code and each return of any function (the standard
    library's included) below the round's wait for connects, in turn; after each, another
    thread's call must get through."""
    import collections
    import sys
    from types import FrameType

    from support.interrupts import signal_cannot_land

    from redlock_deco import _fanout
    from redlock_deco import _providers as providers

    register_provider("connecting", [s.url for s in masters])
    quorum = providers.sync_target("connecting")
    assert isinstance(quorum, _fanout.QuorumSyncTarget)
    quorum.node_timeout = 0.02  # (each round waits that long for the paused master)
    waiting = _fanout._connect.__code__
    # (the sends and reads the round makes meanwhile have their own test, above)
    elsewhere = {code.__code__ for code in (_fanout._Call.send, _fanout._Call.read)}

    def below_the_wait(frame: FrameType | None) -> bool:
        while frame is not None:
            if frame.f_code is waiting:
                return True
            if frame.f_code in elsewhere:
                return False
            frame = frame.f_back
        return False

    Point = tuple[object, str, int, int]  # code, event, line, which occurrence (1 or 2)

    def run(fire_at: Point | None, name: str) -> list[Point]:
        """A call, interrupted at ``fire_at``; the points it passed (each of the first two
        times: the round's wait runs the same lines again and again)."""
        seen: collections.Counter[tuple[object, str, int]] = collections.Counter()
        points: list[Point] = []
        active = True  # (a generator left suspended keeps its frame's tracer: closed later)

        def tracer(frame: FrameType, event: str, arg: Any) -> Any:
            nonlocal active
            if not active:
                return None
            if event == "call":
                return tracer if below_the_wait(frame) else None
            if event == "line":
                if not frame.f_globals.get("__name__", "").startswith("redlock_deco"):
                    return tracer
                if signal_cannot_land(frame.f_code, frame.f_lineno, frame.f_lasti):
                    return tracer
            elif event != "return":
                return tracer
            where = (frame.f_code, event, frame.f_lineno)
            seen[where] += 1
            if seen[where] > 2:
                return tracer
            points.append((*where, seen[where]))
            if points[-1] == fire_at:
                active = False
                raise KeyboardInterrupt
            return tracer

        sys.settrace(tracer)
        try:
            with Lock(name, provider="connecting", ttl=2, wait=1):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
            active = False
        return points

    def another(name: str) -> bool:
        entered: list[bool] = []

        def call() -> None:
            with Lock(name, provider="connecting", ttl=2, wait=1):
                entered.append(True)

        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(3)  # (a call waits 0.02 s per round; a wedged one, for ever)
        return bool(entered)

    masters[0].pause()
    try:
        points = run(None, "counting")
        assert len(points) > 10, len(points)  # the round did wait for the paused master's connect
        for n, point in enumerate(points):
            run(point, f"cut-{n}")
            assert another(f"after-{n}"), f"wedged by an interrupt at {point}"
    finally:
        masters[0].resume()


@pytest.mark.timeout(60)
def test_quorum_waiters_are_refused_at_once_at_their_loops_shutdown(
    masters: list[RedisServer],
) -> None:
    """Review 103b, F1: a quorum target stopped by its loop's shutdown still ran its waiters'
    rounds and sleeps: each polled on until its ``wait`` ran out (``LockNotAcquired``, not
    the single server's ``ProviderError``), and one in an async generator's clean-up kept
    ``asyncio.run`` from ending as long -- for good with ``wait=None``. Refused at once
    now, by ``aclose()`` by hand and at ``asyncio.run``'s end (its 5 s for the clean-ups)."""
    import asyncio

    from redlock_deco import asyncio as aio

    holder = Lock("q-shut", provider="q", ttl=30)
    assert holder.acquire(blocking=False)
    outcomes: list[str] = []

    async def waiter() -> None:
        try:
            async with aio.Lock("q-shut", provider="q", ttl=3, wait=30):
                outcomes.append("got it")
        except redlock_deco.ProviderError:
            outcomes.append("refused")

    async def by_hand() -> float:
        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.3)  # (queued, polling)
        began = time.monotonic()
        await redlock_deco.aclose()
        await task
        return time.monotonic() - began

    kept: list[Any] = []

    async def cleaning_up() -> Any:
        try:
            yield 1
        finally:
            await waiter()

    async def at_the_end() -> None:
        async with aio.Lock("q-warm", provider="q", ttl=3):
            pass  # (the loop has used the library: its shutdown's wait runs)
        agen = cleaning_up()
        kept.append(agen)  # (closed by asyncio.run's shutdown)
        await agen.__anext__()

    try:
        loop = asyncio.new_event_loop()
        try:
            took = loop.run_until_complete(by_hand())
        finally:
            loop.close()
        assert outcomes == ["refused"] and took < 1.5, (outcomes, took)
        began = time.monotonic()
        asyncio.run(at_the_end())
        kept.clear()
        took = time.monotonic() - began
        assert outcomes == ["refused", "refused"] and took < 8, (outcomes, took)
    finally:
        holder.release()
    assert on_masters(masters, "lock:q-shut") == [False, False, False]


def test_a_stalled_masters_owed_commands_end_with_their_loop_quietly(
    masters: list[RedisServer],
) -> None:
    """Review 103b, F2: what a stalled master still owed once the loop's shutdown had
    waited its 5 s was left pending as the loop closed: "Task was destroyed but it is
    pending", and its connections unclosed. They are cancelled, their connections closed;
    what the master had received runs when it comes back, its lease expiring within ttl."""
    import subprocess
    import sys
    import textwrap

    urls = [server.url for server in masters]
    script = textwrap.dedent(
        f"""
        import asyncio, gc, os, signal, time
        import redlock_deco, redlock_deco.asyncio
        redlock_deco.register_provider("q", {urls!r})

        async def steps():
            try:
                yield 1
            finally:  # (at the loop's shutdown: the stalled master owes these to the end)
                async with redlock_deco.asyncio.Lock("q-owed", provider="q", ttl=3):
                    pass

        kept = []

        async def main():
            async with redlock_deco.asyncio.Lock("q-warm", provider="q", ttl=3):
                pass  # (connected to every master)
            os.kill({masters[2].pid}, signal.SIGSTOP)  # (the test resumes it)
            kept.append(steps())
            await kept[0].__anext__()

        began = time.monotonic()
        asyncio.run(main())
        kept.clear()
        gc.collect()
        print("ended", round(time.monotonic() - began, 1))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-W", "default", "-c", script],
            capture_output=True, text=True, timeout=40,
        )  # fmt: skip
    finally:
        masters[2].resume()
    assert done.returncode == 0, done.stderr
    noise = [line for line in done.stderr.splitlines()
             if "destroyed" in line or "unclosed" in line or "Warning" in line]  # fmt: skip
    assert not noise, done.stderr
    assert wait_until(lambda: not any(on_masters(masters, "lock:q-owed")), 5)
    assert wait_until(lambda: not any(on_masters(masters, "lock:q-warm")), 5)
