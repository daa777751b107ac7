"""Network faults and crashes around the reader-writer lock (``Lock(name, shared=True)``),
through ``FaultProxy`` between the library's client and a real server: mirrors of
tests/test_fault_proxy.py and tests/test_faults.py for shared holders.

- a reader's acquire whose reply is lost leaves no share behind (the background clean-up
  releases it long before its ttl), and a writer then gets in;
- a reader's release whose reply is lost still frees the lock for a writer at once;
- a reader whose renewals cannot get through (connections cut, reconnecting refused) is
  reported lost (``on_lost``, ``lease.lost``, LockLost at its release), and a writer gets in
  once its lease ends -- not before;
- a reader's process killed or stopped mid-hold: a writer gets in within its ttl, the stopped
  call learns LockLost;
- the exclusion checker: processes run readers' and writers' @locked sections, some through
  the proxy while it withholds replies or cuts connections; no cleanly ended writer section
  ever overlaps another cleanly ended section, and every key expires.
After every scenario DBSIZE returns to 0.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.pool import Pool
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from support import shared_stateful_workers as workers

import redlock_deco
from redlock_deco import Lock, LockNotOwned
from redlock_deco._protocol import HANDOFF_MS, QUEUE_WINDOW_MS, SHARED_VALUE
from redlock_deco.testing import FaultProxy, RedisServer

spawn = multiprocessing.get_context("spawn")
NO_RETRY = Retry(NoBackoff(), 0)
SHORT = 0.25  # socket timeout of clients through the proxy
NAME = workers.NAME
KEY = f"lock:{NAME}"
READERS = f"{{{KEY}}}:readers"
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(server.port) as faulty:
        yield faulty


@pytest.fixture
def faulty(proxy: FaultProxy) -> Iterator[redis.Redis]:
    """The "faulty" provider: a client through the proxy, short timeouts, no retries."""
    client = redis.Redis.from_url(
        proxy.url, socket_timeout=SHORT, socket_connect_timeout=SHORT, retry=NO_RETRY
    )
    # Connected first: the handshake's replies are not the ones lost. (Asked again while a
    # busy machine makes the handshake itself outlast SHORT: the README's command timed out
    # here under load, before the test began.)
    deadline = time.monotonic() + 10
    while True:
        try:
            assert client.ping()
            break
        except redis.TimeoutError:
            if time.monotonic() > deadline:
                raise
    redlock_deco.register_provider("faulty", client)
    yield client
    client.close()


def until(condition: Callable[[], bool], within: float) -> float:
    """Seconds until ``condition()`` holds; AssertionError after ``within``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within, f"not within {within} s"
        time.sleep(0.01)
    return time.monotonic() - started


def live_readers(r: redis.Redis) -> list[bytes]:
    seconds, micros = r.time()
    now_ms = seconds * 1000 + micros // 1000
    return [token for token, end in r.zrange(READERS, 0, -1, withscores=True) if end > now_ms]


def writer_gets_in(r: redis.Redis, wait: float) -> None:
    """A direct writer (no fault between it and the server) takes and gives back the lock."""
    writer = Lock(NAME, ttl=5, wait=wait)
    assert writer.acquire(), f"a writer was kept out: {r.get(KEY)!r}, {live_readers(r)}"
    assert r.get(KEY) == writer.lease.token.encode()
    writer.release()


# -- single faults ---------------------------------------------------------------------------


def test_lost_reply_to_a_readers_acquire_leaves_no_share_behind(
    proxy: FaultProxy, faulty: redis.Redis, r: redis.Redis
) -> None:
    reader = Lock(NAME, shared=True, provider="faulty", ttl=30, wait=0)
    proxy.withhold_replies()
    try:
        with pytest.raises(UNREACHABLE):
            reader.acquire()
        assert reader.lease is None
    finally:
        proxy.resume()
    # The share may be there (the script ran, unheard); nobody holds it, so the background
    # clean-up releases it by token long before its 30 s ttl -- as for an exclusive lock.
    took = until(lambda: not live_readers(r) and r.get(KEY) is None, 3.0)
    print(f"\nshare cleaned up {took:.2f} s after the faults ended")
    writer_gets_in(r, wait=0)
    until(lambda: r.dbsize() == 0, 1.0)


