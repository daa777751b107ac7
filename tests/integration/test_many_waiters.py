"""Hundreds of waiters on one name in one process, more than a client pool's connections.

redis-py 8 gives a client a pool of 100 connections that *raises* when full. Waiters blocked
on a lock hold pooled connections too, so 120 of them once made the holder's release fail
with "Too many connections" and left the lock stuck for its ttl. These tests crowd one name
with several times that many threads (sync) or tasks (asyncio): every call gets its turn, no
call fails, the holder's release is prompt, and no key is left behind.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from support import flavours

from redlock_deco import limited, locked, register_provider
from redlock_deco.testing import RedisServer

pytestmark = pytest.mark.slow

CROWD = 500  # five times the default pool of a redis-py 8 client
BLOCKED = 300  # waiters parked on the name while the holder releases
LIMIT = 3
# A crowd goes through in a couple of seconds on a quiet machine; the bound leaves room for
# a busy one, and every waiter may wait this long before giving up.
BOUND = 20.0
WAIT = 30.0


class Crowd:
    """Many callers of one protected body, counting who is inside at once."""

    def __init__(self, api: flavours.Api, decorator: Any, hold: float = 0.0) -> None:
        self.api = api
        self.hold = hold
        self.inside = 0
        self.peak = 0
        self._count = threading.Lock()  # threads in the sync flavour; never held over await

        async def body() -> str:
            with self._count:
                self.inside += 1
                self.peak = max(self.peak, self.inside)
            await api.sleep(self.hold)
            with self._count:
                self.inside -= 1
            return "ran"

        self.fn = api.decorate(decorator, body)

    async def call(self) -> str:
        result: str = await self.api.call(self.fn)
        return result

    def spawn(self, n: int) -> list[Any]:
        return [self.api.spawn(self.call) for _ in range(n)]

    async def outcomes(self, handles: list[Any]) -> collections.Counter[str]:
        """How each call ended: "ran", or the repr of what it raised."""
        seen: collections.Counter[str] = collections.Counter()
        for handle in handles:
            try:
                seen[await self.api.join(handle)] += 1
            except Exception as exc:
                seen[repr(exc)] += 1
        return seen


async def crowd_behind_a_holder(
    api: flavours.Api, decorator: Any, n: int, primitive: Callable[[], Any]
) -> tuple[collections.Counter[str], int, float]:
    """``n`` callers queue up behind a holder for a moment, then all go through."""
    holder = primitive()
    await holder.acquire()
    crowd = Crowd(api, decorator)
    started = time.monotonic()
    handles = crowd.spawn(n)
    await api.sleep(1.0)  # the crowd is waiting now
    await holder.release()
    seen = await crowd.outcomes(handles)
    return seen, crowd.peak, time.monotonic() - started


def test_every_one_of_500_waiters_on_a_lock_gets_its_turn(
    api: flavours.Api, r: redis.Redis
) -> None:
    deco = locked("hot", ttl=5, wait=WAIT)

    async def scenario(api: flavours.Api) -> tuple[collections.Counter[str], int, float]:
        return await crowd_behind_a_holder(api, deco, CROWD, lambda: api.Lock("hot", ttl=5))

    seen, peak, took = api.run(scenario)
    assert seen == {"ran": CROWD}, seen
    assert peak == 1
    assert took < BOUND, f"{CROWD} waiters took {took:.1f}s"
    assert r.dbsize() == 0


def test_every_one_of_500_waiters_on_a_semaphore_gets_its_turn(
    api: flavours.Api, r: redis.Redis
) -> None:
    deco = limited("hot", limit=LIMIT, ttl=5, wait=WAIT)

    async def scenario(api: flavours.Api) -> tuple[collections.Counter[str], int, float]:
        # The holder takes every slot, so the whole crowd waits.
        return await crowd_behind_a_holder(api, deco, CROWD, lambda: AllSlots(api, "hot", LIMIT))

    seen, peak, took = api.run(scenario)
    assert seen == {"ran": CROWD}, seen
    assert 1 <= peak <= LIMIT
    assert took < BOUND, f"{CROWD} waiters took {took:.1f}s"
    assert r.dbsize() == 0


class AllSlots:
    """Every slot of a semaphore, taken and given back together by one owner."""

    def __init__(self, api: flavours.Api, name: str, limit: int) -> None:
        self.slots = [api.Semaphore(name, limit=limit, ttl=5) for _ in range(limit)]

    async def acquire(self) -> None:
        for slot in self.slots:
            assert await slot.acquire(wait=0)

    async def release(self) -> None:
        for slot in self.slots:
            await slot.release()


def test_release_is_prompt_while_300_waiters_are_blocked(api: flavours.Api, r: redis.Redis) -> None:
    deco = locked("hot", ttl=5, wait=WAIT)

    async def scenario(api: flavours.Api) -> tuple[float, collections.Counter[str]]:
        holder = api.Lock("hot", ttl=5)
        assert await holder.acquire(wait=0)
        crowd = Crowd(api, deco)
        handles = crowd.spawn(BLOCKED)
        await api.sleep(1.5)  # every waiter has made its first attempt and is blocked
        assert crowd.peak == 0
        started = time.monotonic()
        await holder.release()
        released_in = time.monotonic() - started
        return released_in, await crowd.outcomes(handles)

    released_in, seen = api.run(scenario)
    # A release is one round trip (milliseconds), even with its hand-off; waiting for a
    # connection the waiters hold would take seconds, and an exhausted pool would raise.
    assert released_in < 1.0, f"the release took {released_in:.2f}s"
    assert seen == {"ran": BLOCKED}, seen
    assert r.dbsize() == 0


# redis-py's default pool (100 connections; on redis-py 5.x unbounded, where these
# tests' point -- a crowd larger than the pool -- is made by giving it that bound).
DEFAULT_POOL: dict[str, int] = (
    {} if redis.Redis().connection_pool.max_connections < 2**31 else {"max_connections": 100}
)


def test_a_users_own_sync_client_with_its_default_pool_serves_500_waiters(
    server: RedisServer, r: redis.Redis
) -> None:
    client = redis.Redis(host="127.0.0.1", port=server.port, **DEFAULT_POOL)
    assert client.connection_pool.max_connections < CROWD  # the point of the test
    register_provider("mine", client)
    api = flavours.SyncApi(server.url)
    deco = locked("hot", ttl=5, wait=WAIT, provider="mine")

    async def scenario(api: flavours.Api) -> tuple[collections.Counter[str], int, float]:
        return await crowd_behind_a_holder(
            api, deco, CROWD, lambda: api.Lock("hot", ttl=5, provider="mine")
        )

    try:
        seen, peak, took = api.run(scenario)
    finally:
        client.close()
    assert seen == {"ran": CROWD}, seen
    assert peak == 1
    assert took < BOUND, f"{CROWD} waiters took {took:.1f}s"
    assert r.dbsize() == 0


def test_a_users_own_asyncio_client_with_its_default_pool_serves_500_waiters(
    server: RedisServer, r: redis.Redis
) -> None:
    api = flavours.AsyncApi(server.url)
    deco = locked("hot", ttl=5, wait=WAIT, provider="mine")

    async def scenario(api: flavours.Api) -> tuple[collections.Counter[str], int, float]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, **DEFAULT_POOL)
        assert client.connection_pool.max_connections < CROWD  # the point of the test
        register_provider("mine", client)
        try:
            return await crowd_behind_a_holder(
                api, deco, CROWD, lambda: api.Lock("hot", ttl=5, provider="mine")
            )
        finally:
            await client.aclose()

    seen, peak, took = api.run(scenario)
    assert seen == {"ran": CROWD}, seen
    assert peak == 1
    assert took < BOUND, f"{CROWD} waiters took {took:.1f}s"
    assert r.dbsize() == 0


def test_500_waiters_on_a_semaphore_through_a_users_own_asyncio_client(
    server: RedisServer, r: redis.Redis
) -> None:
    deco = limited("hot", limit=LIMIT, ttl=5, wait=WAIT, provider="mine")

    async def main() -> tuple[collections.Counter[str], int]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        register_provider("mine", client)
        crowd = Crowd(flavours.AsyncApi(server.url), deco, hold=0.001)
        try:
            seen = await crowd.outcomes(crowd.spawn(CROWD))
        finally:
            await client.aclose()
        return seen, crowd.peak

    started = time.monotonic()
    seen, peak = asyncio.run(main())
    took = time.monotonic() - started
    assert seen == {"ran": CROWD}, seen
    assert 1 <= peak <= LIMIT
    assert took < BOUND, f"{CROWD} waiters took {took:.1f}s"
    assert r.dbsize() == 0
