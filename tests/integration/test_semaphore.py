"""``Semaphore`` and ``@limited``: the bound across processes, crash recovery, server-clock
leases, prompt wake-ups, no key leaks, and everything ``@locked`` accepts."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis
from support import workers

from redlock_deco import (
    LockNotAcquired,
    Semaphore,
    limited,
)
from redlock_deco.testing import RedisServer

spawn = multiprocessing.get_context("spawn")


def wait_for_empty(r: redis.Redis, seconds: float = 5.0) -> int:
    deadline = time.monotonic() + seconds
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.01)
    return int(r.dbsize())


@pytest.mark.slow
def test_bound_across_processes_is_reached_and_never_exceeded(
    server: RedisServer, r: redis.Redis
) -> None:
    procs, limit = 6, 3
    with spawn.Pool(procs) as pool:
        peaks = pool.starmap(workers.gauge_many, [(server.url, "g", limit, 12, 0.02)] * procs)
    assert max(peaks) == limit  # at most the limit, and the limit is actually reached
    r.delete("inside:g")
    assert wait_for_empty(r) == 0


def test_every_key_carries_an_expiry(r: redis.Redis) -> None:
    with Semaphore("exp", limit=1, ttl=5):
        waiter = threading.Thread(target=lambda: Semaphore("exp", limit=1, wait=0.3).acquire())
        waiter.start()
        time.sleep(0.1)
        keys = r.keys("*")
        assert len(keys) == 3  # holders zset, its limit, the waiter zset
        assert all(0 < r.pttl(k) <= 5000 for k in keys)
        waiter.join(5)
    assert wait_for_empty(r) == 0


def test_skip_and_wait_zero() -> None:
    calls: list[str] = []

    @limited("busy", limit=1, wait=0)
    def strict() -> None:
        calls.append("strict")

    @limited("busy", limit=1, wait=0.05, on_busy="skip")
    def lenient() -> str:
        calls.append("lenient")
        return "ran"

    with Semaphore("busy", limit=1):
        with pytest.raises(LockNotAcquired) as info:
            threading_result(strict)
        assert info.value.key == "sem:busy"
        assert threading_result(lenient) is None
    assert calls == []
    assert lenient() == "ran"


def test_a_semaphore_nested_in_its_own_slot_is_told_it_waited_for_itself() -> None:
    """Review 57 (wording): semaphores do not re-enter, so a section nested in one holding
    the only slot waits for its own; the error said the slot "is held by someone else"."""
    with Semaphore("mine", limit=1):
        nested = Semaphore("mine", limit=1, wait=0.1)
        with pytest.raises(LockNotAcquired) as info, nested:
            pass  # (not entered: the slot is this thread's own)
    assert "this thread or task itself" in str(info.value), info.value
    assert "someone else" not in str(info.value)


def threading_result(fn: Any) -> Any:
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as exc:
            out.append(("err", exc))

    t = threading.Thread(target=target)
    t.start()
    t.join(10)
    kind, value = out[0]
    if kind == "err":
        raise value
    return value


def test_prompt_wake_up_on_release(r: redis.Redis) -> None:
    holder = Semaphore("wake", limit=1, ttl=10)
    holder.acquire()
    got: list[float] = []
    t = threading.Thread(target=lambda: got.append(_timed_enter("wake")))
    t.start()
    while not r.exists("{sem:wake}:queue"):
        time.sleep(0.001)
    released = time.perf_counter()
    holder.release()
    t.join(5)
    assert got[0] - released < 0.05


def _timed_enter(name: str) -> float:
    with Semaphore(name, limit=1, wait=5):
        return time.perf_counter()


def test_waiter_wakes_when_a_dead_holders_lease_ends(r: redis.Redis) -> None:
    seconds, micros = r.time()
    now_ms = seconds * 1000 + micros // 1000
    r.zadd("sem:dead", {"gone-host:1:" + "0" * 32: now_ms + 400})
    r.pexpire("sem:dead", 400)
    started = time.monotonic()
    with Semaphore("dead", limit=1, wait=5):
        waited = time.monotonic() - started
    assert 0.35 < waited < 0.5, waited


@pytest.mark.slow
def test_sigkilled_holder_loses_its_slot_within_ttl(server: RedisServer) -> None:
    ready = spawn.Event()
    holder = spawn.Process(target=workers.hold_slot_forever, args=(server.url, "crash", 1.0, ready))
    holder.start()
    try:
        assert ready.wait(30)
        time.sleep(1.3)  # renewed past its ttl
        assert Semaphore("crash", limit=1).holders() == 1
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        killed = time.monotonic()
        with Semaphore("crash", limit=1, wait=5):
            recovered = time.monotonic() - killed
    finally:
        holder.kill()
        holder.join(10)
    assert recovered < 1.0 + 0.1, recovered


def test_lease_scores_come_from_the_server_clock(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client whose wall clock is an hour fast must not stretch its lease (nor could a slow
    # one steal others'): the library never sends client time; scores are server TIME + ttl.
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    with Semaphore("clock", limit=1, ttl=5):
        ((_, score),) = r.zrange("sem:clock", 0, -1, withscores=True)
        seconds, micros = r.time()
        server_ms = seconds * 1000 + micros // 1000
        assert server_ms + 4000 < score <= server_ms + 5000


def test_each_callers_own_limit_applies_at_admission() -> None:
    one = Semaphore("mixed", limit=1, wait=0)
    two = Semaphore("mixed", limit=2, wait=0)
    assert one.acquire()
    assert not threading_result(lambda: Semaphore("mixed", limit=1, wait=0).acquire())
    assert threading_result(lambda: two.acquire())  # limit 2: a second holder is admitted
    one.release()
    two.release()  # what acquire() took is the object's: released from any thread


class Exporter:
    def __init__(self, tenant: str) -> None:
        self.tenant_id = tenant

    @limited("export:{self.tenant_id}", limit=1, wait=0)
    def export(self, r: redis.Redis) -> list[bytes]:
        return r.keys("sem:*")

    @classmethod
    @limited("{cls.__name__}:{n}", 1, wait=0)
    def inner(cls, r: redis.Redis, n: int) -> list[bytes]:
        return r.keys("sem:*")

    @limited(lambda cls, r, n: f"outer:{n}", limit=1)
    @classmethod
    def outer(cls, r: redis.Redis, n: int) -> list[bytes]:
        return r.keys("sem:*")

    @limited(name="static:{n}", limit=1)
    @staticmethod
    def static(r: redis.Redis, n: int) -> list[bytes]:
        return r.keys("sem:*")


def test_a_head_waiter_held_back_by_its_own_limit_leaving_lets_the_next_in_at_once(
    r: redis.Redis,
) -> None:
    """Review 9, 04: the head of the queue, held back by its own smaller limit, gave up; its
    leaving release answered 'not listed' before serving, and the waiter behind it, whose
    limit fit the free slot, slept until its own recheck (~0.6 s, up to 1 s)."""
    holders = [Semaphore("pool", limit=3, ttl=30) for _ in range(2)]
    assert all(holder.acquire(wait=0) for holder in holders)  # 2 of 3 slots held

    def head() -> None:
        assert not Semaphore("pool", limit=2, ttl=30).acquire(wait=0.5)  # 2 held >= 2

    queued_head = threading.Thread(target=head)
    queued_head.start()
    while r.zcard("{sem:pool}:queue") < 1:
        time.sleep(0.005)
    served: list[float] = []

    def behind() -> None:
        waiter = Semaphore("pool", limit=3, ttl=30)
        assert waiter.acquire(wait=5)
        served.append(time.monotonic())
        waiter.release()

    queued_behind = threading.Thread(target=behind)
    queued_behind.start()
    queued_head.join(5)
    left = time.monotonic()
    queued_behind.join(5)
    assert served and served[0] - left < 0.2, served and served[0] - left
    for holder in holders:
        holder.release()
    assert r.dbsize() == 0


def test_templates_methods_and_callables(r: redis.Redis) -> None:
    assert Exporter("acme").export(r) == [b"sem:export:acme"]
    assert Exporter.inner(r, 1) == [b"sem:Exporter:1"]
    assert Exporter.outer(r, 2) == [b"sem:outer:2"]
    assert Exporter.static(r, 3) == [b"sem:static:3"]
    assert r.dbsize() == 0
