"""What a holder believes about its lease, against what the server was told: extend() and
renewal ordering, nested exits, current_lease() with sections ending out of order, fencing
when re-entering, and the public ``lock.lease``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from redlock_deco import Lock, LockError, LockLost, current_lease, locked


def _stall_writes(r: redis.Redis, ms: int) -> None:
    """CLIENT PAUSE WRITE: the server queues every write for ``ms`` (a short server stall)."""
    r.execute_command("CLIENT", "PAUSE", ms, "WRITE")


@pytest.mark.slow
def test_extend_and_a_renewal_in_flight_are_ordered(r: redis.Redis) -> None:
    lock = Lock("ordered", ttl=0.6)  # renewed to 0.6 s every 0.2 s
    lock.acquire()
    try:
        time.sleep(0.1)
        _stall_writes(r, 300)  # the renewal due at 0.2 s and extend(60) queue up together
        lock.extend(to=60)
        lease = lock.lease
        assert lease is not None
        time.sleep(1.0)  # past the old 0.6 s ttl
        # The holder's belief and the server agree, whichever request reached it last.
        believed = lease.remaining()
        pttl = r.pttl("lock:ordered") / 1000
        assert not lease.lost and pttl > 50 and abs(believed - pttl) < 2.0
        other: list[bool] = []  # another thread (this one would re-enter) cannot get in
        thread = threading.Thread(target=lambda: other.append(Lock("ordered", wait=0).acquire()))
        thread.start()
        thread.join()
        assert other == [False]
    finally:
        lock.release()


@pytest.mark.slow
def test_a_reply_records_the_ttl_its_own_request_carried(r: redis.Redis) -> None:
    """extend(0.5) right after a renewal to 60 s was sent: the holder must not believe 60 s
    while the server has 0.5 s, nor the reverse."""
    lock = Lock("carried", ttl=60)
    lock.acquire()
    try:
        # Ends on 60 s: a 0.5 s lease can run out under load before the release (CI's slow
        # leg: the release raised LockNotOwned, correctly, and failed the test).
        for ttl in (0.5, 60.0, 0.5, 60.0):
            _stall_writes(r, 100)
            lock.extend(to=ttl)
            lease = lock.lease
            assert lease is not None
            pttl = r.pttl("lock:carried") / 1000
            assert abs(lease.remaining() - pttl) < 0.3, (ttl, lease.remaining(), pttl)
    finally:
        lock.release()


def test_only_the_outermost_exit_reports_a_lost_lease(r: redis.Redis) -> None:
    seen: list[str] = []

    @locked("nested", ttl=0.6)
    def inner() -> None:
        r.delete("lock:nested")  # taken away (expiry, takeover)
        time.sleep(0.5)  # the renewer (every 0.2 s) finds it gone

    @locked("nested", ttl=0.6)
    def outer() -> None:
        inner()  # a nested exit: says nothing
        seen.append("outer body went on")

    with pytest.raises(LockLost):
        outer()
    assert seen == ["outer body went on"]


def _rows() -> Iterator[int]:
    with Lock("export"):
        yield 1
        yield 2


def test_current_lease_when_sections_end_out_of_order() -> None:
    @locked("job")
    def start() -> Iterator[int]:
        rows = _rows()
        next(rows)  # suspended inside `with Lock("export")`, which outlives this call
        return rows

    rows = start()
    lease = current_lease()
    assert lease is not None and lease.key == "lock:export"  # still inside that block
    assert list(rows) == [2]
    assert current_lease(None) is None


def test_current_lease_after_a_with_block_ends_inside_a_call() -> None:
    @locked("outer-call")
    def call() -> tuple[str | None, str | None]:
        with Lock("inner-block"):
            inside = current_lease()
        after = current_lease()
        return inside and inside.key, after and after.key

    assert call() == ("lock:inner-block", "lock:outer-call")
    assert current_lease(None) is None


def test_fenced_call_nested_in_an_unfenced_holder_raises_clearly() -> None:
    @locked("invoice:{id}", fencing=True)
    def settle(id: int) -> int | None:
        lease = current_lease()
        return lease.fencing_token if lease else None

    @locked("invoice:{id}")
    def batch(id: int) -> int | None:
        return settle(id)

    token = settle(1)
    assert isinstance(token, int)
    with pytest.raises(LockError, match="fencing=True"):
        batch(1)
    assert settle(1) > token  # type: ignore[operator]


def test_unfenced_call_nested_in_a_fenced_holder_keeps_its_token() -> None:
    @locked("ledger", fencing=True)
    def outer() -> tuple[int | None, int | None]:
        return current_lease().fencing_token, inner()

    @locked("ledger")
    def inner() -> int | None:
        return current_lease().fencing_token

    first, nested = outer()
    assert first is not None and nested == first


def test_lock_lease_is_public_after_acquire() -> None:
    lock = Lock("public", fencing=True)
    assert lock.lease is None
    assert lock.acquire()
    lease = lock.lease
    assert lease is not None and isinstance(lease.fencing_token, int)
    assert lease.key == "lock:public" and 0 < lease.remaining() <= 30
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(lock.lease))
    thread.start()
    thread.join()
    assert other == [lease]  # the object holds it: seen through it from any thread
    lock.release()
    assert lock.lease is None


@pytest.mark.slow
def test_a_lease_known_lost_is_reported_lost_when_its_release_fails_too() -> None:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from redlock_deco import register_provider
    from redlock_deco.testing import RedisServer

    with RedisServer() as own:
        client = own.client(socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
        register_provider("partitioned", client)

        @locked("lost-then-unreachable", provider="partitioned", ttl=0.5)
        def section() -> None:
            own.client().delete("lock:lost-then-unreachable")  # taken away...
            time.sleep(0.4)  # ...the renewer finds it gone...
            own.pause()  # ...and the server stops answering before the release

        try:
            with pytest.raises(LockLost) as info:
                section()
        finally:
            own.resume()
        assert isinstance(info.value.__cause__, redis.exceptions.TimeoutError)


@pytest.mark.slow
def test_a_lease_won_after_a_long_wait_is_measured_from_its_own_attempt() -> None:
    holder = Lock("long-wait", ttl=0.4, auto_renew=False)
    holder.acquire()
    waiter = Lock("long-wait", ttl=0.4, wait=5)
    got: list[float] = []

    def wait_then_look() -> None:
        with waiter:  # granted after ~0.4 s of waiting, longer than its own ttl
            lease = waiter.lease
            assert lease is not None
            got.append(lease.remaining())
            with Lock("long-wait", wait=0):  # re-entry must not see the fresh lease as over
                pass

    thread = threading.Thread(target=wait_then_look)
    thread.start()
    thread.join(10)
    assert got and got[0] > 0.2


@pytest.mark.slow
def test_an_extend_cut_short_leaves_the_holder_believing_the_worse(r: redis.Redis) -> None:
    """extend(1) times out on the client but lands on the server: the holder must not go on
    believing its old 30 s (another holder would get in at 1 s while it is inside)."""
    import asyncio

    from redlock_deco.asyncio import Lock as AsyncLock

    async def main() -> None:
        lock = AsyncLock("cut-short", ttl=30)
        assert await lock.acquire()
        _stall_writes(r, 300)
        me = asyncio.current_task()
        assert me is not None
        timer = asyncio.get_running_loop().call_later(0.1, me.cancel)  # a timeout, by hand
        with pytest.raises(asyncio.CancelledError):
            await lock.extend(to=1)
        timer.cancel()
        if hasattr(me, "uncancel"):
            me.uncancel()
        lease = lock.lease
        assert lease is not None and lease.remaining() <= 1.0  # the worse of the two
        await asyncio.sleep(1.5)  # renewed at once, with the ttl the holder believes in
        assert not lease.lost and r.pttl("lock:cut-short") > 20_000
        await lock.release()

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_shorter_extend_is_renewed_on_its_own_schedule(r: redis.Redis, flavour: str) -> None:
    """extend(1) on a 30 s lease: the next renewal is due in ~0.33 s, not at the old 10 s --
    the renewer must wake up for it, or the key runs out while the holder is inside."""
    import asyncio

    from redlock_deco.asyncio import Lock as AsyncLock

    if flavour == "sync":
        lock = Lock("shorter", ttl=30)
        lock.acquire()
        lock.extend(to=1)
        time.sleep(2.0)
        lease = lock.lease
        assert lease is not None and not lease.lost and r.pttl("lock:shorter") > 0
        lock.release()
        return

    async def main() -> None:
        alock = AsyncLock("shorter", ttl=30)
        await alock.acquire()
        await alock.extend(to=1)
        await asyncio.sleep(2.0)
        lease = alock.lease
        assert lease is not None and not lease.lost and r.pttl("lock:shorter") > 0
        await alock.release()

    asyncio.run(main())
