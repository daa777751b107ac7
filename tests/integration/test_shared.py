"""The reader-writer lock, ``Lock(name, shared=True)`` and ``@locked(..., shared=True)``:
behaviour written once and run in both flavours (sync and asyncio), then the layout, the
operator tools and what is refused. Multi-process invariants, starvation bounds and crashes
are in test_shared_processes.py; the stateful and fault-proxy tests in test_shared_*.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from support.flavours import Api
from support.queues import enqueue

import redlock_deco
from redlock_deco import Lock, LockError, LockNotOwned, ProviderError, locked
from redlock_deco._inspection import held, render_table
from redlock_deco.testing import RedisServer

SHARED = b"redlock-deco:shared"


def readers(r: redis.Redis, name: str) -> list[bytes]:
    return list(r.zrange("{lock:%s}:readers" % name, 0, -1))  # noqa: UP031  # braces


def test_readers_share_and_exclude_writers(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        first = api.Lock("doc:1", shared=True, ttl=5, wait=0)
        assert await first.acquire()
        assert r.get("lock:doc:1") == SHARED and 4000 < r.pttl("lock:doc:1") <= 5000

        async def other_owner() -> tuple[bool, int]:
            second = api.Lock("doc:1", shared=True, ttl=8, wait=0)
            took = await second.acquire()
            count = await second.holders()
            await second.release()
            return took, count

        async def writer() -> bool:
            return bool(await api.Lock("doc:1", wait=0).acquire())

        took, count = await api.join(api.spawn(other_owner))
        assert took and count == 2
        assert not await api.join(api.spawn(writer))
        assert len(readers(r, "doc:1")) == 1  # the second left; the first reads on
        assert await first.owned() and await first.locked()
        await first.release()

    api.run(scenario)
    assert r.dbsize() == 0


def test_a_writer_excludes_readers_and_hands_over_to_them(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        writer = api.Lock("doc:2", ttl=5)
        await writer.acquire()

        async def reader() -> float:
            async with api.Lock("doc:2", shared=True, wait=5):
                return time.monotonic()

        assert not await api.join(
            api.spawn(lambda: api.Lock("doc:2", shared=True, wait=0).acquire())
        )
        waiting = [api.spawn(reader), api.spawn(reader)]
        await api.sleep(0.2)  # both queued
        released = time.monotonic()
        await writer.release()
        entered = [await api.join(handle) for handle in waiting]
        # Served by the release itself (a hand-off, not their recheck a second later): both
        # in at once (the margin is for a loaded CI machine).
        assert all(0 <= at - released < 0.4 for at in entered), entered

    api.run(scenario)
    assert r.dbsize() == 0


def test_a_queued_writer_stops_new_readers(api: Api, r: redis.Redis) -> None:
    order: list[str] = []

    async def scenario(api: Api) -> None:
        reader = api.Lock("doc:3", shared=True, ttl=5)
        await reader.acquire()

        async def write() -> None:
            async with api.Lock("doc:3", wait=5):
                order.append("writer in")
                await api.sleep(0.1)
                order.append("writer out")

        async def read(tag: str) -> None:
            async with api.Lock("doc:3", shared=True, wait=5):
                order.append(f"{tag} in")

        writing = api.spawn(write)
        await api.sleep(0.2)  # the writer queues behind the reader
        # A new reader (another owner) may not pass it (the writer would starve), even
        # trying once.
        try_once = api.spawn(lambda: api.Lock("doc:3", shared=True, wait=0).acquire())
        assert not await api.join(try_once)
        late = [api.spawn(lambda: read("late 1")), api.spawn(lambda: read("late 2"))]
        await api.sleep(0.2)
        assert order == []
        await reader.release()
        await api.join(writing)
        for handle in late:
            await api.join(handle)

    api.run(scenario)
    assert order[:2] == ["writer in", "writer out"]
    assert sorted(order[2:]) == ["late 1 in", "late 2 in"]
    assert r.dbsize() == 0


def test_reentry_rules(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        async with api.Lock("doc:4", shared=True):
            async with api.Lock("doc:4", shared=True):  # shared in shared: counted
                assert len(readers(r, "doc:4")) == 1
            started = time.monotonic()
            with pytest.raises(LockError, match="upgrading"):
                async with api.Lock("doc:4", wait=10):  # an upgrade: refused at once
                    pass
            assert time.monotonic() - started < 1.0
            assert len(readers(r, "doc:4")) == 1  # the shared hold is untouched
        # Shared inside exclusive: the hold stays exclusive.
        async with api.Lock("doc:4"), api.Lock("doc:4", shared=True):
            assert r.get("lock:doc:4") not in (None, SHARED)
            assert r.exists("{lock:doc:4}:readers") == 0

    api.run(scenario)
    assert r.dbsize() == 0


def test_decorator_in_shared_mode(api: Api, r: redis.Redis) -> None:
    inside: list[int] = []
    peak: list[int] = []

    async def body(doc: int) -> None:
        inside.append(doc)
        peak.append(len(inside))
        await api.sleep(0.2)
        inside.remove(doc)

    read = api.decorate(locked("doc:{doc}", shared=True, wait=5), body)

    async def scenario(api: Api) -> None:
        handles = [api.spawn(lambda: api.call(read, 7)) for _ in range(3)]
        for handle in handles:
            await api.join(handle)

    api.run(scenario)
    assert max(peak) == 3  # all three read at once
    assert r.dbsize() == 0


def test_several_names_shared_all_or_nothing(api: Api, r: redis.Redis) -> None:
    def body(a: int, b: int) -> None:
        assert r.get(f"lock:acct:{a}") == SHARED and r.get(f"lock:acct:{b}") == SHARED

    async def abody(a: int, b: int) -> None:
        body(a, b)

    both = api.decorate(locked("acct:{a}", "acct:{b}", shared=True, wait=0.2), abody)

    async def scenario(api: Api) -> None:
        await api.call(both, 1, 2)
        writer = api.Lock("acct:2", ttl=5)
        await writer.acquire()

        async def refused() -> None:  # another owner (this one would re-enter, as a writer)
            with pytest.raises(redlock_deco.LockNotAcquired):
                await api.call(both, 1, 2)
            assert r.exists("lock:acct:1") == 0  # nothing of the set is kept

        await api.join(api.spawn(refused))
        await writer.release()

    api.run(scenario)
    assert r.dbsize() == 0


def test_each_reader_has_its_own_lease(r: redis.Redis) -> None:
    short = Lock("doc:5", shared=True, ttl=0.3, auto_renew=False)
    assert short.acquire()
    took, leave, left = threading.Event(), threading.Event(), threading.Event()

    def long_reader() -> None:  # another thread: the same thread would re-enter the share
        with Lock("doc:5", shared=True, ttl=10):
            took.set()
            leave.wait(10)
        left.set()

    thread = threading.Thread(target=long_reader)
    thread.start()
    assert took.wait(10)
    assert r.pttl("lock:doc:5") > 9000  # the key lives as long as its longest reader
    time.sleep(0.4)  # the short lease ended (its holder "crashed": nothing renews it)
    assert Lock("doc:5").holders() == 1
    with pytest.raises(LockNotOwned):
        short.release()
    leave.set()
    assert left.wait(10)
    thread.join(10)
    assert r.dbsize() == 0  # the last reader out removed both keys


def test_a_crashed_readers_share_ends_with_its_lease(r: redis.Redis) -> None:
    gone = Lock("doc:6", shared=True, ttl=0.5, auto_renew=False)
    assert gone.acquire()  # and never released: its holder "crashed"
    started = time.monotonic()
    waited: list[float] = []

    def write() -> None:
        with Lock("doc:6", wait=5):
            waited.append(time.monotonic() - started)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(10)
    assert waited and 0.4 < waited[0] < 0.5 + 0.5, waited  # within its ttl (+ load margin)
    # The ended reader's set expired with it; DBSIZE counts it until the server's expiry
    # cycle reclaims it (when the writer came in by a plain SET NX that never touched it).
    deadline = time.monotonic() + 2
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.dbsize() == 0


def test_redis_py_lock_interop(r: redis.Redis) -> None:
    theirs = r.lock("lock:doc:7", timeout=5)
    assert theirs.acquire(blocking=False)
    assert not Lock("doc:7", shared=True, wait=0).acquire()
    theirs.release()
    with Lock("doc:7", shared=True):
        assert not r.lock("lock:doc:7", timeout=5).acquire(blocking=False)
        assert r.lock("lock:doc:7").locked()
    assert r.dbsize() == 0


@pytest.fixture
def quorum() -> Iterator[str]:
    servers = [RedisServer() for _ in range(3)]
    try:
        for each in servers:
            each.start()
        redlock_deco.register_provider("q", [each.url for each in servers])
        yield "q"
    finally:
        redlock_deco.unregister_provider("q")
        for each in servers:
            each.__exit__(None, None, None)


def test_refused_on_a_quorum(quorum: str) -> None:
    with pytest.raises(ProviderError, match="quorum"):
        Lock("x", shared=True, provider=quorum).acquire()

    @locked("x", shared=True, provider=quorum)
    def read() -> None: ...

    with pytest.raises(ProviderError, match="starving a writer"):
        read()
    with Lock("x", provider=quorum):  # exclusive locks still work there
        pass


def test_force_release_removes_every_reader_and_serves_the_queue(
    server: RedisServer, r: redis.Redis
) -> None:
    lost: list[str] = []
    # (ttl 3: at 1 s, a renewal late by a second on a busy machine let the first reader
    # expire before the listing -- 1 reader of 2, CI on Python 3.12 once)
    one = Lock("doc:8", shared=True, ttl=3, on_lost=lambda lease: lost.append(lease.key))
    assert one.acquire()
    other: list[Lock] = []

    def take() -> None:
        lock = Lock("doc:8", shared=True, ttl=30)
        assert lock.acquire()
        other.append(lock)

    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    entries = held(r)
    assert [(e["kind"], e["key"], e["slots"]) for e in entries] == [("shared", "lock:doc:8", 2)]
    assert "2 readers" in render_table(entries)
    entered: list[float] = []

    def write() -> None:
        with Lock("doc:8", wait=10):
            entered.append(time.monotonic())

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.2)  # queued behind the readers
    done = Lock.force_release("doc:8")
    released = time.monotonic()
    assert done.kind == "lock" and len(done.holders) == 2 and len(done.handed_to) == 1
    writer.join(10)
    assert entered and entered[0] - released < 0.4
    deadline = time.monotonic() + 6  # the first reader's renewal (every 1 s) finds it gone
    while not lost and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lost == ["lock:doc:8"]
    with pytest.raises(LockNotOwned):
        one.release()
    with pytest.raises(LockNotOwned):
        other[0].release()  # force-released too (its renewal may not have noticed yet)
    assert r.dbsize() == 0


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redlock_deco", *args],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_cli_release_shows_and_removes_readers(server: RedisServer, r: redis.Redis) -> None:
    lock = Lock("doc:9", shared=True, ttl=30)
    assert lock.acquire()
    rows = cli("inspect", "--url", server.url).stdout.splitlines()
    assert any("shared" in row and "lock:doc:9" in row and "1 reader" in row for row in rows)
    done = cli("release", "lock:doc:9", "--url", server.url, "--yes")
    assert done.returncode == 0, done.stderr
    assert "removed lock held by" in done.stdout
    assert r.dbsize() == 0
    with pytest.raises(LockNotOwned):
        lock.release()
    refused = cli("release", "{lock:doc:9}:readers", "--url", server.url, "--yes")
    assert "readers (shared holders) of 'lock:doc:9'" in refused.stdout + refused.stderr


# -- regressions from the adversarial review of the reader-writer lock ---------------------


def _in_thread(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_the_queue_keeps_its_expiry_when_a_reader_finds_a_writer_waiting(
    r: redis.Redis,
) -> None:
    reading, done = threading.Event(), threading.Event()

    def read() -> None:
        with Lock("doc:10", shared=True, ttl=5):
            reading.set()
            done.wait(10)

    def write() -> None:
        with Lock("doc:10", wait=10):
            pass

    threads = [_in_thread(read)]
    try:
        assert reading.wait(10)
        threads.append(_in_thread(write))
        while not r.exists("{lock:doc:10}:queue"):
            time.sleep(0.01)
        # A reader's try-once finds the writer at the head: it must not take the queue's
        # expiry (popping the last entry and pushing it back made a list that never expires,
        # left forever if every waiter then crashed).
        assert not _try_shared_elsewhere("doc:10")
        assert 0 < r.pttl("{lock:doc:10}:queue") <= 3000
    finally:
        done.set()
        for thread in threads:
            thread.join(10)
    assert r.dbsize() == 0


def _try_shared_elsewhere(name: str) -> bool:
    """Try once to read ``name`` from another thread (released at once if taken)."""
    result: list[bool] = []

    def attempt() -> None:
        lock = Lock(name, shared=True, wait=0)
        result.append(lock.acquire())
        if result[0]:
            lock.release()

    _in_thread(attempt).join(10)
    return result[0]


def test_a_dead_writer_in_the_queue_does_not_keep_readers_out(r: redis.Redis) -> None:
    with Lock("doc:11", shared=True, ttl=5):
        # What a writer killed while waiting leaves: its token in the queue, and no
        # subscription of its process any more.
        enqueue(r, "{lock:doc:11}:queue", f"gone:1:0a1b2c3d:{'e' * 32}")
        r.pexpire("{lock:doc:11}:queue", 3000)
        started = time.monotonic()
        assert _try_shared_elsewhere("doc:11")  # dropped, not waited behind
        assert time.monotonic() - started < 1.0  # not the 5 s the reader holds on
    assert r.dbsize() == 0


def test_a_shorter_extend_shortens_the_lock_key(r: redis.Redis) -> None:
    lock = Lock("doc:12", shared=True, ttl=30)
    assert lock.acquire()
    lock.extend(to=1)
    assert 0 < r.pttl("lock:doc:12") <= 1000  # the key lives as long as its longest reader
    assert 0 < r.pttl("{lock:doc:12}:readers") <= 1000
    lock.release()
    assert r.dbsize() == 0


def test_hand_offs_go_on_after_readers_are_admitted_together(r: redis.Redis) -> None:
    """One process: R0 reads; W1, R1, R2 and W2 queue. W1's release admits R1 and R2 at
    once; W2 must be handed the lock as the last of them leaves, not at its own recheck (a
    waiter that took over reading the grants must be one still waiting)."""
    times: dict[str, float] = {}

    def run(name: str, shared: bool, hold: float, delay: float) -> None:
        time.sleep(delay)
        with Lock("doc:13", shared=shared, ttl=5, wait=20):
            times[f"in {name}"] = time.monotonic()
            time.sleep(hold)
            times[f"leaving {name}"] = time.monotonic()  # the release follows
        times[f"out {name}"] = time.monotonic()

    for _round in range(2):
        plan = [("R0", True, 0.4, 0), ("W1", False, 0.2, 0.05), ("R1", True, 0.05, 0.1),
                ("R2", True, 0.05, 0.15), ("W2", False, 0, 0.2)]  # fmt: skip
        threads = [_in_thread(lambda p=p: run(*p)) for p in plan]  # type: ignore[misc]
        for thread in threads:
            thread.join(20)
        last_reader = max(times["out R1"], times["out R2"])
        # Handed over at once; a stall lasted until W2's recheck (0.35 s to 1 s later).
        assert times["in W2"] - last_reader < 0.25, times["in W2"] - last_reader
        assert times["in R1"] > times["leaving W1"] and times["in R2"] > times["leaving W1"]
    assert r.dbsize() == 0


def test_refused_where_waiters_cannot_queue(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, max_connections=2)
    redlock_deco.register_provider("small", client)
    try:
        with pytest.raises(ProviderError, match="max_connections=3"):
            Lock("x", shared=True, provider="small").acquire()
        with Lock("x", provider="small"):  # exclusive locks poll there, as before
            pass
    finally:
        redlock_deco.unregister_provider("small")
        client.close()


def test_grants_are_read_when_the_waiter_woken_to_read_them_leaves(r: redis.Redis) -> None:
    """Waiters on one name time out together (they all wait for the same lease end); the one
    woken to take over reading the grants may be leaving too: it passes the reading on, or a
    grant for another name waits unread until its waiter's recheck (up to a second)."""
    latencies = [_grant_latency(r, f"x{trial}", f"y{trial}") for trial in range(6)]
    assert max(latencies) < 0.4, latencies  # a stall lasted ~0.75 s
    assert r.dbsize() == 0


