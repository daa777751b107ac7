"""Operator tools: ``Lock.force_release`` / ``Semaphore.force_release`` (sync and asyncio) on a
real server -- what is removed and reported, the waiters served at once (here, across
processes, on a cluster), the former holder told its lease is lost, keys of other kinds,
application values and our own bookkeeping refused untouched, ``expect`` removing only the
holders named, and a quorum's masters all cleared."""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.lock
from support import admin_workers, handoff_workers
from support.flavours import Api

import redlock_deco
import redlock_deco.asyncio
from redlock_deco import (
    Lock,
    LockError,
    LockLost,
    LockNotOwned,
    Released,
    Semaphore,
    register_provider,
)
from redlock_deco.acl import acl_rules
from redlock_deco.testing import LocalCluster, RedisServer

spawn = multiprocessing.get_context("spawn")
HOST = socket.gethostname()
ME = f"{HOST}:{os.getpid()}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def until(condition: Callable[[], object], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition never met"
        time.sleep(0.005)


async def force(api: Api, kind: str, name: str, **options: Any) -> Released:
    """``Lock.force_release`` / ``Semaphore.force_release`` of the flavour under test."""
    if api.name == "sync":
        released: Released = getattr(redlock_deco, kind).force_release(name, **options)
        return released
    return await getattr(redlock_deco.asyncio, kind).force_release(name, **options)


