"""Auto-renewal: one renewer thread per process, leases kept past their ttl, losses
detected, transient server trouble survived, nothing renewed that is not ours."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from redlock_deco import Lock, LockLost, locked, register_provider
from redlock_deco._renewal import renewer
from redlock_deco.testing import RedisServer


def renewer_threads() -> int:
    return sum(t.name == "redlock-deco-renewer" for t in threading.enumerate())


def test_without_auto_renew_the_lease_ends_and_the_call_learns_it() -> None:
    @locked("short", ttl=0.2, auto_renew=False)
    def slow() -> None:
        time.sleep(0.4)

    with pytest.raises(LockLost):
        slow()


def test_one_renewer_thread_for_many_leases(r: redis.Redis) -> None:
    locks = [Lock(f"many:{i}", ttl=0.3) for i in range(25)]
    for lock in locks:
        lock.acquire()
    time.sleep(0.8)
    assert renewer_threads() == 1
    assert len(renewer()) == 25
    assert all(r.pttl(f"lock:many:{i}") > 0 for i in range(25))
    for lock in locks:
        lock.release()
    assert len(renewer()) == 0 and r.dbsize() == 0


def test_renewal_never_extends_a_lease_taken_over_by_another(r: redis.Redis) -> None:
    @locked("takeover", ttl=0.3)
    def victim() -> None:
        r.set("lock:takeover", "other-owner", px=250)  # the lease changed hands
        time.sleep(0.5)

    with pytest.raises(LockLost):
        victim()
    assert r.get("lock:takeover") is None  # expired on its own: we never extended it


def test_renewal_survives_a_short_server_pause(server: RedisServer) -> None:
    register_provider("default", server.client(socket_timeout=0.2))

    @locked("pause", ttl=1.5)
    def through_pause() -> str:
        time.sleep(0.5)  # a renewal is due at 0.5 s: it meets the paused server
        server.pause()
        try:
            time.sleep(0.5)
        finally:
            server.resume()
        time.sleep(0.6)
        return "ok"

    assert through_pause() == "ok"


@pytest.mark.slow
def test_server_paused_past_the_ttl_means_lock_lost(server: RedisServer) -> None:
    register_provider("default", server.client(socket_timeout=0.2))

    @locked("pause2", ttl=0.6)
    def through_long_pause() -> None:
        server.pause()
        try:
            time.sleep(1.0)
        finally:
            server.resume()
        time.sleep(0.1)

    with pytest.raises(LockLost):
        through_long_pause()
