"""Functions run in separate processes (multiprocessing "spawn": fresh interpreters)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from typing import Any

import redis

from redlock_deco import Lock, LockLost, Semaphore, limited, locked, register_provider


def increment_many(
    url: str, counter: str, times: int, ttl: float, masters: list[str] | None = None
) -> int:
    """A deliberately non-atomic read-modify-write under @locked; returns calls made.

    The counter lives at ``url``; the lock at ``url`` too, or on the quorum ``masters``."""
    register_provider("default", masters or url)
    client = redis.Redis.from_url(url)

    @locked("counter:{name}", ttl=ttl, wait=None)
    def bump(name: str) -> None:
        value = int(client.get(name) or 0)
        time.sleep(0.001)  # widen the race window: without the lock, updates get lost
        client.set(name, value + 1)

    for _ in range(times):
        bump(counter)
    return times


def hold_forever(url: str, name: str, ttl: float, ready: Any) -> None:
    """Take a lock (renewed) and signal readiness; the parent SIGKILLs this process."""
    register_provider("default", url)
    lock = Lock(name, ttl=ttl, wait=5)
    lock.acquire()
    ready.set()
    while True:
        time.sleep(1)


def hold_then_release(url: str, name: str, hold: float, ready: Any, out: Any) -> None:
    """Hold a lock for ``hold`` s, release it, and report when the release was sent."""
    register_provider("default", url)
    lock = Lock(name, ttl=10, wait=5)
    lock.acquire()
    ready.set()
    time.sleep(hold)
    released = time.time()  # stamped before the release is sent: nobody can enter earlier
    lock.release()
    out.put(released)


def stop_self() -> None:  # pragma: no cover - used in fault tests
    os.kill(os.getpid(), signal.SIGSTOP)


def gauge_many(url: str, name: str, limit: int, times: int, hold: float) -> int:
    """Run a @limited section ``times`` times; return the most holders seen inside at once."""
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    peak = 0

    @limited("gauge:{name}", limit=limit, ttl=5, wait=None)
    def section(name: str) -> None:
        nonlocal peak
        inside = int(client.incr(f"inside:{name}"))
        peak = max(peak, inside)
        time.sleep(hold)
        client.decr(f"inside:{name}")

    for _ in range(times):
        section(name)
    return peak


def hold_slot_forever(url: str, name: str, ttl: float, ready: Any) -> None:
    """Take a semaphore slot (renewed) and signal readiness; the parent SIGKILLs us."""
    register_provider("default", url)
    sem = Semaphore(name, limit=1, ttl=ttl, wait=5)  # kept: renewed while the object lives
    sem.acquire()
    ready.set()
    while True:
        time.sleep(1)


def hold_until_stopped(url: str, name: str, ttl: float, ready: Any, out: Any) -> None:
    """Hold a lock through a long call; the parent SIGSTOPs and later SIGCONTs us. Reports
    how the call ended."""
    from redlock_deco import LockLost

    register_provider("default", url)

    @locked(name, ttl=ttl, wait=5)
    def long_call() -> None:
        ready.set()
        time.sleep(1.0)  # the parent stops us in here, for longer than the ttl

    try:
        long_call()
        out.put("completed")
    except LockLost:
        out.put("LockLost")


# An independent gauge for the soak: entries scored by the server's clock expire a little
# before the holder's slot would (ttl - 100 ms), so a killed holder never inflates the count.
GAUGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""


def soak_worker(url: str, limit: int, ttl: float, stop_key: str, out: Any) -> None:
    """Mixed @locked / @limited calls until ``stop_key`` appears; reports when stopped."""
    import random
    import secrets
    import threading

    register_provider("default", url)
    client = redis.Redis.from_url(url)
    gauge = client.register_script(GAUGE)

    @locked("soak:counter", ttl=ttl, wait=None)
    def bump() -> None:
        value = int(client.get("soak-data:counter") or 0) + 1
        client.set("soak-data:counter", value)
        if not client.hsetnx("soak-data:written", str(value), 1):
            client.incr("soak-data:duplicates")  # two holders wrote the same value: lost update

    @limited("soak:slots", limit=limit, ttl=ttl, wait=None)
    def section() -> None:
        me = secrets.token_hex(8)
        inside = int(gauge(keys=["soak-data:inside"], args=[me, int(ttl * 1000) - 100]))
        if inside > limit:
            client.incr("soak-data:over")
        time.sleep(random.uniform(0.001, 0.004))
        client.zrem("soak-data:inside", me)

    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    started, early_rss = time.monotonic(), 0
    calls = 0
    while not client.exists(stop_key):
        try:
            bump() if random.random() < 0.5 else section()
        except LockLost:
            # A renewal starved past the ttl (1 s, 16 processes on 2 busy cores): the body
            # ran on without its lease, and said so, as promised. Counted, as what may explain
            # a duplicate or an over-limit entry (test_soak); the worker goes on.
            client.incr("soak-data:lost")
        calls += 1
        if not early_rss and time.monotonic() - started > 5:
            early_rss = rss()
    renewers = sum(t.name == "redlock-deco-renewer" for t in threading.enumerate())
    out.put({"pid": os.getpid(), "calls": calls, "renewers": renewers,
             "early_rss": early_rss, "late_rss": rss(),
             "lived": time.monotonic() - started})  # fmt: skip


def fenced_appender(url: str, times: int) -> None:
    """Take a fenced lock ``times`` times; inside, append the token to a list (in lock order)."""
    from redlock_deco import current_lease

    register_provider("default", url)
    client = redis.Redis.from_url(url)

    @locked("fenced", fencing=True, ttl=5, wait=30)
    def write() -> None:
        lease = current_lease()
        assert lease is not None and lease.fencing_token is not None
        client.rpush("fence-log", lease.fencing_token)

    for _ in range(times):
        write()


# -- the exclusion checker under network faults (test_fault_proxy.py) ----------------------


def guarded_sections(spec: dict[str, Any], role: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec``'s @locked/@limited section until ``spec["stop"]`` appears; report how
    each call ended.

    The lock goes through ``role["url"]`` (maybe a faulty proxy) with ``role["timeout"]`` as
    socket timeout and ``role["retries"]`` redis-py retries (a retried command may follow one
    that ran unheard, which a retry-free client never sends), sync or ``role["async"]``.
    The section logs ``+id`` on entry and ``-id`` on exit to ``spec["events"]`` through
    ``spec["checker"]``, a direct connection no fault touches, so the log's order is the
    server's own. Outcomes per section id: ``clean`` (returned), ``lost`` (LockLost) or
    ``error`` (a connection error after the section ran: its release failed, validity
    unknown); calls that never entered count as ``busy`` or ``failed``.
    """
    import asyncio
    import random

    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from redlock_deco import LockLost, LockNotAcquired

    checker = redis.Redis.from_url(spec["checker"])
    worker, url, retries = role["name"], role["url"], role["retries"]
    rand = random.Random(worker)
    result: dict[str, Any] = {"worker": worker, "sections": {}, "busy": 0, "failed": 0}
    kwargs = {"socket_timeout": role["timeout"], "socket_connect_timeout": role["timeout"]}
    options = {"ttl": spec["ttl"], "wait": 2.0}
    guard = (
        locked("shared", **options)
        if spec["limit"] == 1
        else limited("shared", limit=spec["limit"], **options)
    )

    def enter(sid: str) -> float:
        checker.rpush(spec["events"], f"+{sid}")
        result["sections"][sid] = "error"  # until the call's outcome is known
        # Mostly short sections; some outlast the ttl, so renewals must carry them and a
        # fault can end their lease while they run.
        if rand.random() < role["long"]:
            return float(spec["ttl"] * rand.choice([1.5, 3.0]))
        return rand.uniform(0.001, 0.02)

    def leave(sid: str) -> None:
        checker.rpush(spec["events"], f"-{sid}")

    def record(sid: str, outcome: BaseException | None) -> None:
        entered = sid in result["sections"]
        if isinstance(outcome, LockNotAcquired):
            result["busy"] += 1
        elif isinstance(outcome, LockLost):
            result["sections"][sid] = "lost"
        elif isinstance(outcome, redis.RedisError):
            result["failed"] += not entered
        elif outcome is None:
            result["sections"][sid] = "clean"
        else:
            raise outcome

    def run_sync() -> None:
        client = redis.Redis.from_url(url, retry=Retry(NoBackoff(), retries), **kwargs)
        register_provider("default", client)

        @guard
        def section(sid: str) -> None:
            time.sleep(enter(sid))
            leave(sid)

        for n in itertools.count():
            if checker.exists(spec["stop"]):
                break
            sid = f"{worker}.{n}"
            try:
                section(sid)
            except Exception as exc:
                record(sid, exc)
            else:
                record(sid, None)
        # The client stays open: the library may still be cleaning up an acquire cut short
        # (a background release by token), and closing would pull its connection away.

    async def run_async() -> None:
        import redis.asyncio
        from redis.asyncio.retry import Retry as AsyncRetry

        client = redis.asyncio.Redis.from_url(url, retry=AsyncRetry(NoBackoff(), retries), **kwargs)
        register_provider("default", client)

        @guard
        async def section(sid: str) -> None:
            await asyncio.sleep(enter(sid))
            leave(sid)

        for n in itertools.count():
            if checker.exists(spec["stop"]):
                break
            sid = f"{worker}.{n}"
            try:
                await section(sid)
            except Exception as exc:
                record(sid, exc)
            else:
                record(sid, None)
        await client.aclose()

    checker.incr(spec["ready"])
    if role["async"]:
        asyncio.run(run_async())
    else:
        run_sync()
    checker.close()
    return result
