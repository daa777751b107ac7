"""Auto-renewal: one renewer thread per process, leases kept past their ttl, losses
detected, transient server trouble survived, nothing renewed that is not ours."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from redlock_deco import Lock, LockLost, LockNotOwned, locked, register_provider
from redlock_deco._renewal import renewer
from redlock_deco.testing import RedisServer


def renewer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "redlock-deco-renewer"}


def test_without_auto_renew_the_lease_ends_and_the_call_learns_it() -> None:
    @locked("short", ttl=0.2, auto_renew=False)
    def slow() -> None:
        time.sleep(0.4)

    with pytest.raises(LockLost):
        slow()


def test_one_renewer_thread_for_many_leases(r: redis.Redis) -> None:
    # (other tests' own Renewer instances may still have a thread, ending once idle)
    before = renewer_threads()
    locks = [Lock(f"many:{i}", ttl=0.3) for i in range(25)]
    for lock in locks:
        lock.acquire()
    time.sleep(0.8)
    assert renewer_threads() - before <= {renewer()._thread}
    assert renewer()._thread in renewer_threads()
    assert len(renewer()) == 25
    assert all(r.pttl(f"lock:many:{i}") > 0 for i in range(25))
    for lock in locks:
        lock.release()
    assert len(renewer()) == 0 and r.dbsize() == 0


def test_renewal_never_extends_a_lease_taken_over_by_another(r: redis.Redis) -> None:
    @locked("takeover", ttl=0.3)
    def victim() -> None:
        r.set("lock:takeover", "other-owner", px=250)  # the lease changed hands
        time.sleep(0.5)

    with pytest.raises(LockLost):
        victim()
    assert r.get("lock:takeover") is None  # expired on its own: we never extended it


def test_renewal_survives_a_short_server_pause(server: RedisServer) -> None:
    register_provider("default", server.client(socket_timeout=0.2))

    @locked("pause", ttl=1.5)
    def through_pause() -> str:
        time.sleep(0.5)  # a renewal is due at 0.5 s: it meets the paused server
        server.pause()
        try:
            time.sleep(0.5)
        finally:
            server.resume()
        time.sleep(0.6)
        return "ok"

    assert through_pause() == "ok"


@pytest.mark.slow
def test_server_paused_past_the_ttl_means_lock_lost(server: RedisServer) -> None:
    register_provider("default", server.client(socket_timeout=0.2))

    @locked("pause2", ttl=0.6)
    def through_long_pause() -> None:
        server.pause()
        try:
            time.sleep(1.0)
        finally:
            server.resume()
        time.sleep(0.1)

    with pytest.raises(LockLost):
        through_long_pause()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_extension_is_not_undone_by_a_renewal_that_waited_for_it(
    server: RedisServer, r: redis.Redis, flavour: str
) -> None:
    """Review 27, 01: ``extend(by=5)`` on a stalled server while the lease's renewal fell
    due; the round waited for the extend, then renewed to the usual ttl: 0.5 s left on the
    server, and the holder believed it too. A round that finds its lease renewed meanwhile
    sends nothing."""
    import asyncio

    import redlock_deco.asyncio

    def stall() -> threading.Timer:
        server.pause()
        resumed = threading.Timer(0.25, server.resume)
        resumed.start()
        return resumed

    if flavour == "sync":
        lock = Lock("extended", ttl=0.6)
        assert lock.acquire()
        time.sleep(0.05)  # its renewal is due at 0.2 s, inside the stall
        resumed = stall()
        lock.extend(by=5)
        time.sleep(0.1)
        left = r.pttl("lock:extended")
        resumed.join()
        lock.release()
    else:

        async def scenario() -> int:
            lock = redlock_deco.asyncio.Lock("extended", ttl=0.6)
            assert await lock.acquire()
            await asyncio.sleep(0.05)
            resumed = stall()
            await lock.extend(by=5)
            await asyncio.sleep(0.1)
            left: int = r.pttl("lock:extended")
            resumed.join()
            await lock.release()
            return left

        left = asyncio.run(scenario())
    assert left > 4000, left


def test_a_lease_whose_renewal_rounds_are_all_cancelled_is_reported_lost(
    r: redis.Redis,
) -> None:
    """Review 27, 02: a task inside its block that cancels every other task at each turn of
    the loop cancelled every renewal round before its first step: the lease was never
    renewed and never reported lost, and another client got in while the body ran. It is
    reported lost when it runs out (on_lost, then LockLost at the exit), before anyone can
    get in."""
    import asyncio

    import redlock_deco.asyncio

    lost: list[float] = []
    got_in: list[float] = []
    stop = threading.Event()

    def contend() -> None:
        other = Lock("every-turn", ttl=5)
        while not stop.is_set():
            if other.acquire(blocking=False):
                got_in.append(time.monotonic())
                other.release()
            time.sleep(0.02)

    async def scenario() -> None:
        me = asyncio.current_task()
        lock = redlock_deco.asyncio.Lock(
            "every-turn", ttl=0.5, on_lost=lambda _: lost.append(time.monotonic())
        )

        async def cancel_every_other_task_each_turn() -> None:
            async with lock:
                contender.start()
                until = time.monotonic() + 1.2
                while time.monotonic() < until:
                    for task in asyncio.all_tasks():
                        if task is not me:
                            task.cancel()
                    await asyncio.sleep(0)

        with pytest.raises(LockLost):
            await cancel_every_other_task_each_turn()

    contender = threading.Thread(target=contend)
    try:
        asyncio.run(scenario())
    finally:
        stop.set()
        contender.join(5)
    assert lost, "never reported lost"
    # Reported as the lease ran out by the holder's clock: before anyone could get in, when
    # the reporting thread runs on time. A starved machine wakes it late (the README's
    # command beside two busy loops: 1 and 37 ms after the other got in, 2 runs of 12), as
    # it would any lease-based lock's holder: not later than that, and long before the
    # body's end (the exit's LockLost alone was the bug).
    assert not got_in or lost[0] <= got_in[0] + 0.25, (lost, got_in)


def _renewal_threads_refused(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Renewal threads refused to start (a limit on threads: RuntimeError) until the
    returned function is called."""
    from redlock_deco import _worker

    plain = _worker.start
    allowed = threading.Event()

    def refused(thread: threading.Thread) -> bool:
        if thread.name == "redlock-deco-renewal" and not allowed.is_set():
            raise RuntimeError("can't start new thread")
        return plain(thread)

    monkeypatch.setattr(_worker, "start", refused)
    return allowed.set