async def queued(api: Api, r: redis.Redis, queue: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while r.zcard(queue) < count:
        assert time.monotonic() < deadline, f"{count} waiter(s) never queued on {queue}"
        await api.sleep(0.005)


@pytest.mark.parametrize("decode", [False, True], ids=["bytes", "decoded"])
def test_force_release_removes_a_held_lock_and_says_what_it_removed(
    api: Api, r: redis.Redis, decode: bool
) -> None:
    async def scenario(api: Api) -> None:
        api.register("default", decode=decode)  # str or bytes replies: the same result
        holder = api.Lock("stuck", ttl=30)
        assert await holder.acquire()
        released = await force(api, "Lock", "stuck")
        assert released.key == "lock:stuck" and released.kind == "lock" and released.removed
        ((who, left),) = released.holders
        assert who == ME and left is not None and 29 < left <= 30  # host:pid, never the token
        assert released.handed_to == () and released.unreachable == 0
        assert str(released).startswith(f"lock:stuck: removed lock held by {ME} (")
        assert r.dbsize() == 0  # no key left behind: no waiter was queued
        with pytest.raises(LockNotOwned, match="already ended"):
            await holder.release()  # the former holder finds out, and touches nothing
        nothing = await force(api, "Lock", "stuck")
        assert (
            not nothing.removed
            and nothing.kind == ""
            and str(nothing) == ("lock:stuck: nothing held")
        )

    api.run(scenario)


def test_the_oldest_waiter_gets_the_lock_at_once(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        holder = api.Lock("served", ttl=30)
        assert await holder.acquire()
        entered: list[float] = []

        async def wait() -> None:
            waiter = api.Lock("served", ttl=30, wait=10)
            assert await waiter.acquire()
            entered.append(time.monotonic())
            await waiter.release()

        handle = api.spawn(wait)
        await queued(api, r, "{lock:served}:queue", 1)
        forced_at = time.monotonic()
        released = await force(api, "Lock", "served")
        await api.join(handle)
        assert entered[0] - forced_at < 0.5  # handed over, not found at a recheck
        assert released.handed_to == (ME,)
        with pytest.raises(LockNotOwned):
            await holder.release()

    api.run(scenario)
    until(lambda: r.dbsize() == 0)


def test_renewal_reports_the_forced_lease_lost(api: Api) -> None:
    lost: list[float] = []

    async def hold() -> float:
        async with api.Lock("renewed", ttl=0.6, on_lost=lambda lease: lost.append(1)):
            forced_at = time.monotonic()
            await force(api, "Lock", "renewed")
            while not lost and time.monotonic() - forced_at < 3:
                await api.sleep(0.01)
            return time.monotonic() - forced_at

    async def scenario(api: Api) -> None:
        with pytest.raises(LockLost) as caught:
            await hold()
        assert "ended while the protected call ran" in str(caught.value)

    api.run(scenario)
    # Found by the next renewal, at a third of the ttl: well within one ttl.
    assert lost == [1]


def test_a_semaphore_loses_every_holder_and_serves_up_to_its_limit(
    api: Api, r: redis.Redis
) -> None:
    async def scenario(api: Api) -> None:
        holders = [api.Semaphore("pool", limit=2, ttl=30) for _ in range(2)]
        for holder in holders:
            assert await holder.acquire()
        entered: list[int] = []

        def waiter(index: int) -> Callable[[], Any]:
            async def wait() -> None:
                slot = api.Semaphore("pool", limit=2, ttl=30, wait=10)
                if await slot.acquire():
                    entered.append(index)
                    await api.sleep(0.3)  # still held when the first force release returns
                    await slot.release()

            return wait

        handles = []
        for index in range(3):
            handles.append(api.spawn(waiter(index)))
            await queued(api, r, "{sem:pool}:queue", index + 1)
        released = await force(api, "Semaphore", "pool")
        deadline = time.monotonic() + 5
        while len(entered) < 2:
            assert time.monotonic() < deadline, entered
            await api.sleep(0.005)
        assert sorted(entered) == [0, 1]  # the two oldest; the third still waits its turn
        assert released.kind == "semaphore" and len(released.holders) == 2
        assert len(released.handed_to) == 2 and r.zcard("sem:pool") == 2
        assert r.get("{sem:pool}:limit") == b"2"  # kept for the holders it was handed to
        for handle in handles:
            await api.join(handle)
        assert entered[2] == 2  # served in turn, as one of the first two left
        for holder in holders:
            with pytest.raises(LockNotOwned):
                await holder.release()

    api.run(scenario)
    until(lambda: r.dbsize() == 0)
    holder = Semaphore("pool", limit=2, ttl=30)
    assert holder.acquire()
    Semaphore.force_release("pool")
    assert r.dbsize() == 0  # with nobody to serve, the limit key goes too
    with pytest.raises(LockNotOwned):
        holder.release()


def test_keys_of_other_kinds_are_refused_untouched(r: redis.Redis) -> None:
    r.hset("lock:h", "field", 1)
    r.zadd("sem:board", {"alice": 3})
    with Semaphore("s", limit=2, ttl=30), Lock("l", ttl=30):
        cases: list[tuple[Callable[[], object], str]] = [
            (lambda: Lock.force_release("h"), "'lock:h' holds neither a lock nor a semaphore"),
            (lambda: Semaphore.force_release("board"), "not redlock-deco tokens"),
            (lambda: Lock.force_release("s", prefix="sem:"), "use Semaphore.force_release"),
            (lambda: Semaphore.force_release("l", prefix="lock:"), "use Lock.force_release"),
        ]
        for call, message in cases:
            with pytest.raises(LockError, match=message):
                call()
        assert r.hget("lock:h", "field") == b"1" and r.zcard("sem:board") == 1
        assert r.exists("lock:l", "sem:s") == 2
    with pytest.raises(TypeError, match="name must be a str"):
        Lock.force_release(7)  # type: ignore[arg-type]  # what is refused


def test_a_stuck_redis_py_lock_without_expiry_is_released(r: redis.Redis) -> None:
    theirs = redis.lock.Lock(r, "lock:legacy", timeout=None)  # no expiry: stuck for good
    assert theirs.acquire(blocking=False)
    released = Lock.force_release("legacy")
    ((who, left),) = released.holders
    assert left is None and who.endswith("(not a redlock-deco token)")
    assert theirs.local.token.decode()[:6] in who and not r.exists("lock:legacy")
    with Lock("legacy", wait=0):  # ours now
        pass


def test_expect_removes_only_the_holders_it_names(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        first = api.Lock("swapped", ttl=30)
        assert await first.acquire()
        shown = r.get("lock:swapped")  # what an operator was shown, and confirmed
        await first.release()
        second = api.Lock("swapped", ttl=30)
        assert await second.acquire()  # taken again before the confirmation arrived
        taken = r.get("lock:swapped")
        kept = await force(api, "Lock", "swapped", expect=shown)
        assert not kept.removed and kept.changed == (ME,) and kept.holders == ()
        assert str(kept) == f"lock:swapped: held by {ME}, not as expected; nothing removed"
        assert r.get("lock:swapped") == taken  # the new holder keeps its lease
        assert isinstance(taken, bytes)
        released = await force(api, "Lock", "swapped", expect=[shown, taken.decode()])
        assert released.removed and released.changed == () and not r.exists("lock:swapped")
        with pytest.raises(LockNotOwned):
            await second.release()
        gone = await force(api, "Lock", "swapped", expect=taken)  # nothing held: nothing to do
        assert not gone.removed and gone.changed == () and str(gone).endswith("nothing held")

    api.run(scenario)


def test_a_semaphore_goes_only_if_every_holder_was_expected(r: redis.Redis) -> None:
    a, b, c = (Semaphore("pool", limit=3, ttl=30) for _ in range(3))
    assert a.acquire() and b.acquire()
    shown = r.zrange("sem:pool", 0, -1)
    assert c.acquire()  # a holder nobody was shown
    kept = Semaphore.force_release("pool", expect=shown)
    assert not kept.removed and kept.changed == (ME,) and r.zcard("sem:pool") == 3
    c.release()
    b.release()  # one shown holder left meanwhile: the rest were all shown, so they go
    released = Semaphore.force_release("pool", expect=shown)
    assert released.removed and len(released.holders) == 1 and not r.exists("sem:pool")
    with pytest.raises(LockNotOwned):
        a.release()
    with pytest.raises(TypeError, match="expect takes tokens"):
        Semaphore.force_release("pool", expect=[7])  # type: ignore[list-item]  # refused


def test_a_string_that_holds_no_lock_token_is_refused_unless_forced(r: redis.Redis) -> None:
    r.set("session:abc", '{"user": 7}')  # an application's value, no expiry
    r.set("lock:upper", "A" * 32)  # redis-py's tokens are lowercase hex
    r.set("cache:bin", b"\xff\xfe not utf-8")
    for name, prefix in (("session:abc", ""), ("upper", "lock:"), ("cache:bin", "")):
        with pytest.raises(LockError, match=f"'{prefix}{name}' holds a string that is no lock"):
            Lock.force_release(name, prefix=prefix)
    assert r.get("session:abc") == b'{"user": 7}' and r.ttl("session:abc") == -1
    assert r.exists("lock:upper", "cache:bin") == 2
    forced = Lock.force_release("session:abc", prefix="", force=True)
    assert forced.removed and not forced.recognised and not r.exists("session:abc")
    assert str(forced).startswith("session:abc: removed a string that is not a recognised lock")
    value = r.get("cache:bin")  # bytes that are no UTF-8, compared as they are
    assert Lock.force_release("cache:bin", prefix="", force=True, expect=b"other").changed
    assert Lock.force_release("cache:bin", prefix="", force=True, expect=value).removed
    with pytest.raises(LockLost), Lock("ours", ttl=30):  # ours needs no force, and says so
        assert Lock.force_release("ours").recognised


def test_bookkeeping_keys_are_refused_untouched(r: redis.Redis) -> None:
    entered = threading.Event()

    def wait() -> None:
        with Lock("f", wait=10, fencing=True):
            entered.set()

    with (
        Lock("f", ttl=30, fencing=True),
        Semaphore("y", limit=2, ttl=30),
        Lock("a}b", ttl=30, fencing=True),
        Lock("{t}:x", ttl=30, fencing=True),
    ):
        waiter = threading.Thread(target=wait)
        waiter.start()
        until(lambda: r.exists("{lock:f}:queue"))
        cases = [
            ("{lock:f}:fence", "fencing counter of 'lock:f'"),
            ("{lock:f}:queue", "waiter queue of 'lock:f'"),
            ("{sem:y}:limit", "semaphore limit of 'sem:y'"),
            ("lock:{t}:x:fence", "fencing counter of 'lock:{t}:x'"),
            (next(iter(r.scan_iter("{s*}:lock:a}b:fence"))).decode(), "of 'lock:a}b'"),
        ]
        before = {key: r.dump(key) for key, _ in cases}
        for key, message in cases:
            with pytest.raises(LockError, match=re.escape(message)):
                Lock.force_release(key, prefix="", force=True)
            with pytest.raises(LockError, match=re.escape(message)):
                Semaphore.force_release(key, prefix="")
        assert {key: r.dump(key) for key, _ in cases} == before
        assert not entered.is_set()
    waiter.join(10)
    assert entered.is_set()
    # A name that merely ends like one (no hash tag: no bookkeeping key is named so) is a lock.
    with pytest.raises(LockLost), Lock("jobs:queue", ttl=30):
        assert Lock.force_release("jobs:queue").removed


def test_long_names_are_found_under_their_bounded_key(r: redis.Redis) -> None:
    name = "n" * 5000  # stored as a readable prefix and a digest
    lock = Lock(name, ttl=30)
    assert lock.acquire() and lock.key != "lock:" + name
    assert Lock.force_release(name).key == lock.key
    assert not r.exists(lock.key)
    with pytest.raises(LockNotOwned):
        lock.release()


def test_force_release_runs_under_the_least_privilege_acl(
    server: RedisServer, r: redis.Redis
) -> None:
    """The library's own users may force-release: no command beyond acl.py's grant (TYPE is
    not one: the script tells the kinds apart by asking)."""
    r.execute_command("ACL", "SETUSER", "locker", "on", ">secret", *acl_rules(["lock:", "sem:"]))
    r.acl_log_reset()
    register_provider("least", f"redis://locker:secret@127.0.0.1:{server.port}/0")
    try:
        with pytest.raises(LockLost), Lock("acl", ttl=30, provider="least"):
            assert Lock.force_release("acl", provider="least").removed
        slot = Semaphore("acl", limit=2, ttl=30, provider="least")
        assert slot.acquire()
        assert Semaphore.force_release("acl", provider="least").removed
        with pytest.raises(LockNotOwned):
            slot.release()
        r.hset("lock:h", "field", 1)
        with pytest.raises(LockError, match="neither a lock nor a semaphore"):
            Lock.force_release("h", provider="least")
        # Refused, if anything: what test_acl.py tolerates (the eviction check's CONFIG GET).
        refused = {_text(entry["object"]) for entry in r.acl_log()}
        assert refused <= {"client|setinfo", "config|get", "client", "config"}, refused
    finally:
        r.execute_command("ACL", "DELUSER", "locker")


@pytest.mark.slow
def test_a_waiter_in_another_process_wakes_at_once_and_the_holder_hears_it_lost(
    server: RedisServer, r: redis.Redis
) -> None:
    held, got = spawn.Queue(), spawn.Queue()
    holder = spawn.Process(
        target=admin_workers.hold_until_lost, args=(server.url, "stuck", 1.5, held)
    )
    waiter = spawn.Process(
        target=handoff_workers.wait_then_hold, args=(server.url, "stuck", 0, 0.05, got)
    )
    try:
        holder.start()
        assert held.get(timeout=60)[0] == "holding"
        waiter.start()
        until(lambda: r.zcard("{lock:stuck}:queue") == 1, within=60)
        forced_at = time.monotonic()
        released = Lock.force_release("stuck")
        assert released.holders[0][0] == f"{HOST}:{holder.pid}"
        assert released.handed_to == (f"{HOST}:{waiter.pid}",)
        _index, entered, _left = got.get(timeout=10)
        assert entered - forced_at < 0.5  # one clock for every process (CLOCK_MONOTONIC)
        kind, lost_at = held.get(timeout=10)
        assert kind == "LockLost"  # its block ended in LockLost...
        assert lost_at is not None and lost_at - forced_at < 1.0  # ...on_lost at its renewal
    finally:
        for process in (holder, waiter):
            if process.is_alive():
                process.kill()
            process.join(5)
    until(lambda: r.dbsize() == 0)


# -- quorum and cluster ------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[RedisServer]]:
    servers = [RedisServer() for _ in range(3)]
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
        server.client().flushall()
    register_provider("q", [s.url for s in fleet])
    yield fleet
    for server in fleet:
        if server.process is None:
            server.start()


def test_a_quorum_is_cleared_on_every_master(api: Api, masters: list[RedisServer]) -> None:
    async def scenario(api: Api) -> Released:
        holder = api.Lock("q", provider="q", ttl=30)
        assert await holder.acquire()
        released = await force(api, "Lock", "q", provider="q")
        with pytest.raises(LockNotOwned):
            await holder.release()
        return released

    released = api.run(scenario)
    assert released.holders[0][0] == ME and released.unreachable == 0
    assert [s.client().exists("lock:q") for s in masters] == [0, 0, 0]


def test_a_quorum_with_masters_down(masters: list[RedisServer]) -> None:
    holder = Lock("down", provider="q", ttl=30)
    assert holder.acquire()
    masters[0].kill()
    released = Lock.force_release("down", provider="q")
    assert released.removed and released.unreachable == 1
    assert "1 master(s) did not answer" in str(released)
    masters[1].kill()  # a majority unreachable: the lease may still hold there
    with pytest.raises(redis.exceptions.ConnectionError) as caught:
        Lock.force_release("down", provider="q")
    assert "run it again" in "".join(getattr(caught.value, "__notes__", []))
    masters[0].start()
    masters[1].start()
    with pytest.raises(LockNotOwned):  # gone everywhere: the former holder finds out
        holder.release()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as local:
        yield local


def test_a_cluster_waiter_is_served(cluster: LocalCluster) -> None:
    client = cluster.client()
    client.flushall(target_nodes=client.PRIMARIES)
    register_provider("cluster", client)
    try:
        holder = Lock("order:9", provider="cluster", ttl=30)
        holder.acquire()
        got: list[float] = []

        def wait() -> None:
            lock = Lock("order:9", provider="cluster", wait=10)
            if lock.acquire():
                got.append(time.monotonic())
                lock.release()  # nothing left to renew once this cluster is gone

        waiter = threading.Thread(target=wait)
        waiter.start()
        until(lambda: client.exists("{lock:order:9}:queue"))
        forced_at = time.monotonic()
        released = Lock.force_release("order:9", provider="cluster")
        waiter.join(10)
        assert got and got[0] - forced_at < 0.5
        assert released.handed_to == (ME,)
        with pytest.raises(LockNotOwned):  # and nothing is left to renew once the cluster goes
            holder.release()
        slot = Semaphore("s:{tag}", limit=2, provider="cluster", ttl=30)
        assert slot.acquire()
        assert Semaphore.force_release("s:{tag}", provider="cluster").removed
        assert client.dbsize(target_nodes=client.PRIMARIES) == 0  # nobody left, no key left
        with pytest.raises(LockNotOwned):
            slot.release()
    finally:
        client.close()
