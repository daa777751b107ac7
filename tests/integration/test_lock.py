"""``Lock``: acquire/release/extend/locked/owned, ownership per thread, interop with
redis-py's Lock on the same key, both decode_responses modes, NOSCRIPT fallback."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from redlock_deco import Lock, LockNotAcquired, LockNotOwned, locked
from redlock_deco.testing import RedisServer


def in_thread(fn: Callable[[], object]) -> object:
    """Run ``fn`` in another thread (another owner); return its result or exception."""
    out: list[object] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join(10)
    return out[0]


def enter_and_leave(lock: Lock) -> str:
    with lock:
        return "entered"


def test_extend_resets_the_lease_and_later_renewals_keep_it(r: redis.Redis) -> None:
    lock = Lock("e", ttl=2, auto_renew=False)
    lock.acquire()
    lock.extend(to=60)
    assert 59000 < r.pttl("lock:e") <= 60000
    lock.extend()
    assert 1000 < r.pttl("lock:e") <= 2000
    lock.release()
    with pytest.raises(LockNotOwned):
        lock.extend()
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(to=0)


def test_release_after_expiry_is_not_owned_and_spares_the_new_holder(r: redis.Redis) -> None:
    lock = Lock("x", ttl=0.1, auto_renew=False)
    lock.acquire()
    time.sleep(0.2)
    r.set("lock:x", "someone-else", px=5000)
    with pytest.raises(LockNotOwned, match="already ended"):
        lock.release()
    assert r.get("lock:x") == b"someone-else"


def test_blocks_re_enter_per_thread_across_objects_bare_acquires_do_not(r: redis.Redis) -> None:
    a, b = Lock("re", ttl=5), Lock("re", ttl=5)
    with a:
        with b:  # a nested block of the same thread, through any object: counts, no lease
            assert r.exists("lock:re") and b.owned()
        assert r.exists("lock:re") and a.owned()
    assert not r.exists("lock:re")
    assert a.acquire(wait=0)
    assert not b.acquire(wait=0)  # a bare acquire belongs to its object: b is another one
    assert not a.acquire(wait=0)  # and a second acquire of a waits, as threading.Lock's does
    a.release()
    assert not r.exists("lock:re")


@pytest.mark.usefixtures("decode")
def test_interop_redis_py_lock_excludes_ours(r: redis.Redis, server: RedisServer) -> None:
    theirs = redis.lock.Lock(server.client(), "lock:shared", timeout=5)
    assert theirs.acquire(blocking=False)
    assert not Lock("shared", wait=0).acquire()

    @locked("shared", wait=0.05)
    def f() -> None: ...

    with pytest.raises(LockNotAcquired):
        f()
    theirs.release()
    ours = Lock("shared", wait=0)
    assert ours.acquire()
    ours.release()


@pytest.mark.usefixtures("decode")
def test_interop_ours_excludes_redis_py_lock(server: RedisServer) -> None:
    theirs = redis.lock.Lock(server.client(), "lock:shared2", timeout=5, blocking_timeout=0.05)
    with Lock("shared2"):
        assert not theirs.acquire()
    assert theirs.acquire()
    theirs.release()


def test_waiting_for_a_redis_py_holder_wakes_when_it_expires(server: RedisServer) -> None:
    theirs = redis.lock.Lock(server.client(), "lock:rp", timeout=0.3)
    theirs.acquire()
    started = time.monotonic()
    with Lock("rp", wait=3):
        waited = time.monotonic() - started
    assert 0.2 < waited < 0.5


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ttl": 0}, ValueError),
        ({"ttl": -1}, ValueError),
        ({"ttl": float("nan")}, ValueError),
        ({"wait": -0.1}, ValueError),
        ({"ttl": "5"}, TypeError),
        ({"auto_renew": 1}, TypeError),
        ({"provider": ""}, TypeError),
    ],
)
def test_bad_options(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        Lock("x", **kwargs)  # type: ignore[arg-type]


def test_ownership_is_per_object_as_well_as_per_thread(r: redis.Redis) -> None:
    a, b = Lock("mine", ttl=5), Lock("mine", ttl=5)
    assert a.acquire(wait=0)
    assert a.owned() and not b.owned()  # held by this object, not by any object of that name
    with pytest.raises(LockNotOwned):
        b.release()
    assert r.exists("lock:mine")  # b deleted nothing
    a.release()
    assert r.dbsize() == 0


def test_repr_shows_name_kind_key_and_whether_this_object_holds_it(r: redis.Redis) -> None:
    from redlock_deco import Semaphore

    lock = Lock("order:7", wait=0)
    assert (
        repr(lock) == "<redlock_deco.Lock name='order:7' kind='lock' key='lock:order:7' held=False>"
    )
    assert lock.acquire()
    assert repr(lock).endswith("held=True>")
    assert in_thread(lambda: repr(lock).endswith("held=True>"))  # the object's, any thread
    lock.release()
    assert repr(lock).endswith("held=False>")
    with Lock("order:7", shared=True) as reader:
        assert repr(reader) == (
            "<redlock_deco.Lock name='order:7' kind='shared' key='lock:order:7' held=True>"
        )
        assert in_thread(lambda: repr(reader).endswith("held=False>"))  # this thread's block
    with Semaphore("api", limit=3) as sem:
        assert repr(sem) == (
            "<redlock_deco.Semaphore name='api' kind='semaphore' limit=3 key='sem:api' held=True>"
        )
    import redlock_deco.asyncio

    assert repr(redlock_deco.asyncio.Semaphore("api", limit=2)) == (
        "<redlock_deco.asyncio.Semaphore name='api' kind='semaphore' limit=2 key='sem:api' "
        "held=False>"
    )
