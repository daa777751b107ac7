"""``Lock``: acquire/release/extend/locked/owned, ownership per thread, interop with
redis-py's Lock on the same key, both decode_responses modes, NOSCRIPT fallback."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from redlock_deco import Lock, LockLost, LockNotAcquired, LockNotOwned, locked
from redlock_deco.testing import RedisServer


@pytest.mark.usefixtures("decode")
def test_acquire_release_locked_owned(r: redis.Redis) -> None:
    lock = Lock("order:7", ttl=5, wait=0)
    assert not lock.locked() and not lock.owned()
    assert lock.acquire()
    assert lock.locked() and lock.owned()
    token = r.get("lock:order:7")
    assert token is not None and b":" in token and len(token.rsplit(b":", 1)[1]) == 32
    assert 4000 < r.pttl("lock:order:7") <= 5000
    lock.release()
    assert not lock.locked() and not lock.owned()
    assert r.dbsize() == 0


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


@pytest.mark.usefixtures("decode")
def test_context_manager_and_not_acquired(r: redis.Redis) -> None:
    with Lock("job", ttl=5) as lock:
        assert lock.owned()
        assert in_thread(lambda: Lock("job", wait=0.05).acquire()) is False
        error = in_thread(lambda: enter_and_leave(Lock("job", wait=0)))
        assert isinstance(error, LockNotAcquired)
        assert error.key == "lock:job" and error.name == "job"
    assert in_thread(lambda: enter_and_leave(Lock("job", wait=0))) == "entered"
    assert r.dbsize() == 0


def test_release_by_non_owner_raises_and_deletes_nothing(r: redis.Redis) -> None:
    lock = Lock("a", ttl=5)
    with pytest.raises(LockNotOwned, match="does not hold"):
        lock.release()
    lock.acquire()
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            Lock("a").release()
        except LockNotOwned as exc:
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(5)
    assert len(errors) == 1
    assert r.exists("lock:a")
    lock.release()


def test_extend_resets_the_lease_and_later_renewals_keep_it(r: redis.Redis) -> None:
    lock = Lock("e", ttl=2, auto_renew=False)
    lock.acquire()
    lock.extend(60)
    assert 59000 < r.pttl("lock:e") <= 60000
    lock.extend()
    assert 1000 < r.pttl("lock:e") <= 2000
    lock.release()
    with pytest.raises(LockNotOwned):
        lock.extend()
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(0)


def test_release_after_expiry_is_not_owned_and_spares_the_new_holder(r: redis.Redis) -> None:
    lock = Lock("x", ttl=0.1, auto_renew=False)
    lock.acquire()
    time.sleep(0.2)
    r.set("lock:x", "someone-else", px=5000)
    with pytest.raises(LockNotOwned, match="already ended"):
        lock.release()
    assert r.get("lock:x") == b"someone-else"


def test_reentrant_per_thread_and_shared_by_lock_objects(r: redis.Redis) -> None:
    a, b = Lock("re", ttl=5), Lock("re", ttl=5)
    assert a.acquire(wait=0)
    assert b.acquire(wait=0)  # same thread: counts, no second lease
    b.release()
    assert r.exists("lock:re") and a.owned()
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
    assert Lock("shared", wait=0).acquire()
    Lock("shared").release()


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


def test_noscript_fallback_after_script_flush(r: redis.Redis) -> None:
    with Lock("ns", wait=0):
        pass
    r.script_flush()
    with Lock("ns", wait=0):
        pass
    assert r.dbsize() == 0


def test_lock_lost_in_with_block_is_raised(r: redis.Redis) -> None:
    with pytest.raises(LockLost) as info, Lock("gone", ttl=5):
        r.delete("lock:gone")
    assert info.value.key == "lock:gone"


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
