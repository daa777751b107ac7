"""asyncio-only behaviour: cancellation and timeouts, ownership per task, clients per loop,
a renewer task per loop, many tasks on one loop, and parity of the sync and async APIs."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio

import redlock_deco
import redlock_deco._process
from redlock_deco import LockNotAcquired, ProviderError, limited, locked, register_provider
from redlock_deco.asyncio import Lock, Semaphore
from redlock_deco.testing import RedisServer


async def wait_empty(r: redis.Redis, seconds: float = 5.0) -> int:
    deadline = time.monotonic() + seconds
    while r.dbsize() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return int(r.dbsize())


async def cancelled(waiter: asyncio.Task[Any]) -> None:
    """Cancel ``waiter`` and see it raise CancelledError. On Python 3.10 redis-py can drop a
    cancel that lands in its connection checkout (docs/asyncio.md: its ``async_timeout(0)``
    probe; 1 CI run in ~30), and the docs tell users to cancel again: so does this, there
    only. On 3.11+ one cancel must do (Task.cancelling() notices a dropped one)."""
    waiter.cancel()
    while sys.version_info < (3, 11) and not (await asyncio.wait((waiter,), timeout=0.5))[0]:
        waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


def test_cancelled_while_waiting_leaves_nothing_held(r: redis.Redis) -> None:
    async def scenario() -> None:
        async with Lock("c", ttl=10):
            waiter = asyncio.create_task(Lock("c", wait=30).acquire())
            while not r.exists("{lock:c}:queue"):
                await asyncio.sleep(0.001)
            await cancelled(waiter)
            await asyncio.sleep(0.05)  # the shielded clean-up runs to its end
            assert not r.exists("{lock:c}:queue")
        assert await wait_empty(r) == 0

    asyncio.run(scenario())


def test_cancelled_while_holding_releases_before_the_error_propagates(r: redis.Redis) -> None:
    entered = asyncio.Event

    @locked("hold", ttl=10)
    async def long_job(started: asyncio.Event) -> None:
        started.set()
        await asyncio.sleep(30)

    async def scenario() -> None:
        started = entered()
        task = asyncio.create_task(long_job(started))
        await started.wait()
        assert r.exists("lock:hold")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not r.exists("lock:hold")  # released before the cancellation reached us

    asyncio.run(scenario())


def test_timeouts_behave_like_cancellation(r: redis.Redis) -> None:
    @limited("slow", limit=1, ttl=10)
    async def slow() -> None:
        await asyncio.sleep(30)

    async def scenario() -> None:
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await asyncio.wait_for(slow(), 0.2)
        assert r.dbsize() == 0
        if sys.version_info >= (3, 11):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await slow()
            assert r.dbsize() == 0
        async with Semaphore("slow", limit=1, ttl=10):
            with pytest.raises((asyncio.TimeoutError, TimeoutError)):
                await asyncio.wait_for(Semaphore("slow", limit=1, wait=30).acquire(), 0.2)
        assert await wait_empty(r) == 0

    asyncio.run(scenario())


def test_child_tasks_do_not_inherit_their_parents_lock() -> None:
    @locked("parent", wait=0)
    async def child() -> str:
        return "entered"

    @locked("parent", wait=0)
    async def parent() -> Any:
        nested = await child()  # same task: re-entrant
        spawned = asyncio.create_task(child())  # another task: must not re-enter
        with pytest.raises(LockNotAcquired):
            await spawned
        return nested

    assert asyncio.run(parent()) == "entered"


def test_sync_client_for_async_code_says_which_kind_is_needed(server: RedisServer) -> None:
    register_provider("sync-only", server.client())

    async def scenario() -> None:
        with pytest.raises(ProviderError, match=r"sync client.*async code needs an asyncio"):
            await Lock("x", provider="sync-only").acquire()

    asyncio.run(scenario())


def test_async_client_instances_and_factories(server: RedisServer) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        register_provider("inst", client)
        register_provider("fact", lambda: redis.asyncio.Redis.from_url(server.url))
        async with Lock("i", provider="inst") as lock:
            assert await lock.owned()
        async with Lock("f", provider="fact") as lock:
            assert await lock.owned()
            factory_client = redlock_deco._providers.async_target("fact").client
        await client.aclose()
        await factory_client.aclose()

    asyncio.run(scenario())


def test_url_clients_belong_to_their_loop(server: RedisServer) -> None:
    seen = []

    async def scenario() -> None:
        async with Lock("loop"):
            seen.append(redlock_deco._providers.async_target("default").client)

    asyncio.run(scenario())
    asyncio.run(scenario())
    assert seen[0] is not seen[1]
    results: list[BaseException | None] = []

    def in_thread() -> None:  # a loop in another thread gets its own client as well
        try:
            asyncio.run(scenario())
            results.append(None)
        except BaseException as exc:
            results.append(exc)

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(10)
    assert results == [None] and len({id(c) for c in seen}) == 3


def test_renewal_runs_on_the_loop_and_stops_with_its_owner(r: redis.Redis) -> None:
    """The loop's renewer is a timer on the loop (no thread, and no long-lived task that a
    sweep cancelling every task would cancel: review 26), and a lease whose owner ended is
    not renewed."""
    threads_before = threading.active_count()

    async def scenario() -> None:
        kept: list[Lock] = []

        async def holder() -> None:
            lock = Lock("orphan", ttl=0.3)
            await lock.__aenter__()  # a block the task never leaves: it ends inside it
            kept.append(lock)  # (the object lives on: only the task's end can stop renewal)

        await asyncio.create_task(holder())
        state = redlock_deco._process.known_loop_state()
        assert state is not None and len(state.renewer) == 1  # the lease is the loop's
        assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert threading.active_count() == threads_before  # no renewer thread
        await asyncio.sleep(0.6)
        assert not r.exists("lock:orphan")  # its owner is gone: not renewed, expired

    asyncio.run(scenario())


def test_fifty_tasks_on_one_loop_share_one_key(r: redis.Redis) -> None:
    inside, peak, done = 0, 0, 0

    @locked("crowd", ttl=5, wait=30)
    async def critical() -> None:
        nonlocal inside, peak, done
        inside += 1
        peak = max(peak, inside)
        await asyncio.sleep(0.001)
        inside -= 1
        done += 1

    async def scenario() -> None:
        await asyncio.gather(*(critical() for _ in range(50)))
        assert await wait_empty(r) == 0

    started = time.monotonic()
    asyncio.run(scenario())
    assert (peak, done) == (1, 50)
    assert time.monotonic() - started < 10
