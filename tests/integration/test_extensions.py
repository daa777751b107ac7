"""current_lease(), on_lost= and max_hold=, sync and async."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any

import pytest
import redis
from support.flavours import Api

from redlock_deco import LockError, LockLost, current_lease, limited, locked, register_provider
from redlock_deco.testing import FaultProxy, RedisServer


def test_current_lease_is_the_innermost_protected_call(api: Api, r: redis.Redis) -> None:
    seen: list[tuple[str, str, float, bool]] = []

    def look() -> None:
        lease = current_lease()
        assert lease is not None
        seen.append((lease.name, lease.key, lease.remaining(), lease.lost))
        if lease.key.startswith("sem:"):
            assert r.zscore(lease.key, lease.token) is not None  # our slot, by token
        else:
            assert r.get(lease.key) == lease.token.encode()

    async def inner_body() -> None:
        look()

    inner = api.decorate(limited("inner", limit=2, ttl=5), inner_body)

    async def outer_body(n: int) -> None:
        look()
        await api.call(inner)
        look()  # back in the outer call

    outer = api.decorate(locked("outer:{n}", ttl=5), outer_body)

    async def scenario(api: Api) -> None:
        assert current_lease(None) is None
        await api.call(outer, 1)
        async with api.Lock("block", ttl=5):
            look()
        assert current_lease(None) is None

    api.run(scenario)
    assert [(name, key) for name, key, _, _ in seen] == [
        ("outer:1", "lock:outer:1"), ("inner", "sem:inner"), ("outer:1", "lock:outer:1"),
        ("block", "lock:block"),
    ]  # fmt: skip
    assert all(4.0 < left <= 5.0 and not lost for _, _, left, lost in seen)


def test_current_lease_outside_a_protected_call_raises(api: Api) -> None:
    """There is no lease outside a protected call -- nor in a thread (sync) or task (async)
    started inside one, which does not inherit it: LockError, or the default if given."""

    async def elsewhere() -> object:
        with pytest.raises(LockError, match="outside any protected call"):
            current_lease()
        return current_lease(None)

    async def body() -> object:
        assert current_lease().key == "lock:parent"
        return await api.join(api.spawn(elsewhere))

    protected = api.decorate(locked("parent", ttl=5), body)

    async def scenario(api: Api) -> None:
        with pytest.raises(LockError, match=re.escape("current_lease(None)")):  # shows how
            current_lease()
        default = object()
        assert current_lease(default) is default
        assert await api.call(protected) is None

    api.run(scenario)


def test_on_lost_is_called_promptly_by_the_renewer(api: Api, r: redis.Redis) -> None:
    told: list[tuple[str, float]] = []

    def on_lost(lease: Any) -> None:
        told.append((lease.key, time.monotonic()))

    async def body() -> float:
        r.set("lock:watched", "someone-else", px=5000)  # taken over under our feet
        took_over = time.monotonic()
        await api.sleep(0.6)
        return took_over

    decorated = api.decorate(locked("watched", ttl=0.3, on_lost=on_lost), body)

    async def scenario(api: Api) -> float:
        with pytest.raises(LockLost):
            await api.call(decorated)
        return 0.0

    started = time.monotonic()
    api.run(scenario)
    assert len(told) == 1 and told[0][0] == "lock:watched"
    assert told[0][1] - started < 0.3  # found at the next renewal (ttl/3), not at the end
    assert r.get("lock:watched") == b"someone-else"


@pytest.mark.parametrize("leaving", [SystemExit, KeyboardInterrupt])
def test_an_on_lost_that_raises_system_exit_stops_no_renewal(
    api: Api, r: redis.Redis, server: RedisServer, leaving: type[BaseException]
) -> None:
    """Review 16, 02: an on_lost calling sys.exit() (or raising KeyboardInterrupt) for a
    lease whose renewal hung past its end ran on the renewer itself and ended its thread --
    not the process -- so no lease of the process was renewed again: the next lock expired
    under its holder, with no on_lost. It is logged; renewals go on."""

    def on_lost(lease: Any) -> None:
        raise leaving

    with FaultProxy(server.port) as proxy:
        register_provider("stalling", proxy.url)

        async def overdue() -> None:
            proxy.stall()  # its renewal hangs: the lease runs out by the holder's clock
            await api.sleep(0.6)
            proxy.heal()

        async def held_long() -> bytes | None:
            await api.sleep(1.0)  # ~3 renewals of a 0.3 s lease
            return r.get("lock:renewed-after")

        lost = api.decorate(locked("exits", ttl=0.3, on_lost=on_lost, provider="stalling"), overdue)
        renewed = api.decorate(locked("renewed-after", ttl=0.3), held_long)

        async def scenario(api: Api) -> bytes | None:
            with pytest.raises(LockLost):
                await api.call(lost)
            return await api.call(renewed)  # LockLost at its exit if nothing renewed it

        assert api.run(scenario) is not None
    assert not r.exists("lock:renewed-after")


def test_on_lost_cancel_cancels_the_async_call(r: redis.Redis) -> None:
    @locked("cancel-me", ttl=0.3, on_lost="cancel")
    async def long_job() -> None:
        r.delete("lock:cancel-me")  # the lease is gone
        await asyncio.sleep(10)

    async def scenario() -> float:
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await long_job()
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 0.5  # cancelled at the next renewal, not after 10 s


def test_a_section_nested_after_max_hold_says_max_hold_ended_it(r: redis.Redis) -> None:
    """Review 92a, N1: a nested section entered once max_hold has passed raises LockLost at
    once -- the lease no longer protects it -- and said "expired or taken over", which it
    was not (it is no longer renewed; the server may hold it a moment yet)."""

    @locked("past-max-hold", ttl=2, max_hold=0.2)
    def outer() -> None:
        time.sleep(1.0)  # (its first renewal was due at a third of the ttl: given up then)
        with pytest.raises(LockLost, match="max_hold has passed"):
            inner()

    @locked("past-max-hold", ttl=2)
    def inner() -> None:
        pass

    with contextlib.suppress(LockLost):  # (its end: lost or not, as its release finds it)
        outer()
    assert not r.exists("lock:past-max-hold")


def test_max_hold_stops_renewal_so_a_stuck_call_lets_go(api: Api, r: redis.Redis) -> None:
    async def stuck() -> bool:
        await api.sleep(1.3)  # renewals stop at 0.5 s; the lease ends about 0.3 s later
        return bool(r.exists("lock:stuck"))

    decorated = api.decorate(locked("stuck", ttl=0.3, max_hold=0.5), stuck)

    async def scenario(api: Api) -> None:
        with pytest.raises(LockLost):
            await api.call(decorated)

    api.run(scenario)
    assert not r.exists("lock:stuck")