def _grant_latency(r: redis.Redis, x: str, y: str) -> float:
    """Three readers wait on ``x`` (held by a crashed holder until 0.8 s), a writer on ``y``
    (released at 0.9 s): how long after that release the writer got ``y``."""
    r.set(f"lock:{x}", "crashed:holder:1:dead", px=800)  # nobody will release it
    started = time.monotonic()
    y_holder = Lock(y, ttl=10)
    assert y_holder.acquire(wait=0)
    got_y: list[float] = []

    def read_x() -> None:
        lock = Lock(x, shared=True, ttl=5)
        if lock.acquire(wait=5):
            lock.release()

    def take_y() -> None:
        with Lock(y, ttl=5, wait=5):
            got_y.append(time.monotonic())

    threads = []
    for _ in range(3):
        threads.append(_in_thread(read_x))
        time.sleep(0.02)
    time.sleep(max(0.0, 0.65 - (time.monotonic() - started)))
    threads.append(_in_thread(take_y))  # waits while an x waiter reads the grants
    time.sleep(max(0.0, 0.9 - (time.monotonic() - started)))  # x's lease ended at 0.8
    released = time.monotonic()
    y_holder.release()  # handed to take_y now
    for thread in threads:
        thread.join(10)
    assert got_y
    return got_y[0] - released


