"""Waiting without polling: prompt hand-off on release, wake-up on a crashed holder's expiry,
no lost wake-ups, no keys left behind, few commands per contended critical section."""

from __future__ import annotations

import contextlib
import threading
import time
from functools import partial
from typing import Any

import pytest
import redis
from support.elsewhere import AtLine
from support.subscriptions import checked_out, every_cut

import redlock_deco
from redlock_deco import Lock, locked
from redlock_deco.testing import RedisServer


def wait_for_empty(r: redis.Redis, seconds: float = 5.0) -> int:
    deadline = time.monotonic() + seconds
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.01)
    return int(r.dbsize())


def test_prompt_hand_off_to_a_waiting_thread(r: redis.Redis) -> None:
    latencies = []
    for _ in range(20):
        holder = Lock("h", ttl=10)
        holder.acquire()
        got: list[float] = []
        waiting = threading.Event()

        def waiter(waiting: threading.Event = waiting, got: list[float] = got) -> None:
            waiting.set()
            with Lock("h", ttl=10, wait=5):
                got.append(time.perf_counter())

        t = threading.Thread(target=waiter)
        t.start()
        waiting.wait(5)
        while not r.exists("{lock:h}:queue"):  # the waiter has registered and blocks
            time.sleep(0.001)
        released = time.perf_counter()
        holder.release()
        t.join(5)
        latencies.append(got[0] - released)
    latencies.sort()
    # A polling waiter (redis-py's Lock sleeps 100 ms) would show tens of ms here.
    assert latencies[len(latencies) // 2] < 0.02, latencies
    assert wait_for_empty(r) == 0


def test_waiter_that_gives_up_leaves_no_registration(r: redis.Redis) -> None:
    with Lock("gu", ttl=5):
        t = threading.Thread(target=lambda: Lock("gu", wait=0.1).acquire())
        t.start()
        t.join(5)
        assert not r.exists("{lock:gu}:queue")
    assert r.dbsize() == 0


def test_many_waiters_all_get_through_and_leave_nothing(r: redis.Redis) -> None:
    order: list[int] = []

    @locked("crowd", ttl=5, wait=20)
    def work(i: int) -> None:
        order.append(i)
        time.sleep(0.002)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(order) == list(range(24))
    assert wait_for_empty(r) == 0


def test_commands_per_contended_critical_section(r: redis.Redis, server: RedisServer) -> None:
    """A waiter costs: one queued attempt and its release = 2 commands -- it wakes up holding
    the lock, with no attempt of its own; the holder: its release. (The process's one grant
    subscription is opened by its first waiter, not counted here.)"""

    def contended(spy: redis.Redis | None = None) -> None:
        holder = Lock("cmd", ttl=10)
        holder.acquire()
        if spy is not None:
            spy.config_resetstat()
        waiter = Lock("cmd", wait=5)
        t = threading.Thread(target=lambda: waiter.acquire() and waiter.release())
        t.start()
        while not r.exists("{lock:cmd}:queue"):
            time.sleep(0.001)
        time.sleep(0.05)
        holder.release()
        t.join(5)

    contended()  # the first waiter subscribes this process to its grants
    spy = server.client()
    contended(spy)
    stats = spy.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
    # commandstats also counts what scripts call inside; the client-issued commands are these.
    # Waiter: EVALSHA (queued) + EVALSHA (release); holder: EVALSHA (release, hand-off).
    sent = {name: calls.get(name, 0) for name in ("evalsha", "eval", "subscribe")}
    assert sent == {"evalsha": 3, "eval": 0, "subscribe": 0}, calls
    assert calls.get("publish") == 1  # the one grant, inside the holder's release
    assert wait_for_empty(r) == 0


@pytest.mark.slow
def test_no_lost_wake_up_when_release_races_the_wait(r: redis.Redis) -> None:
    """Hammer acquire/release from several threads with a tiny critical section: a lost
    grant would leave a waiter waiting until its re-check (RECHECK, 1 s) and blow the bound."""

    @locked("race", ttl=5, wait=10)
    def tiny() -> None:
        pass

    def loop() -> None:
        for _ in range(150):
            tiny()

    started = time.monotonic()
    threads = [threading.Thread(target=loop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - started
    assert elapsed < 10, elapsed
    assert wait_for_empty(r) == 0


def test_two_threads_forgetting_one_waiter_at_once_both_finish() -> None:
    """Review 86b, F1 (LOW): the subscribers of a process clear an abandoned event loop's
    board each from its own thread, and ``Board.forget`` read the entry, then deleted it: the
    second thread's delete after the first's raised a KeyError out of an unrelated waiter's
    wait. Here the second forget runs whole at each line of the first (a thread switch
    there: nothing in it takes a lock), and both finish, the token forgotten exactly once."""
    from redlock_deco import _waiting as waiting

    def forget_interleaved(at: int) -> int:
        board = waiting.Board(counted=True)
        token, waiter = f"interleaved-{at}", object()
        board.add(token, waiter)
        waiting.registry.add(token)  # (a second registration: one forget must leave it)
        other = partial(board.forget, token, waiter, cut_short=False)  # "another thread"
        with AtLine({waiting.Board.forget.__code__}, at, other) as switched:
            board.forget(token, waiter, cut_short=False)
        assert token not in board.waiting
        left = waiting.registry.waiting.get(token)
        waiting.registry.remove(token, cut_short=False)
        assert left == 1, f"switched at line {at}: forgotten twice, or not at all"
        return switched.lines

    lines = forget_interleaved(0)  # (no switch: how many lines it runs)
    assert lines >= 2
    for at in range(1, lines + 1):
        forget_interleaved(at)


@pytest.mark.timeout(30)
def test_a_wait_that_ran_out_starts_no_subscriber(server: RedisServer) -> None:
    """A replicated attempt's WAIT can take the whole ``wait`` (no replica acknowledges): the
    waiter then had no time left, and still started the loop's grant subscriber, which
    outlived the call on the application's client -- a cluster client the application
    closed next was opened again under it by its resubscribe, and a node connection stayed
    open past the loop (CI, test_cluster_replicas_are_counted_on_the_keys_node_connection;
    root cause from a helper's investigation)."""
    import asyncio

    import redlock_deco.asyncio as aio
    from redlock_deco import LockNotAcquired

    async def scenario() -> list[str]:
        # (free, but no replica to acknowledge: the WAIT takes the whole wait, and the lock
        # is given back)
        with pytest.raises(LockNotAcquired):  # (LockNotReplicated)
            await aio.Lock("ran-out", ttl=5, replicas=1, wait=0.2).acquire()
        return [
            task.get_name()
            for task in asyncio.all_tasks()
            if task.get_name() == "redlock-deco-waiting"
        ]

    assert asyncio.run(scenario()) == [], "a subscriber was started for a wait that had ended"


@pytest.mark.timeout(120)
def test_a_grant_subscription_cut_as_it_closes_never_closes_a_connection_in_use(
    server: RedisServer,
) -> None:
    """A KeyboardInterrupt at each line of a grant subscription's close, the exception kept
    (a traceback keeps the frames it passed through): redis-py's ``PubSub.reset`` releases
    its connection and then forgets it, and cut in between, its finaliser -- ``reset()``
    again, once the exception went -- closed the connection another user had checked out
    since, and listed it as free while in use (CI, the threaded reply search: another
    thread's connect read from a closed buffer). The other user's connection stays open
    and its own."""
    every_cut(lambda: redis.Redis.from_url(server.url))


@pytest.mark.timeout(60)
def test_an_interrupted_readers_new_subscription_takes_no_connection_from_a_full_pool(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Review 94b, F1 (MEDIUM): the thread reading grants is interrupted while another
    thread waits, and subscribes afresh before its old subscription goes (so that no grant
    is announced to nobody): on a bounded pool that raises when full, that second
    subscription took a connection the lanes had left to commands -- other threads'
    releases failed with "Too many connections", their locks held on. Here the pool has one
    connection left (beside the old subscription, this test holds the others) as the reader
    is interrupted: its new subscription takes a pool of its own, and a command as it is
    confirmed finds the one left."""
    import inspect
    import logging
    import sys

    from redlock_deco import _waiting as waiting

    pool = redis.ConnectionPool.from_url(server.url, max_connections=3)
    client = redis.Redis(connection_pool=pool)
    code = waiting.SyncWaiting._read_on.__code__
    lines, first = inspect.getsourcelines(code)
    reading = first + next(n for n, text in enumerate(lines) if "_pubsub.get_message(" in text)
    now, held, go, interrupted, served = (threading.Event() for _ in range(5))
    failed: list[BaseException] = []

    def interrupt(frame: Any, event: str, arg: object) -> Any:
        if (
            event == "line"
            and frame.f_lineno == reading
            and now.is_set()
            and not interrupted.is_set()
        ):
            interrupted.set()
            raise KeyboardInterrupt
        return interrupt

    def another_command() -> None:
        """Another thread's command, as the new subscription is confirmed and the old one
        not closed yet (the window): it finds the connection left for it."""
        try:
            pool.release(checked_out(pool))
        except redis.ConnectionError as exc:
            failed.append(exc)

    def after(frame: Any, event: str, arg: object) -> Any:
        if event == "return":
            another_command()
        return after

    def tracer(frame: Any, event: str, arg: object) -> Any:
        if frame.f_code is waiting.SyncWaiting._subscribe_for_others.__code__:
            return after
        return interrupt if frame.f_code is code else None

    def holder() -> None:
        with Lock("full", ttl=5):
            held.set()
            go.wait(10)

    def reader() -> None:  # (waits first: it reads the grants)
        sys.settrace(tracer)
        try:
            with Lock("full", ttl=5, wait=10):
                pass
        except KeyboardInterrupt:
            pass
        except Exception as exc:  # ("Too many connections": the finding)
            failed.append(exc)
        finally:
            sys.settrace(None)

    def other() -> None:
        with Lock("full", ttl=5, wait=10):
            served.set()

    def other_waits_inside() -> bool:
        return any(
            sum(handoff.inside for handoff in found._board.waiting.values()) == 2
            for found in waiting._every_subscriber()
            if isinstance(found, waiting.SyncWaiting)
        )

    redlock_deco.register_provider("default", client)
    threads = [threading.Thread(target=fn) for fn in (holder, reader, other)]
    taken: list[Any] = []
    try:
        threads[0].start()
        assert held.wait(5)
        threads[1].start()
        time.sleep(0.2)
        threads[2].start()
        deadline = time.monotonic() + 5
        while not other_waits_inside():
            assert time.monotonic() < deadline, "the other thread never waited"
            time.sleep(0.01)
        with contextlib.suppress(redis.ConnectionError):  # (MaxConnectionsError: full)
            while True:
                taken.append(checked_out(pool))
        pool.release(taken.pop())  # one left: for commands, not a subscription
        caplog.set_level(logging.DEBUG, logger="redlock_deco")
        now.set()
        with server.client() as admin:  # (a message for nobody: the reader's read returns)
            admin.publish(waiting.channel(), "nobody")
        threads[1].join(10)
        assert interrupted.is_set() and not failed, failed
        assert "subscription failed" not in caplog.text, caplog.text
        for connection in taken:
            pool.release(connection)
        taken.clear()
        go.set()
        assert served.wait(10)
    finally:
        for connection in taken:
            pool.release(connection)
        go.set()
        for thread in threads:
            thread.join(10)
        redlock_deco.register_provider("default", server.url)
        client.close()


def test_an_asyncio_subscriber_closing_as_a_waiter_comes_keeps_one_subscription(
    server: RedisServer, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio subscriber ends after IDLE seconds without a waiter, closing its
    subscription. A waiter that came while it closed started a second subscriber beside the
    closing one (review 94b's note): a second connection of the pool, whose budget spares
    one, and on a bounded pool that raises when full, another task's command failed. The
    closing subscriber now finds the waiter and subscribes again itself; the waiter is
    handed the lock as promptly as ever."""
    import asyncio

    import redlock_deco.asyncio as aio
    from redlock_deco import _waiting as waiting

    monkeypatch.setattr(waiting, "IDLE", 0.2)
    monkeypatch.setattr(waiting, "READ_TIMEOUT", 0.05)
    closing = threading.Event()
    go_on = threading.Event()
    closed = waiting._aclosed

    async def held_up(pubsub: Any) -> None:
        if pubsub is not None and not go_on.is_set():
            closing.set()
            while not go_on.is_set():
                await asyncio.sleep(0.01)
        await closed(pubsub)

    monkeypatch.setattr(waiting, "_aclosed", held_up)

    def subscriptions() -> int:
        return len(r.client_list(_type="pubsub"))

    async def handed_over(name: str, after: Any = None) -> float:
        """A holder, and a waiter handed the lock; how long the waiter waited after the
        holder let go. ``after``: run once the waiter waits."""
        holder, waiter = aio.Lock(name, ttl=5), aio.Lock(name, ttl=5, wait=5)
        await holder.acquire()
        task = asyncio.ensure_future(waiter.acquire())
        await asyncio.sleep(0.2)  # (the waiter waits)
        if after is not None:
            await after()
        let_go = time.monotonic()
        await holder.release()
        assert await task
        waited = time.monotonic() - let_go
        await waiter.release()
        return waited

    async def while_it_closes() -> None:
        await asyncio.get_running_loop().run_in_executor(None, closing.wait, 5)
        assert closing.is_set(), "the subscriber never went idle"

    async def count_and_let_it_close() -> None:
        await asyncio.sleep(0.3)  # (a second subscriber would have subscribed by now)
        seen.append(subscriptions())
        go_on.set()

    seen: list[int] = []

    async def scenario() -> float:
        await handed_over("first")
        await while_it_closes()
        return await handed_over("second", count_and_let_it_close)

    waited = asyncio.run(scenario())
    assert seen == [1], f"subscriptions open while the idle one closed: {seen}"
    assert waited < 0.5, f"the waiter that came as it closed waited {waited:.2f} s"
