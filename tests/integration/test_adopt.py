"""``adopt(token)``: a lease taken in one process, given back in another (a web request
acquires, the worker that finishes the job releases), as redis-py's ``token=`` and
python-redis-lock's ``id=`` allow. Locks, semaphore slots and readers, sync and asyncio."""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.connection
import os
import time

import pytest
import redis
from support.dropped import warns_dropped
from support.flavours import Api

import redlock_deco
from redlock_deco import Lock, LockNotOwned
from redlock_deco import _scripts as scripts
from redlock_deco.testing import FaultProxy, RedisServer


def take_and_leave(url: str, kind: str, pipe: multiprocessing.connection.Connection) -> None:
    """Another process: acquire, send the token, end without releasing (as a request
    handler that handed its lease over to a job would)."""
    redlock_deco.register_provider("default", url)
    primitive = (
        Lock("job", ttl=60, shared=kind == "shared")
        if kind != "semaphore"
        else redlock_deco.Semaphore("job", limit=2, ttl=60)
    )
    assert primitive.acquire(blocking=False)
    lease = primitive.lease
    assert lease is not None
    pipe.send(lease.token)
    pipe.close()
    os._exit(0)  # nothing released, nothing renewed: the lease now waits for its adopter


@pytest.mark.parametrize("kind", ["lock", "shared", "semaphore"])
def test_a_lease_taken_in_one_process_is_released_in_another(
    r: redis.Redis, server: RedisServer, kind: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=take_and_leave, args=(server.url, kind, send))
    child.start()
    assert receive.poll(30)
    token = receive.recv()
    child.join(30)
    assert child.exitcode == 0

    ours = (
        Lock("job", ttl=5, shared=kind == "shared")
        if kind != "semaphore"
        else redlock_deco.Semaphore("job", limit=2, ttl=5)
    )
    assert ours.holders() == 1
    assert ours.adopt(token)
    assert ours.owned() and ours.holders() == 1
    lease = ours.lease
    assert lease is not None and lease.token != token and lease.remaining() > 4  # its own token
    key = "sem:job" if kind == "semaphore" else "lock:job"
    if kind == "lock":
        assert 4_000 < r.pttl(key) <= 5_000  # set to the adopter's ttl in the same step
    assert not redlock_deco.Lock("job", shared=kind == "shared").adopt(token)  # retired
    ours.release()
    assert r.dbsize() == 0
    assert not ours.adopt(token)  # released: the token holds nothing any more
    assert r.dbsize() == 0


def test_adopt_is_false_and_changes_nothing_for_a_token_that_holds_nothing(
    api: Api, r: redis.Redis
) -> None:
    async def scenario(api: Api) -> None:
        holder = api.Lock("held", ttl=30, wait=0)
        assert await holder.acquire()
        pttl = r.pttl("lock:held")
        other = api.Lock("held", ttl=5)
        assert not await other.adopt("somehost:1:00000000:" + "0" * 32)
        assert not await other.adopt(b"not-a-token")
        assert other.lease is None
        with pytest.raises(LockNotOwned):
            await other.release()
        assert pttl - 100 <= r.pttl("lock:held") <= pttl  # untouched
        reader = api.Lock("held", shared=True)
        lease = holder.lease
        assert lease is not None
        assert not await reader.adopt(lease.token)  # a writer's token is no reader's
        assert await holder.owned()
        await holder.release()

    api.run(scenario)
    assert r.dbsize() == 0


