"""fakeredis (with Lua, through lupa) as a unit-test backend for code that uses the
decorators: the setup docs/testing.md shows, held to the behaviours it supports. A user
feature, not our proof: every other test runs on real servers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import fakeredis
import pytest

import redlock_deco
import redlock_deco.asyncio
from redlock_deco import Lock, LockNotAcquired, Semaphore, limited, locked

THREADS = 6


@pytest.fixture
def fake() -> Iterator[fakeredis.FakeServer]:
    """The setup of docs/testing.md: one FakeServer, a sync client for sync code and a
    FakeAsyncRedis per event loop for async code, under the default provider."""
    server = fakeredis.FakeServer()
    redlock_deco.register_provider(
        "default",
        fakeredis.FakeRedis(server=server),
        asyncio=lambda: fakeredis.FakeAsyncRedis(server=server),
    )
    yield server
    redlock_deco.unregister_provider("default")


def keys(server: fakeredis.FakeServer) -> list[bytes]:
    return fakeredis.FakeRedis(server=server).keys("*")


def test_decorated_calls_exclude_each_other_and_leave_nothing(fake: fakeredis.FakeServer) -> None:
    inside, peak, order = [0], [0], []

    @locked("order:{order_id}", ttl=5, wait=10)
    def charge(order_id: int, n: int) -> None:
        inside[0] += 1
        peak[0] = max(peak[0], inside[0])
        order.append(n)
        time.sleep(0.01)
        inside[0] -= 1

    threads = [threading.Thread(target=charge, args=(7, n)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert peak == [1] and sorted(order) == list(range(THREADS))
    assert keys(fake) == []


def test_limited_bounds_concurrency_and_a_busy_lock_is_refused(fake: fakeredis.FakeServer) -> None:
    inside, peak = [0], [0]
    guard = threading.Lock()

    @limited("export", limit=2, ttl=5)
    def export() -> None:
        with guard:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        time.sleep(0.02)
        with guard:
            inside[0] -= 1

    threads = [threading.Thread(target=export) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert peak == [2]
    with Lock("busy", ttl=5), pytest.raises(LockNotAcquired):
        in_thread(lambda: Lock("busy", wait=0).__enter__())
    assert keys(fake) == []


def in_thread(fn: object) -> object:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def take_and_give_back(lock: Lock) -> bool:
    if not lock.acquire():
        return False
    lock.release()
    return True


def test_readers_share_and_a_writer_waits(fake: fakeredis.FakeServer) -> None:
    with Lock("doc", shared=True), Lock("doc", shared=True):
        assert in_thread(lambda: take_and_give_back(Lock("doc", shared=True, wait=0)))
        assert not in_thread(lambda: take_and_give_back(Lock("doc", wait=0)))
    assert in_thread(lambda: take_and_give_back(Lock("doc", wait=0)))
    assert keys(fake) == []


def test_leases_expire_and_renew_on_the_fake_servers_clock(fake: fakeredis.FakeServer) -> None:
    dropped = Lock("dead", ttl=0.3, auto_renew=False)
    assert dropped.acquire()
    started = time.monotonic()
    assert in_thread(lambda: take_and_give_back(Lock("dead", wait=2)))  # after its ttl
    assert 0.2 < time.monotonic() - started < 1.5
    with pytest.raises(redlock_deco.LockNotOwned):
        dropped.release()  # ended: nothing of the next holder's was touched
    with Lock("renewed", ttl=0.3) as lock:
        time.sleep(0.8)
        assert lock.owned()
    assert keys(fake) == []


def test_asyncio_twins_on_fake_async_clients(fake: fakeredis.FakeServer) -> None:
    async def main() -> list[int]:
        inside, peak = [0], [0]

        @limited("crawl:{host}", limit=2, ttl=5)
        async def fetch(host: str, n: int) -> int:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            await asyncio.sleep(0.02)
            inside[0] -= 1
            return n

        results = await asyncio.gather(*(fetch("example.com", n) for n in range(6)))
        async with redlock_deco.asyncio.Lock("a", ttl=5):
            assert not await redlock_deco.asyncio.Lock("a", wait=0).acquire()
        assert peak == [2]
        return list(results)

    assert asyncio.run(main()) == list(range(6))
    with Semaphore("crawl:example.com", limit=2) as sem:  # and sync code beside it
        assert sem.holders() == 1
    assert keys(fake) == []
