"""Mutual exclusion and crash recovery across real processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest
import redis
from support import workers

from redlock_deco import Lock
from redlock_deco.testing import RedisServer

spawn = multiprocessing.get_context("spawn")


@pytest.mark.slow
def test_no_lost_updates_across_processes(server: RedisServer, r: redis.Redis) -> None:
    procs, times = 4, 40
    with spawn.Pool(procs) as pool:
        done = pool.starmap(workers.increment_many, [(server.url, "counter", times, 5.0)] * procs)
    assert sum(done) == procs * times
    assert int(r.get("counter") or 0) == procs * times  # 0 lost updates
    r.delete("counter")
    assert r.dbsize() == 0


@pytest.mark.slow
def test_sigkilled_holder_is_replaced_within_ttl(server: RedisServer, r: redis.Redis) -> None:
    ready = spawn.Event()
    holder = spawn.Process(target=workers.hold_forever, args=(server.url, "crash", 1.0, ready))
    holder.start()
    try:
        assert ready.wait(30)
        time.sleep(1.5)  # renewals kept it alive past its 1 s ttl
        assert r.exists("lock:crash")
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        killed = time.monotonic()
        with Lock("crash", wait=5):
            recovered = time.monotonic() - killed
    finally:
        holder.kill()
        holder.join(10)
    assert recovered < 1.0 + 0.1, recovered  # within ttl (+100 ms)


@pytest.mark.slow
def test_hand_off_to_a_waiting_process(server: RedisServer) -> None:
    ready, out = spawn.Event(), spawn.Queue()
    holder = spawn.Process(
        target=workers.hold_then_release, args=(server.url, "handoff", 1.0, ready, out)
    )
    holder.start()
    try:
        assert ready.wait(30)
        with Lock("handoff", wait=10):
            got = time.time()
        released = out.get(timeout=10)
    finally:
        holder.join(10)
    assert 0 <= got - released < 0.05, got - released