def test_a_lease_handed_over_in_process_is_renewed_by_its_adopter(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        giver = api.Lock("handed", ttl=30, wait=0)
        assert await giver.acquire()
        token = await giver.hand_over()
        assert giver.lease is None  # the giver holds nothing, and renews nothing
        with pytest.raises(LockNotOwned, match="cannot hand over"):
            await giver.hand_over()
        with pytest.raises(LockNotOwned):
            await giver.release()
        assert 29_000 < r.pttl("lock:handed") <= 30_000  # not released: it waits for its adopter
        # Renewed every 0.4 s while it lives: 3 s is its ttl 2.5 times over. (A ttl of 0.6 s
        # lapsed once in CI's Valkey leg on a machine loaded 5 to 2: a renewal 0.4 s late.)
        taker = api.Lock("handed", ttl=1.2)
        assert await taker.adopt(token)
        await api.sleep(3)
        assert await taker.owned() and 0 < r.pttl("lock:handed") <= 1200
        await taker.release()

    api.run(scenario)
    assert r.dbsize() == 0


def test_a_handed_over_lease_nobody_adopts_ends_within_its_ttl(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        sem = api.Semaphore("unadopted", limit=2, ttl=0.5, wait=0)
        assert await sem.acquire()
        await sem.hand_over()  # dropped afterwards without a ResourceWarning (it holds nothing)
        await api.sleep(0.8)
        assert await sem.holders() == 0

    api.run(scenario)


def test_adopt_refuses_what_it_cannot_do(api: Api, r: redis.Redis) -> None:
    async def scenario(api: Api) -> None:
        with pytest.raises(TypeError, match=r"lease\.token"):
            await api.Lock("x").adopt(None)
        with pytest.raises(TypeError, match=r"lease\.token"):
            await api.Lock("x").adopt("")
        with pytest.raises(ValueError, match="fencing token"):
            await api.Lock("x", fencing=True).adopt("host:1:00000000:" + "0" * 32)

    api.run(scenario)
    assert r.dbsize() == 0


def drop(objects: list[Lock]) -> None:
    objects.clear()
    gc.collect()


def test_an_adopting_object_collected_unreleased_warns_and_stops_renewing(
    r: redis.Redis,
) -> None:
    giver = Lock("dropped", ttl=30, auto_renew=False)
    assert giver.acquire()
    lease = giver.lease
    assert lease is not None
    takers = [Lock("dropped", ttl=0.5)]
    assert takers[0].adopt(lease.token)
    with warns_dropped():
        drop(takers)
    time.sleep(0.8)
    assert not r.exists("lock:dropped")  # expired within the adopter's ttl
    with pytest.raises(LockNotOwned, match="already ended"):
        giver.release()


def test_a_renewal_of_the_giver_landing_after_the_adoption_touches_nothing(
    r: redis.Redis, server: RedisServer
) -> None:
    """Review 6, F1: a giver's renewal in flight (here stuck behind a stalled network) as it
    handed the lease over landed after the adoption and set the lease back to the giver's
    1 s: a third holder got in while the adopter believed it held for 30 s. The adoption
    retires the old token, so the late renewal finds nothing of its own."""
    with FaultProxy(server.port) as proxy:
        redlock_deco.register_provider("slow", proxy.url + "?socket_timeout=10")
        giver = Lock("stale", ttl=1.0, provider="slow")  # renewed every ~0.33 s
        assert giver.acquire()
        time.sleep(0.2)
        proxy.stall()  # the next renewal is sent, and stuck
        time.sleep(0.3)
        token = giver.hand_over()
        taker = Lock("stale", ttl=30)
        assert taker.adopt(token)
        proxy.resume()  # the stuck renewal lands now
        time.sleep(1.3)  # past the giver's ttl
        assert r.pttl("lock:stale") > 25_000
        assert not Lock("stale", wait=0).acquire()  # nobody else gets in
        assert taker.owned()
        taker.release()
        redlock_deco.unregister_provider("slow")
    assert r.dbsize() == 0


def test_the_readers_marker_is_no_token_to_adopt(r: redis.Redis) -> None:
    """Review 6, F2: while readers hold a name its key holds a marker, which an exclusive
    Lock's adopt() took for a holder's token: its release then deleted the key under live
    readers, and a writer got in beside them."""
    with Lock("doc", shared=True) as reader:
        marker = r.get("lock:doc")
        assert marker is not None
        writer = Lock("doc", wait=0)
        assert not writer.adopt(marker)
        assert reader.owned() and not Lock("doc", wait=0).acquire()
    assert r.dbsize() == 0


def test_an_object_cannot_adopt_what_it_holds_and_a_token_adopts_once(r: redis.Redis) -> None:
    lock = Lock("once", ttl=5)
    assert lock.acquire()
    lease = lock.lease
    assert lease is not None
    with pytest.raises(redlock_deco.LockError, match="already holds"):
        lock.adopt(lease.token)
    token = lock.hand_over()
    first, second = Lock("once", ttl=5), Lock("once", ttl=5)
    assert first.adopt(token)
    assert not second.adopt(token)  # a redelivered job: the token was retired
    first.release()
    assert r.dbsize() == 0


def test_events_close_the_givers_hold_and_open_the_adopters(r: redis.Redis) -> None:
    seen: list[tuple[str, str]] = []

    def listen(event: redlock_deco.LockEvent) -> None:
        seen.append((event.kind, event.key))

    redlock_deco.add_listener(listen)
    try:
        giver = Lock("evented", ttl=5)
        assert giver.acquire()
        taker = Lock("evented", ttl=5)
        assert taker.adopt(giver.hand_over())
        taker.release()
    finally:
        redlock_deco.remove_listener(listen)
    assert [kind for kind, _ in seen] == ["acquired", "released", "acquired", "released"]


def test_repr_says_a_lease_known_to_have_ended_is_not_held(r: redis.Redis) -> None:
    lock = Lock("ended", ttl=0.2, auto_renew=False)
    assert lock.acquire()
    assert repr(lock).endswith("held=True>")
    time.sleep(0.3)
    assert repr(lock).endswith("held=False>")  # expired, by this process's reckoning
    with pytest.raises(LockNotOwned):
        lock.release()


@pytest.mark.parametrize("kind", ["lock", "shared", "semaphore"])
def test_an_adoption_re_sent_after_it_ran_is_still_an_adoption(
    r: redis.Redis, server: RedisServer, kind: str
) -> None:
    """Review 9, 01: an adopt whose reply was lost to a reset, re-sent by the URL client's
    retry, found the old token gone (its own first run had retired it) and answered 0:
    adopt() said False while the key held the adopter's new token, known to nobody, for a
    whole ttl. The adopt scripts answer 1 when the new token holds the lease already."""
    import threading

    def make(provider: str) -> Lock | redlock_deco.Semaphore:
        if kind == "semaphore":
            return redlock_deco.Semaphore("resent", limit=1, ttl=5, provider=provider)
        return Lock("resent", ttl=5, shared=kind == "shared", provider=provider)

    key = (
        "sem:resent"
        if kind == "semaphore"
        else ("{lock:resent}:readers" if kind == "shared" else "lock:resent")
    )

    def holders() -> set[bytes]:
        if r.type(key) == b"zset":
            return set(r.zrange(key, 0, -1))
        value = r.get(key)
        return {value} if value is not None else set()

    with FaultProxy(server.port) as proxy:
        redlock_deco.register_provider("proxied", proxy.url + "?socket_timeout=10")
        giver = make("default")
        assert giver.acquire(wait=0)
        token = giver.hand_over()
        taker = make("proxied")
        taker.holders()  # the proxied connection is open before the fault
        for script in (scripts.LOCK_ADOPT, scripts.SHARED_ADOPT, scripts.SEM_ADOPT):
            r.script_load(script.source)  # a NOSCRIPT reply would be withheld too
        answer: list[bool] = []
        proxy.withhold_replies()
        adopting = threading.Thread(target=lambda: answer.append(taker.adopt(token)))
        adopting.start()
        deadline = time.monotonic() + 5
        while token.encode() in holders() and time.monotonic() < deadline:
            time.sleep(0.005)  # the adoption ran on the server; its reply is withheld
        assert token.encode() not in holders()
        proxy.resume()
        proxy.drop()  # the reply is lost to a reset: the client's retry sends it again
        adopting.join(15)
        assert answer == [True]
        assert taker.owned()
        other = make("default") if kind == "semaphore" else Lock("resent", wait=0)
        assert not other.acquire(wait=0)  # and no writer (no other slot) gets in
        taker.release()
        redlock_deco.unregister_provider("proxied")
    assert r.dbsize() == 0
