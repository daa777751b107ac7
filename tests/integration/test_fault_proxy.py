"""Network faults between clients and a running server, through ``FaultProxy``.

First the proxy itself: each fault does what it says, seen by a real redis-py client with
short timeouts while a direct client watches the server. Then the exclusion checker: worker
processes run @locked / @limited sections, some through the proxy and some directly, while
the proxy delays, stalls, drops and swallows their traffic. Sections log their entry and exit
on a direct connection; sections whose call returned normally must never have been inside
more than ``limit`` at once (sections that ended in LockLost may overlap: that is what
LockLost reports), and every key the library wrote must expire.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
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
from support import workers

from redlock_deco._protocol import HANDOFF_MS, QUEUE_WINDOW_MS
from redlock_deco.testing import FaultProxy, RedisServer

spawn = multiprocessing.get_context("spawn")
NO_RETRY = Retry(NoBackoff(), 0)  # redis-py 8 would otherwise retry for seconds
SHORT = 0.25  # socket timeout of clients through the proxy


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(server.port) as faulty:
        yield faulty


@pytest.fixture
def through(proxy: FaultProxy) -> Iterator[redis.Redis]:
    """A client through the proxy: short timeouts, no retries."""
    client = redis.Redis.from_url(
        proxy.url, socket_timeout=SHORT, socket_connect_timeout=SHORT, retry=NO_RETRY
    )
    yield client
    client.close()


def timed(call: Callable[[], object]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


# -- the proxy ----------------------------------------------------------------------------


def test_forwards_until_closed(server: RedisServer, r: redis.Redis) -> None:
    with FaultProxy(server.port) as proxy:
        client = redis.Redis.from_url(proxy.url, socket_timeout=SHORT, retry=NO_RETRY)
        assert client.set("k", "v") and r.get("k") == b"v"
        assert proxy.connections() == 1
        client.close()
    with pytest.raises(redis.exceptions.ConnectionError):  # the port is closed with it
        redis.Redis(port=proxy.port, socket_connect_timeout=SHORT, retry=NO_RETRY).ping()


def test_latency_delays_replies_of_commands_that_ran(
    proxy: FaultProxy, through: redis.Redis, r: redis.Redis
) -> None:
    assert through.ping()  # connected first: the handshake has round trips of its own
    proxy.latency(0.1)
    assert 0.1 <= timed(through.ping) < 0.1 + SHORT
    proxy.latency(SHORT * 2)
    with pytest.raises(redis.exceptions.TimeoutError):
        through.incr("n")
    assert r.get("n") == b"1"  # the command ran; only its reply was late
    proxy.latency(0)
    assert timed(through.ping) < 0.1


def test_stall_holds_traffic_while_the_server_serves_others(
    proxy: FaultProxy, through: redis.Redis, r: redis.Redis
) -> None:
    assert through.ping()
    proxy.stall()
    with pytest.raises(redis.exceptions.TimeoutError):
        through.incr("n")
    assert r.get("n") is None and r.ping()  # held back, and the server itself runs
    proxy.resume()
    # redis-py gave that connection up, but its held INCR still arrives, as a late packet would.
    deadline = time.monotonic() + 2
    while r.get("n") != b"1":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert through.incr("n") == 2


def test_withheld_replies_run_their_commands(
    proxy: FaultProxy, through: redis.Redis, r: redis.Redis
) -> None:
    assert through.ping()  # connected first, or the handshake's replies are the ones lost
    proxy.withhold_replies()
    with pytest.raises(redis.exceptions.TimeoutError):
        through.incr("n")
    assert r.get("n") == b"1"  # it ran; the client never heard
    proxy.resume()
    assert through.incr("n") == 2  # on a fresh connection: redis-py dropped the old one


def test_drop_resets_connections_at_once(proxy: FaultProxy, r: redis.Redis) -> None:
    client = redis.Redis.from_url(proxy.url, socket_timeout=5, retry=NO_RETRY)
    failed: list[BaseException] = []

    def blocked() -> None:
        try:
            client.blpop(["never"], timeout=3)
        except redis.exceptions.ConnectionError as exc:
            failed.append(exc)

    waiter = threading.Thread(target=blocked)
    waiter.start()
    # Blocked in BLPOP on the server, not merely connected: a drop during the handshake
    # let the client connect again and block the whole 3 s (seen on redis-py 5.0.1).
    deadline = time.monotonic() + 10
    while r.info("clients")["blocked_clients"] == 0:
        assert time.monotonic() < deadline, "the BLPOP never blocked"
        time.sleep(0.01)
    proxy.drop()
    waiter.join(1)  # well before the BLPOP's 3 s or the socket's 5 s
    assert not waiter.is_alive() and failed and proxy.connections() == 0
    assert client.ping()  # new connections are served again
    client.close()


def test_refuse_turns_away_new_connections_only(proxy: FaultProxy, through: redis.Redis) -> None:
    assert through.ping()
    proxy.refuse(True)
    assert through.ping()  # an open connection keeps working
    newcomer = redis.Redis.from_url(proxy.url, socket_connect_timeout=SHORT, retry=NO_RETRY)
    with pytest.raises(redis.exceptions.ConnectionError):
        newcomer.ping()
    proxy.refuse(False)
    assert newcomer.ping()
    newcomer.close()


def test_faults_switched_from_many_threads(proxy: FaultProxy, through: redis.Redis) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def toggle(fault: Callable[[], None]) -> None:
        try:
            while not stop.is_set():
                fault()
                proxy.heal()
        except BaseException as exc:  # (reported here: left to the thread, it failed a later
            errors.append(exc)  # test of this worker -- CI, a busy machine)

    faults = [proxy.stall, proxy.drop, proxy.withhold_replies, lambda: proxy.latency(0.01)]
    threads = [threading.Thread(target=toggle, args=(fault,)) for fault in faults]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        # (redis-py's TimeoutError is no ConnectionError: a stall's read that timed out
        # failed the test -- CI)
        with contextlib.suppress(redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            through.incr("n")
    stop.set()
    for thread in threads:
        thread.join(15)
    assert not errors, errors
    proxy.heal()
    assert through.ping()  # and the proxy's own thread raised nothing (filterwarnings=error)


# -- the exclusion checker under faults -----------------------------------------------------

TTL = 0.5
# (through the proxy?, asyncio?, redis-py retries): proxied workers suffer the faults, and
# often hold the lease across one; direct ones keep trying with short sections, so a
# partitioned holder's expired lease is really taken while its call still runs.
ROLES = [(True, False, 0), (True, True, 1), (True, False, 1), (False, False, 0), (False, True, 0)]
LONG_SHARE = {True: 0.25, False: 0.0}  # the share of sections that outlast the ttl


def latency_spikes(proxy: FaultProxy) -> None:
    for delay in (0.05, 0.4, 0.15, 0.6, 0.0, 0.3):  # some above the 0.25 s socket timeout
        proxy.latency(delay)
        time.sleep(0.6)


def stalls(proxy: FaultProxy) -> None:
    for length in (1.6, 2.4, 1.2):  # in ttls: proxied leases end while their calls run
        proxy.stall()
        time.sleep(TTL * length)
        proxy.resume()
        time.sleep(0.4)


def withheld_replies(proxy: FaultProxy) -> None:
    for _ in range(4):  # acquires, renewals and releases run, unheard
        proxy.withhold_replies()
        time.sleep(TTL * 1.4)
        proxy.resume()
        time.sleep(0.3)


def dropped_connections(proxy: FaultProxy) -> None:
    for n in range(14):
        proxy.refuse(n in (6, 7, 8))  # a stretch where reconnecting fails too
        proxy.drop()
        time.sleep(0.25)


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    """Worker processes, started once for every scenario (spawning is the slow part)."""
    with spawn.Pool(len(ROLES)) as processes:
        yield processes


def overcrowded(events: list[str], outcomes: dict[str, str], limit: int) -> list[list[str]]:
    """Moments at which more than ``limit`` sections whose calls ended clean were inside."""
    inside: set[str] = set()
    found = []
    for event in events:
        sid = event[1:]
        if outcomes.get(sid) != "clean":
            continue
        if event[0] == "+":
            inside.add(sid)
            if len(inside) > limit:
                found.append(sorted(inside))
        else:
            inside.discard(sid)
    return found


def crowd(events: list[str], outcomes: dict[str, str], limit: int) -> Counter[str]:
    """Outcomes of the sections that were inside with more than ``limit`` at once, whatever
    their outcome: the overlaps the faults caused, and how their calls reported them."""
    inside: set[str] = set()
    seen: set[str] = set()
    for event in events:
        if event[0] == "+":
            inside.add(event[1:])
            if len(inside) > limit:
                seen |= inside
        else:
            inside.discard(event[1:])
    return Counter(outcomes.get(sid, "?") for sid in seen)


def test_the_checker_tells_lost_overlaps_from_real_ones() -> None:
    events = ["+a", "+b", "-a", "-b", "+c", "+d", "-c", "-d"]
    outcomes = {"a": "clean", "b": "lost", "c": "clean", "d": "clean"}
    assert overcrowded(events, outcomes, limit=1) == [["c", "d"]]
    assert overcrowded(events, outcomes, limit=2) == []
    assert crowd(events, outcomes, limit=1) == Counter(clean=3, lost=1)


def seconds_until_empty(r: redis.Redis, within: float) -> float:
    started = time.monotonic()
    while r.dbsize():
        if time.monotonic() - started > within:
            keys = sorted(key.decode() for key in r.keys("*"))
            raise AssertionError(f"keys still there after {within} s: {keys}")
        time.sleep(0.02)
    return time.monotonic() - started


def run_workers(
    pool: Pool,
    server: RedisServer,
    proxy: FaultProxy,
    limit: int,
    faults: Callable[[FaultProxy], None],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start a worker per role, inject ``faults`` once they all run, heal, stop them."""
    run = uuid.uuid4().hex[:8]
    spec = {"checker": server.url, "ttl": TTL, "limit": limit,
            "events": f"check:{run}:events", "ready": f"check:{run}:ready",
            "stop": f"check:{run}:stop"}  # fmt: skip
    jobs = [
        (spec, {"name": f"w{n}", "url": proxy.url if proxied else server.url,
                "timeout": SHORT if proxied else 1.0, "async": flavour, "retries": retries,
                "long": LONG_SHARE[proxied]})
        for n, (proxied, flavour, retries) in enumerate(ROLES)
    ]  # fmt: skip
    running = pool.starmap_async(workers.guarded_sections, jobs)
    checker = server.client()
    try:
        deadline = time.monotonic() + 30
        while int(checker.get(spec["ready"]) or 0) < len(jobs):
            if running.ready():
                running.get()  # a worker failed as it started: raise its error here
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        time.sleep(0.3)  # a healthy start: every worker has taken its turn
        faults(proxy)
        proxy.heal()
        time.sleep(0.5)  # a healthy end, so the sections after the faults are checked too
    finally:
        # Always stopped, or a failed scenario's workers would keep the shared pool busy.
        proxy.heal()
        checker.set(spec["stop"], 1)
        checker.close()
    return spec, running.get(timeout=30)


