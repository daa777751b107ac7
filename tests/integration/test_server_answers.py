"""What the server says is an answer: error replies raise at once and queue no background
clean-up, missing replicas are named as such, and an evicting server is warned about."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlock_deco import (
    LockNotAcquired,
    LockNotReplicated,
    Throttle,
    locked,
    register_provider,
)
from redlock_deco._lifecycle import Cleanup
from redlock_deco._renewal import renewer
from redlock_deco.asyncio import Throttle as AsyncThrottle
from redlock_deco.testing import RedisServer

NO_RETRY = Retry(NoBackoff(), 0)


def _cleanups(prefix: str = "") -> int:
    """Clean-ups pending in this process for keys starting with ``prefix`` (other tests'
    clean-ups of servers they killed may still be pending: they are not ours to count)."""
    jobs = renewer()._table.jobs.values()
    return sum(isinstance(job, Cleanup) and job.key.startswith(prefix) for job in jobs)


def _evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.slow
def test_a_read_only_replica_raises_at_once_and_queues_nothing(server: RedisServer) -> None:
    with RedisServer(args=("--replicaof", "127.0.0.1", str(server.port))) as replica:
        register_provider("replica", replica.url)

        @locked("job:{i}", provider="replica", ttl=30)
        def job(i: int) -> int:
            return i

        started = time.monotonic()
        for i in range(50):
            # Redis 7 sends READONLY as its own error; 6.2 wraps it in a script error.
            with pytest.raises(redis.exceptions.ResponseError, match=r"(?i)read.?only"):
                job(i)
        assert time.monotonic() - started < 5  # no waiting, no retrying
        assert _cleanups("lock:job:") == 0
        watcher = replica.client()
        watcher.config_resetstat()
        time.sleep(1.0)
        assert _evalsha_calls(watcher) == 0  # nothing retried in the background
        watcher.close()


def test_no_permission_raises_at_once(server: RedisServer, r: redis.Redis) -> None:
    r.execute_command("ACL", "SETUSER", "narrow", "on", ">pw", "resetkeys", "~other:*", "+@all")
    try:
        register_provider("narrow", f"redis://narrow:pw@127.0.0.1:{server.port}/0")

        @locked("denied", provider="narrow")
        def denied() -> None:
            raise AssertionError("must not run")

        with pytest.raises(redis.exceptions.NoPermissionError):
            denied()
        assert _cleanups("lock:denied") == 0
    finally:
        r.execute_command("ACL", "DELUSER", "narrow")


def test_a_key_of_the_wrong_type_raises_instead_of_waiting(r: redis.Redis) -> None:
    r.rpush("lock:typed", "not a lock")

    @locked("typed", wait=5)
    def typed() -> None:
        raise AssertionError("must not run")

    started = time.monotonic()
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        typed()
    assert time.monotonic() - started < 1  # not a 5 s wait for a key that never expires
    assert _cleanups("lock:typed") == 0


def test_out_of_memory_raises_at_once(r: redis.Redis) -> None:
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    try:

        @locked("oom")
        def oom() -> None:
            raise AssertionError("must not run")

        with pytest.raises(redis.exceptions.ResponseError, match=r"(?i)OOM|maxmemory"):
            oom()
        assert _cleanups("lock:oom") == 0
    finally:
        r.config_set("maxmemory", 0)


@pytest.mark.slow
def test_an_unreachable_server_gets_one_deduplicated_clean_up() -> None:
    with RedisServer() as own:
        register_provider("stalled", own.client(socket_timeout=0.3, retry=NO_RETRY))

        @locked("stalled", provider="stalled", ttl=5)
        def stalled() -> None:
            raise AssertionError("must not run")

        own.pause()
        threading.Timer(1.0, own.resume).start()
        with pytest.raises(redis.exceptions.TimeoutError):
            stalled()
        assert _cleanups("lock:stalled") == 1
        deadline = time.monotonic() + 5
        while _cleanups("lock:stalled") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cleanups("lock:stalled") == 0
        client = own.client()
        assert client.dbsize() == 0  # the SET that landed on resume was released
        client.close()


def test_missing_replicas_are_named_even_with_skip(r: redis.Redis) -> None:
    @locked("pay:{id}", replicas=1, wait=0.3, on_busy="skip")
    def pay(id: int) -> str:
        return "paid"

    with pytest.raises(LockNotReplicated) as info:
        pay(1)
    error = info.value
    assert (error.replicas, error.acknowledged) == (1, 0)
    assert "0 of the 1 replica" in str(error) and isinstance(error, LockNotAcquired)
    assert r.dbsize() == 0


@pytest.mark.slow
def test_replicas_that_answer_let_the_call_run(server: RedisServer) -> None:
    with RedisServer(args=("--replicaof", "127.0.0.1", str(server.port))) as replica:
        client = replica.client()
        deadline = time.monotonic() + 10
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica never attached"
            time.sleep(0.05)
        client.close()

        @locked("pay:{id}", replicas=1, wait=2)
        def pay(id: int) -> str:
            return "paid"

        assert pay(2) == "paid"


def _checks_done(before: set[threading.Thread]) -> None:
    """Wait for the server checks started since ``before`` (the threads then): they run in
    the background, off the call's path (a fixed 0.5 s sleep once ended before the check on
    a busy machine)."""
    for thread in set(threading.enumerate()) - before:
        if thread.name == "redlock-deco-check":
            thread.join(10)
            assert not thread.is_alive(), "the server check did not end within 10 s"


def _evicting_server_warnings(policy: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    with RedisServer(args=("--maxmemory-policy", policy)) as own:
        register_provider("evicting", own.url)

        @locked("evict", provider="evicting")
        def evict() -> None:
            pass

        with caplog.at_level(logging.WARNING, logger="redlock_deco"):
            before = set(threading.enumerate())
            for _ in range(3):
                evict()
            _checks_done(before)
    return [rec.getMessage() for rec in caplog.records if "maxmemory-policy" in rec.getMessage()]


def test_an_evicting_server_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    warnings = _evicting_server_warnings("allkeys-lru", caplog)
    assert len(warnings) == 1 and "noeviction" in warnings[0] and "allkeys-lru" in warnings[0]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_throttle_on_an_evicting_server_is_warned_about(
    caplog: pytest.LogCaptureFixture, flavour: str
) -> None:
    """Review 8, t02: evicted, a throttle's arrival time lets a new burst in."""
    with RedisServer(args=("--maxmemory-policy", "volatile-ttl")) as own:
        register_provider("evicting", own.url)
        with caplog.at_level(logging.WARNING, logger="redlock_deco"):
            if flavour == "sync":
                before = set(threading.enumerate())
                assert Throttle("evict", rate=5, provider="evicting").acquire()
                _checks_done(before)
            else:

                async def main() -> bool:
                    limiter = AsyncThrottle("evict", rate=5, provider="evicting")
                    return await limiter.acquire()

                assert asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert len(warnings) == 1 and "volatile-ttl" in warnings[0] and "new burst" in warnings[0]


def test_noeviction_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    assert _evicting_server_warnings("noeviction", caplog) == []


def test_a_server_that_refuses_config_is_left_alone(
    server: RedisServer, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    r.config_set("maxmemory-policy", "volatile-lru")
    r.execute_command("ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "+@all", "-config")
    try:
        register_provider("noconfig", f"redis://noconfig:pw@127.0.0.1:{server.port}/0")

        @locked("quiet", provider="noconfig")
        def quiet() -> str:
            return "ran"

        with caplog.at_level(logging.WARNING, logger="redlock_deco"):
            assert quiet() == "ran"
            time.sleep(0.5)
        assert not [rec for rec in caplog.records if "maxmemory" in rec.getMessage()]
    finally:
        r.config_set("maxmemory-policy", "noeviction")
        r.execute_command("ACL", "DELUSER", "noconfig")