def test_lost_reply_to_a_readers_acquire_while_the_proxy_stays_faulty(
    proxy: FaultProxy, faulty: redis.Redis, r: redis.Redis
) -> None:
    """The fault never clears for that client: the share still ends within its ttl (a
    renewer would never renew it: nobody knows it exists)."""
    reader = Lock(NAME, shared=True, provider="faulty", ttl=1.0, wait=0)
    proxy.withhold_replies()
    try:
        started = time.monotonic()
        with pytest.raises(UNREACHABLE):
            reader.acquire()
        until(lambda: not live_readers(r), 1.0 + 0.5)
        writer_gets_in(r, wait=max(0.0, 1.5 - (time.monotonic() - started)))
    finally:
        proxy.heal()
    until(lambda: r.dbsize() == 0, 2.0)


def test_lost_reply_to_a_readers_release_frees_the_lock(
    proxy: FaultProxy, faulty: redis.Redis, r: redis.Redis
) -> None:
    reader = Lock(NAME, shared=True, provider="faulty", ttl=30, wait=0)
    with reader:
        pass  # the release script loaded: a NOSCRIPT answer would be withheld too
    assert reader.acquire()
    token = reader.lease.token
    assert r.get(KEY) == SHARED_VALUE.encode() and live_readers(r) == [token.encode()]
    proxy.withhold_replies()
    try:
        with pytest.raises(UNREACHABLE):
            reader.release()
    finally:
        proxy.heal()
    # The release ran: the share is gone at once, and the reader holds nothing any more.
    assert live_readers(r) == [] and r.get(KEY) is None
    assert reader.lease is None
    with pytest.raises(LockNotOwned):
        reader.release()
    writer_gets_in(r, wait=0)
    until(lambda: r.dbsize() == 0, 1.0)


@pytest.mark.parametrize("how", ["drop and refuse", "stall"])
def test_a_reader_cut_off_from_renewing_is_reported_lost(
    proxy: FaultProxy, faulty: redis.Redis, r: redis.Redis, how: str
) -> None:
    lost: list[Any] = []
    ttl = 0.6
    reader = Lock(
        NAME,
        shared=True,
        provider="faulty",
        ttl=ttl,
        wait=0,
        on_lost=lambda lease: lost.append(lease),
    )
    assert reader.acquire()
    lease = reader.lease
    time.sleep(ttl / 2)  # a renewal or so went through
    assert live_readers(r) == [lease.token.encode()]
    cut = time.monotonic()
    if how == "stall":
        proxy.stall()
    else:
        proxy.refuse(True)
        proxy.drop()
    try:
        # Its share ends within a ttl of the last renewal that got through (before the cut):
        # a direct writer gets in then, not before the share ended.
        took = until(lambda: not live_readers(r), ttl + 0.2)
        writer = Lock(NAME, ttl=5, wait=ttl + 0.5)
        assert writer.acquire()
        assert time.monotonic() - cut <= ttl + 0.6
        # The reader hears of it (on_lost) while it is cut off, and its lease says so.
        until(lambda: bool(lost), ttl + 1.0)
        assert lost == [lease] and lease.lost and lease.remaining() == 0
        print(f"\nshare ended {took:.2f} s after the cut ({how}); on_lost heard")
    finally:
        proxy.heal()
    with pytest.raises(LockNotOwned):
        reader.release()  # loud: the lease had ended (a `with` block raises LockLost)
    assert r.get(KEY) == writer.lease.token.encode()  # and nothing of the writer's was touched
    writer.release()
    until(lambda: r.dbsize() == 0, 2.0)