def tally(results: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {"proxied": Counter(), "direct": Counter()}
    for (proxied, _, _), result in zip(ROLES, results, strict=True):
        side = counts["proxied" if proxied else "direct"]
        side.update(result["sections"].values())
        side.update(busy=result["busy"], failed=result["failed"])
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1, 2], ids=["locked", "limited-2"])
@pytest.mark.parametrize(
    "faults",
    [latency_spikes, stalls, withheld_replies, dropped_connections],
    ids=lambda fault: fault.__name__,
)
def test_valid_leases_never_overlap_under_network_faults(
    pool: Pool,
    server: RedisServer,
    proxy: FaultProxy,
    r: redis.Redis,
    limit: int,
    faults: Callable[[FaultProxy], None],
) -> None:
    spec, results = run_workers(pool, server, proxy, limit, faults)
    events = [event.decode() for event in r.lrange(spec["events"], 0, -1)]
    outcomes = {sid: outcome for result in results for sid, outcome in result["sections"].items()}
    counts = tally(results)
    overlapping = crowd(events, outcomes, limit)
    print(f"\n{faults.__name__} limit={limit}: {dict(counts['proxied'])} through the proxy, "
          f"{dict(counts['direct'])} direct; in overlaps: {dict(overlapping)}")  # fmt: skip
    assert not overcrowded(events, outcomes, limit)
    assert counts["proxied"]["clean"] and counts["direct"]["clean"]  # both sides made progress
    r.delete(spec["events"], spec["ready"], spec["stop"])
    # Leases end within the ttl (a hand-off lease within HANDOFF_MS); a queue within its
    # window after its last join (both before the workers stopped); 0.5 s of slack.
    within = max(TTL, HANDOFF_MS / 1000, QUEUE_WINDOW_MS / 1000) + 0.5
    print(f"every key gone {seconds_until_empty(r, within=within):.2f} s later")