def test_renewals_go_on_once_a_renewal_thread_can_start_again(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review 62, F1 (a lease lost, no signal): a renewal worker whose thread could not start
    ended the renewer for good, the rest of its batch marked as renewing: no lease of the
    process was renewed again, none was reported lost, and another caller took them. The
    rounds wait for a thread, and run as soon as one starts."""
    register_provider("no-threads", server.url)  # (a target of its own: no worker yet)
    lost: list[str] = []
    allow = _renewal_threads_refused(monkeypatch)
    locks = [
        Lock(f"starved:{n}", provider="no-threads", ttl=1.5, on_lost=lost.append) for n in range(3)
    ]
    try:
        for lock in locks:
            assert lock.acquire()
        time.sleep(0.8)  # past the first renewal (0.5 s), which found no thread
        allow()
        time.sleep(2.5)  # past the ttl
        assert lost == []
        assert all(lock.owned() for lock in locks)
        assert not Lock("starved:0", provider="no-threads", wait=0).acquire()
    finally:
        for lock in locks:
            lock.release()


def test_without_renewal_threads_a_lease_is_reported_lost_before_another_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review 63, F2 (a second holder before on_lost): with no renewal thread able to start,
    the renewer ran each round on its own thread, and a stalled server's round (the socket
    timeout) held it up: a lease on a healthy server expired unrenewed, another caller took
    it, and on_lost came a second later. The renewer never runs a round itself: a lease
    whose round found no thread is reported lost as it runs out."""
    with RedisServer() as stalled, RedisServer() as healthy:
        register_provider("stalled", redis.Redis.from_url(stalled.url, socket_timeout=2))
        register_provider("healthy", healthy.url)
        allow = _renewal_threads_refused(monkeypatch)
        events: list[tuple[str, float]] = []
        stalled_locks = [Lock(f"stalled:{n}", provider="stalled", ttl=0.3) for n in range(3)]
        for lock in stalled_locks:
            assert lock.acquire()
        stalled.pause()
        try:
            began = time.monotonic()
            held = Lock(
                "healthy", provider="healthy", ttl=1.0,
                on_lost=lambda lease: events.append(("on_lost", time.monotonic() - began)),
            )  # fmt: skip
            assert held.acquire()
            contender = Lock("healthy", provider="healthy", ttl=5, wait=0)
            while time.monotonic() - began < 3:
                if not contender.owned() and contender.acquire():
                    events.append(("got in", time.monotonic() - began))
                time.sleep(0.01)
        finally:
            stalled.resume()
            allow()
        # (told as its lease ran out by its own clock, a little before the server's: the
        # renewer's wake-up may still come a moment late on a busy machine)
        times = dict(events)
        assert "on_lost" in times and "got in" in times, events
        assert times["on_lost"] < times["got in"] + 0.2, events
        for lost_lock in (held, *stalled_locks):  # (each was told, not renewed since)
            with pytest.raises(LockNotOwned):
                lost_lock.release()
        contender.release()


def test_a_slow_on_lost_of_a_stalled_servers_lease_holds_up_no_other_servers_renewals() -> None:
    """Review 64, F3 (a second holder before on_lost): the renewer ran the on_lost of a lease
    whose round never came back on its own thread; three of 0.6 s (an alert over HTTP) on a
    paused server's leases held up every provider's renewals, and a lease on a healthy
    server expired unrenewed and was taken before its holder heard."""
    with RedisServer() as stalled, RedisServer() as healthy:
        register_provider("stalled", redis.Redis.from_url(stalled.url, socket_timeout=2))
        register_provider("healthy", healthy.url)
        alerted: list[str] = []

        def slow_alert(lease: object) -> None:
            time.sleep(0.6)
            alerted.append("stalled")

        stalled_locks = [
            Lock(f"stalled:{n}", provider="stalled", ttl=1.0, on_lost=slow_alert) for n in range(3)
        ]
        for lock in stalled_locks:
            assert lock.acquire()
        held = Lock("healthy", provider="healthy", ttl=1.5, on_lost=alerted.append)
        assert held.acquire()
        stalled.pause()
        try:
            began = time.monotonic()
            contender = Lock("healthy", provider="healthy", wait=0)
            while time.monotonic() - began < 3.2:
                assert not contender.acquire(), alerted
                time.sleep(0.02)
        finally:
            stalled.resume()
        assert held.owned() and held not in alerted
        held.release()
        assert alerted.count("stalled") == 3


def test_a_slow_on_lost_holds_up_no_other_leases_loss_signal() -> None:
    """Review 65, F2 (a second holder before on_lost): overdue leases' on_lost ran one after
    another on one thread, so a lease's signal waited behind every slow callback of others
    before it (three of 0.6 s: told at 2.8 s of a lease that ran out at 1.2 s, after another
    caller had taken it). A slow callback gets the next one a thread of its own."""
    with RedisServer() as stalled:
        register_provider("stalled", redis.Redis.from_url(stalled.url, socket_timeout=3))
        told: dict[str, float] = {}

        def slow_alert(lease: object) -> None:
            time.sleep(0.6)

        slow = [
            Lock(f"slow:{n}", provider="stalled", ttl=1.0, on_lost=slow_alert) for n in range(3)
        ]
        for lock in slow:
            assert lock.acquire()
        began = time.monotonic()
        quick = Lock(
            "quick", provider="stalled", ttl=1.2,
            on_lost=lambda lease: told.setdefault("quick", time.monotonic() - began),
        )  # fmt: skip
        assert quick.acquire()
        stalled.pause()
        try:
            deadline = time.monotonic() + 3
            while "quick" not in told and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            stalled.resume()
        assert told.get("quick", math.inf) < 1.2 + 0.4, told


def test_the_renewer_goes_on_after_an_exception_of_its_own(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Review 66, F2 (a lease lost, no signal): an exception out of the renewer's own loop
    (a bug, a MemoryError) ended its thread, and no lease of the process was renewed or
    reported lost until the next acquire started one again. It is logged, and it goes on."""
    from redlock_deco import _renewal

    plain = _renewal.due
    failed: list[bool] = []

    def failing(jobs: Any, now: float) -> Any:
        jobs = list(jobs)
        if jobs and not failed:
            failed.append(True)
            raise RuntimeError("a bug in the renewer")
        return plain(jobs, now)

    monkeypatch.setattr(_renewal, "due", failing)
    lost: list[object] = []
    lock = Lock("goes-on", ttl=0.5, on_lost=lost.append)
    assert lock.acquire()
    try:
        time.sleep(1.5)  # three ttls
        assert failed and lost == [] and lock.owned()
        assert r.pttl("lock:goes-on") > 0
        assert "the lease renewer failed" in caplog.text
    finally:
        lock.release()