def test_a_writer_cut_off_for_a_moment_takes_its_place_back(r: redis.Redis) -> None:
    """A reader arriving while a queued writer's process seems gone (a blip in its grant
    subscription: PUBSUB NUMSUB says 0) drops the writer from the line. The writer, checking
    again, goes back to the head: it was ahead of everyone who queued since."""
    queue = "{lock:doc:14}:queue"
    reading, done = threading.Event(), threading.Event()

    def read() -> None:
        with Lock("doc:14", shared=True, ttl=5):
            reading.set()
            done.wait(15)

    def write() -> None:
        with Lock("doc:14", ttl=5, wait=15):
            pass

    threads = [_in_thread(read)]
    listener = r.pubsub()
    try:
        assert reading.wait(10)
        threads.append(_in_thread(write))
        while not r.exists(queue):
            time.sleep(0.01)
        writer = next(iter(r.zrange(queue, 0, 0)), None)
        assert writer is not None
        # What such a reader leaves behind (the blip itself is a race to reproduce): the
        # writer gone from the line, and another writer, of a live process (one subscribed
        # to its channel), queued after it.
        other = f"other:1:0a1b2c3d:{'e' * 32}"
        listener.subscribe("redlock-deco:other:1:0a1b2c3d")
        r.zrem(queue, writer)
        enqueue(r, queue, other)
        expected = [writer, other.encode()]
        deadline = time.monotonic() + 3  # the writer checks again within a second
        while r.zrange(queue, 0, -1) != expected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert r.zrange(queue, 0, -1) == expected
        r.zrem(queue, other)
    finally:
        listener.close()
        done.set()
        for thread in threads:
            thread.join(15)
    assert r.dbsize() == 0