def test_a_renewal_whose_reply_is_lost_keeps_the_share_consistent(
    proxy: FaultProxy, faulty: redis.Redis, r: redis.Redis
) -> None:
    """Renewals run but their replies are lost for a while: the reader cannot know whether
    its share was extended. While it may still believe it holds it, no writer gets in; once
    it cannot, it must not report the lease as held."""
    ttl = 0.6
    reader = Lock(NAME, shared=True, provider="faulty", ttl=ttl, wait=0)
    assert reader.acquire()
    lease = reader.lease
    proxy.withhold_replies()
    try:
        deadline = time.monotonic() + 2 * ttl
        while time.monotonic() < deadline:
            key, live = r.get(KEY), live_readers(r)
            # Asked after the server: a belief that still stands now stood when the server
            # was read (it only shrinks while no renewal is heard). Asked before, a busy
            # machine's pause between the two read a share that had ended meanwhile, held
            # by the server and the client alike (CI, 3.12 leg).
            believes = not lease.lost and lease.remaining() > 0
            if believes:
                assert key == SHARED_VALUE.encode() and lease.token.encode() in live
            time.sleep(0.02)
    finally:
        proxy.heal()
    # After the faults: either it renewed on (a renewal that landed kept it) or it was lost;
    # in both cases its view matches the server's.
    time.sleep(ttl / 2)
    on_server = lease.token.encode() in live_readers(r)
    if not lease.lost:
        assert on_server, "the reader believes it holds a share the server does not list"
        reader.release()
    else:
        with pytest.raises(LockNotOwned):
            reader.release()
    writer_gets_in(r, wait=ttl + 0.5)
    until(lambda: r.dbsize() == 0, 2.0)


# -- crashed and stopped readers -------------------------------------------------------------


def test_a_killed_readers_share_ends_within_its_ttl(server: RedisServer, r: redis.Redis) -> None:
    ready, out = spawn.Event(), spawn.Queue()
    ttl = 1.0
    holder = spawn.Process(target=workers.hold_shared, args=(server.url, ttl, 30.0, ready, out))
    holder.start()
    try:
        assert ready.wait(30)
        assert len(live_readers(r)) == 1
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        killed = time.monotonic()
        holder.join(10)
        writer = Lock(NAME, ttl=5, wait=ttl + 1.0)
        assert writer.acquire()
        assert time.monotonic() - killed <= ttl + 0.3
        writer.release()
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join(10)
    until(lambda: r.dbsize() == 0, 1.0)