# -- a release whose reply a reset took ----------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_release_re_sent_after_it_ran_is_still_a_clean_release(
    proxy: FaultProxy, r: redis.Redis, flavour: str
) -> None:
    """Review 5, r01: the release runs, the connection is reset before its reply arrives, and
    the URL client's retry sends it again; the second sending finds the lease gone (the
    first released it). That is a clean release, not a LockLost."""
    import asyncio

    import redlock_deco
    import redlock_deco.asyncio

    redlock_deco.register_provider("proxied", proxy.url)
    with redlock_deco.Lock("warm", provider="proxied"):
        pass  # the scripts loaded: a NOSCRIPT answer would be withheld too
    name = f"resent-{flavour}"

    def released_on_the_server() -> None:
        deadline = time.monotonic() + 5
        while r.exists(f"lock:{name}"):
            assert time.monotonic() < deadline, "the withheld release never ran"
            time.sleep(0.005)
        proxy.resume()
        proxy.drop()  # the reply was withheld: the client sees a reset, and retries

    if flavour == "sync":
        lock = redlock_deco.Lock(name, provider="proxied", ttl=30)
        assert lock.acquire()
        proxy.withhold_replies()
        watcher = threading.Thread(target=released_on_the_server)
        watcher.start()
        try:
            lock.release()  # raised LockNotOwned ("it had ended") before the fix
        finally:
            watcher.join(10)
    else:

        async def scenario() -> None:
            watcher = None
            try:
                async with redlock_deco.asyncio.Lock(name, provider="proxied", ttl=30):
                    proxy.withhold_replies()
                    watcher = asyncio.create_task(asyncio.to_thread(released_on_the_server))
                # the block's exit raised LockLost before the fix; on redis-py 5.0, whose
                # asyncio client retried nothing not named in retry_on_error, the reset's
                # ConnectionError (review 15)
            finally:
                if watcher is not None:
                    await watcher
                await redlock_deco.aclose()

        asyncio.run(scenario())
    assert not r.exists(f"lock:{name}")


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_an_acquire_re_sent_after_it_ran_acquires(
    proxy: FaultProxy, r: redis.Redis, flavour: str
) -> None:
    """Review 15: the acquire runs, a reset takes its reply, and the URL client's retry sends
    it again, which finds its own token holding the key: acquired, no error. (redis-py 5.0's
    asyncio client raised the ConnectionError instead: it retried only errors named in
    retry_on_error, which the URL clients did not set.)"""
    import asyncio

    import redlock_deco
    import redlock_deco.asyncio

    redlock_deco.register_provider("proxied", proxy.url)
    warm = redlock_deco.Lock("warm", provider="proxied")
    assert warm.acquire(wait=0)  # the acquire script loaded (a `with` sends a plain SET NX):
    warm.release()  # a NOSCRIPT answer would be withheld too
    name = f"resent-acquire-{flavour}"

    def acquired_on_the_server() -> None:
        deadline = time.monotonic() + 5
        while not r.exists(f"lock:{name}"):
            assert time.monotonic() < deadline, "the withheld acquire never ran"
            time.sleep(0.005)
        proxy.resume()
        proxy.drop()  # the reply was withheld: the client sees a reset, and retries

    watcher = threading.Thread(target=acquired_on_the_server)
    try:
        if flavour == "sync":
            proxy.withhold_replies()
            watcher.start()
            lock = redlock_deco.Lock(name, provider="proxied", ttl=30)
            assert lock.acquire(wait=0)
            watcher.join(10)
            token = r.get(f"lock:{name}")
            lock.release()
        else:

            async def scenario() -> bytes | None:
                try:
                    warmed = redlock_deco.asyncio.Lock("warm", provider="proxied")
                    assert await warmed.acquire(wait=0)  # this loop's client connected
                    await warmed.release()
                    proxy.withhold_replies()
                    watcher.start()
                    lock = redlock_deco.asyncio.Lock(name, provider="proxied", ttl=30)
                    assert await lock.acquire(wait=0)
                    watcher.join(10)
                    held = r.get(f"lock:{name}")
                    await lock.release()
                    return held
                finally:
                    await redlock_deco.aclose()

            token = asyncio.run(scenario())
    finally:
        proxy.resume()
        if watcher.is_alive():
            watcher.join(10)
    assert token is not None  # it held the key its first sending took
    assert not r.exists(f"lock:{name}")
