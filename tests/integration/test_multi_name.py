"""Several names in one @locked: all or nothing, deadlock-free order, released together; on a
single server and through a quorum (cluster: see test_topologies)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from support.flavours import Api

from redlock_deco import LockLost, LockNotAcquired, locked


def test_both_names_are_held_and_released_together(api: Api, r: redis.Redis) -> None:
    async def body(src: str, dst: str) -> list[bytes]:
        return sorted(r.keys("lock:*"))

    transfer = api.decorate(locked("acct:{src}", "acct:{dst}", ttl=5), body)

    async def scenario(api: Api) -> Any:
        return await api.call(transfer, "b", "a")

    assert api.run(scenario) == [b"lock:acct:a", b"lock:acct:b"]
    assert r.dbsize() == 0


def test_all_or_nothing_within_one_wait(api: Api, r: redis.Redis) -> None:
    async def body(src: str, dst: str) -> None: ...

    transfer = api.decorate(locked("acct:{src}", "acct:{dst}", ttl=5, wait=0.2), body)

    async def scenario(api: Api) -> float:
        async with api.Lock("acct:z", ttl=5):

            async def attempt() -> float:
                started = time.monotonic()
                with pytest.raises(LockNotAcquired):
                    await api.call(transfer, "a", "z")
                return time.monotonic() - started

            waited: float = await api.join(api.spawn(attempt))
            assert not r.exists("lock:acct:a")  # the one it got was given back
            return waited

    assert api.run(scenario) < 0.6  # one wait for the whole set, not one per name


def test_opposite_orders_never_deadlock_and_exclude_each_other(r: redis.Redis) -> None:
    inside: dict[str, int] = {"a": 0, "b": 0}
    peak = {"a": 0, "b": 0}
    guard = threading.Lock()

    @locked("acct:{src}", "acct:{dst}", ttl=5, wait=10)
    def transfer(src: str, dst: str) -> None:
        with guard:
            for name in (src, dst):
                inside[name] += 1
                peak[name] = max(peak[name], inside[name])
        time.sleep(0.001)
        with guard:
            for name in (src, dst):
                inside[name] -= 1

    def worker(src: str, dst: str) -> None:
        for _ in range(40):
            transfer(src, dst)

    threads = [threading.Thread(target=worker, args=p) for p in [("a", "b"), ("b", "a")] * 3]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads) and time.monotonic() - started < 30
    assert peak == {"a": 1, "b": 1}
    assert r.dbsize() == 0


def test_lock_lost_on_one_name_still_releases_the_others(r: redis.Redis) -> None:
    @locked("x:{a}", "x:{b}", ttl=5)
    def body(a: int, b: int) -> None:
        r.delete("lock:x:2")

    with pytest.raises(LockLost):
        body(1, 2)
    assert r.dbsize() == 0


def test_several_names_through_a_quorum() -> None:
    from contextlib import ExitStack

    from redlock_deco import register_provider
    from redlock_deco.testing import RedisServer

    with ExitStack() as stack:
        masters = [stack.enter_context(RedisServer()) for _ in range(3)]
        register_provider("q3", [m.url for m in masters])

        @locked("acct:{src}", "acct:{dst}", provider="q3", ttl=5)
        def transfer(src: str, dst: str) -> list[int]:
            return [int(m.client().exists("lock:acct:1", "lock:acct:2")) for m in masters]

        assert transfer("2", "1") == [2, 2, 2]
        assert all(m.client().dbsize() == 0 for m in masters)