def test_a_stopped_reader_wakes_to_lock_lost_and_spares_the_writer(
    server: RedisServer, r: redis.Redis
) -> None:
    ready, out = spawn.Event(), spawn.Queue()
    holder = spawn.Process(target=workers.hold_shared, args=(server.url, 0.5, 1.0, ready, out))
    holder.start()
    try:
        assert ready.wait(30)
        os.kill(holder.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        with Lock(NAME, ttl=10, wait=3) as lock:  # its share ran out: the writer gets in
            os.kill(holder.pid, signal.SIGCONT)  # type: ignore[arg-type]
            assert out.get(timeout=10) == "LockLost"
            assert lock.owned() and r.get(KEY) == lock.lease.token.encode()
    finally:
        os.kill(holder.pid, signal.SIGCONT)  # type: ignore[arg-type]
        holder.join(10)
    until(lambda: r.dbsize() == 0, 1.0)


# -- the exclusion checker under faults ------------------------------------------------------

TTL = 0.5
# (through the proxy?, reader?, redis-py retries)
ROLES = [
    (True, True, 0),
    (True, False, 0),
    (True, True, 1),
    (False, False, 0),
    (False, True, 0),
    (False, True, 0),
]
LONG_SHARE = {True: 0.25, False: 0.0}


def withheld_replies(proxy: FaultProxy) -> None:
    for _ in range(3):
        proxy.withhold_replies()
        time.sleep(TTL * 1.4)
        proxy.resume()
        time.sleep(0.3)


def dropped_connections(proxy: FaultProxy) -> None:
    for n in range(10):
        proxy.refuse(n in (4, 5, 6))
        proxy.drop()
        time.sleep(0.25)


def stalls(proxy: FaultProxy) -> None:
    for length in (1.6, 2.4):
        proxy.stall()
        time.sleep(TTL * length)
        proxy.resume()
        time.sleep(0.4)


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    with spawn.Pool(len(ROLES)) as processes:
        yield processes


def conflicts(events: list[str], outcomes: dict[str, str]) -> list[list[str]]:
    """Moments at which a cleanly ended writer section was inside together with any other
    cleanly ended section."""
    inside: dict[str, str] = {}
    found = []
    for event in events:
        if event[0] == "+":
            mode, sid = event[1], event[2:]
            if outcomes.get(sid) != "clean":
                continue
            inside[sid] = mode
            if "W" in inside.values() and len(inside) > 1:
                found.append(sorted(f"{m}{s}" for s, m in inside.items()))
        else:
            inside.pop(event[1:], None)
    return found


def test_the_checker_tells_writers_overlaps() -> None:
    outcomes = {"a": "clean", "b": "clean", "c": "clean", "d": "lost"}
    assert conflicts(["+Ra", "+Rb", "-a", "-b", "+Wc", "+Rd", "-d", "-c"], outcomes) == []
    assert conflicts(["+Ra", "+Wc", "-a", "-c"], outcomes) == [["Ra", "Wc"]]


@pytest.mark.parametrize(
    "faults", [withheld_replies, dropped_connections, stalls], ids=lambda f: f.__name__
)
def test_writers_never_overlap_readers_under_network_faults(
    pool: Pool,
    server: RedisServer,
    proxy: FaultProxy,
    r: redis.Redis,
    faults: Callable[[FaultProxy], None],
) -> None:
    run = uuid.uuid4().hex[:8]
    spec = {"checker": server.url, "ttl": TTL, "events": f"check:{run}:events",
            "ready": f"check:{run}:ready", "stop": f"check:{run}:stop"}  # fmt: skip
    jobs = [
        (spec, {"name": f"w{n}", "url": proxy.url if proxied else server.url, "shared": reader,
                "timeout": SHORT if proxied else 1.0, "retries": retries,
                "long": LONG_SHARE[proxied]})
        for n, (proxied, reader, retries) in enumerate(ROLES)
    ]  # fmt: skip
    running = pool.starmap_async(workers.rw_sections, jobs)
    try:
        deadline = time.monotonic() + 30
        while int(r.get(spec["ready"]) or 0) < len(jobs):
            if running.ready():
                running.get()
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        time.sleep(0.3)
        faults(proxy)
        proxy.heal()
        time.sleep(0.5)
    finally:
        proxy.heal()
        r.set(spec["stop"], 1)
    results = running.get(timeout=30)
    events = [event.decode() for event in r.lrange(spec["events"], 0, -1)]
    outcomes = {sid: outcome for result in results for sid, outcome in result["sections"].items()}
    counts: dict[str, Counter[str]] = {"R": Counter(), "W": Counter()}
    for (_, reader, _), result in zip(ROLES, results, strict=True):
        side = counts["R" if reader else "W"]
        side.update(result["sections"].values())
        side.update(busy=result["busy"], failed=result["failed"])
    together = sum(1 for e in events if e.startswith("+R"))
    print(f"\n{faults.__name__}: readers {dict(counts['R'])}, writers {dict(counts['W'])}, "
          f"{together} read sections")  # fmt: skip
    assert not conflicts(events, outcomes)
    assert counts["R"]["clean"] and counts["W"]["clean"]
    r.delete(spec["events"], spec["ready"], spec["stop"])
    within = max(TTL, HANDOFF_MS / 1000, QUEUE_WINDOW_MS / 1000) + 0.5
    until(lambda: r.dbsize() == 0, within)
