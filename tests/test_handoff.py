"""Direct hand-off, on a real server with real processes: a release gives the lease to the
oldest waiter still alive, which wakes up holding it (see _protocol.py and lua/waiters.lua).

What is checked: arrival order is service order; a releaser coming straight back queues
behind those already waiting (no barging); a waiter whose process was killed is skipped at
once; a stopped grantee loses its turn after the hand-off lease and, when it resumes, does
not run unprotected; a lost grant costs latency only; a grantee holding past the hand-off
lease keeps the lock (its renewal takes it on); semaphores hand freed slots on in order;
1,000 waiters in one process wait on one subscription.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import handoff_workers
import pytest
import redis

from redlock_deco import Lock, LockNotOwned, Semaphore, locked, register_provider
from redlock_deco._protocol import HANDOFF_MS, RECHECK
from redlock_deco.testing import RedisServer

spawn = multiprocessing.get_context("spawn")
HANDOFF = HANDOFF_MS / 1000


def until(condition: Callable[[], object], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition never met"
        time.sleep(0.005)


@pytest.fixture
def waiters(server: RedisServer) -> Iterator[Callable[..., Any]]:
    """Start waiting processes one by one, each queued before the next starts; every
    process is killed by PID at the end."""
    started: list[Any] = []
    client = server.client()

    def start(name: str, count: int, hold: float = 0.05, limit: int = 0, key: str = "") -> Any:
        out = spawn.Queue()
        queue = "{" + (key or f"lock:{name}") + "}:queue"
        for index in range(count):
            before = client.llen(queue)
            process = spawn.Process(
                target=handoff_workers.wait_then_hold,
                args=(server.url, name, index, hold, out, limit),
            )
            process.start()
            started.append(process)
            until(lambda n=before: client.llen(queue) > n)  # queued: its place is fixed
        return out

    start.processes = started  # type: ignore[attr-defined]
    yield start
    for process in started:
        if process.is_alive():
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
        process.join(5)
    client.close()


def results(out: Any, count: int) -> list[tuple[Any, ...]]:
    return [out.get(timeout=30) for _ in range(count)]


def test_waiters_are_served_in_arrival_order(waiters: Any) -> None:
    holder = Lock("fifo", ttl=10)
    holder.acquire()
    out = waiters("fifo", 4)
    holder.release()
    served = sorted(results(out, 4), key=lambda r: r[1])  # by the time each entered
    assert [r[0] for r in served] == [0, 1, 2, 3]
    for earlier, later in itertools.pairwise(served):
        assert earlier[2] <= later[1]  # never two inside at once


def test_a_releaser_coming_straight_back_queues_behind_the_waiters(
    waiters: Any, r: redis.Redis
) -> None:
    holder = Lock("nobarge", ttl=10, wait=30)
    holder.acquire()
    out = waiters("nobarge", 2, hold=0.2)
    assert holder.lease is not None
    token = holder.lease.token
    holder.release()
    assert r.get("lock:nobarge") not in (None, token.encode())  # handed on at once
    holder.acquire()  # comes straight back: must wait for both
    back = time.monotonic()
    holder.release()
    assert all(left <= back for _, _, left in results(out, 2))


def test_a_killed_waiters_turn_passes_on_at_once(waiters: Any, r: redis.Redis) -> None:
    holder = Lock("killed", ttl=10)
    holder.acquire()
    out = waiters("killed", 2)
    first = waiters.processes[0]
    queued = r.lrange("{lock:killed}:queue", 0, 0)
    first.kill()
    first.join(5)
    # Until the server has seen its connections close (it reads the FIN in its own time):
    # before that its PUBLISH still counts the dead subscriber (seen once on a loaded CI).
    channel = "redlock-deco:" + queued[0].decode().rsplit(":", 1)[0]
    until(lambda: r.pubsub_numsub(channel)[0][1] == 0)
    released = time.monotonic()
    holder.release()
    ((index, entered, _left),) = results(out, 1)
    assert index == 1
    assert entered - released < 0.5  # not a hand-off lease, not a recheck
    until(lambda: r.dbsize() == 0)


def test_a_stopped_grantee_loses_its_turn_and_never_runs_unprotected(
    waiters: Any, r: redis.Redis
) -> None:
    holder = Lock("stopped", ttl=10)
    holder.acquire()
    out = waiters("stopped", 2, hold=0.5)
    stopped = waiters.processes[0]
    os.kill(stopped.pid, signal.SIGSTOP)
    released = time.monotonic()
    holder.release()
    assert 0 < r.pttl("lock:stopped") <= HANDOFF_MS  # handed to the stopped one, briefly
    until(lambda: not out.empty(), within=HANDOFF + RECHECK + 5)  # the next one got it
    os.kill(stopped.pid, signal.SIGCONT)  # it reads its stale grant now
    first, second = sorted(results(out, 2), key=lambda r: r[1])
    assert first[0] == 1 and first[1] - released < HANDOFF + RECHECK + 1
    # The resumed one confirmed its grant before using it, found it gone, queued again and
    # entered only after the other left.
    assert second[0] == 0 and second[1] >= first[2]


def test_a_lost_grant_costs_latency_not_the_lock(server: RedisServer, r: redis.Redis) -> None:
    holder = Lock("lost", ttl=10)
    holder.acquire()
    got: list[float] = []
    waiter = threading.Thread(target=lambda: got.append(_enter_and_time(Lock("lost", wait=20))))
    waiter.start()
    until(lambda: r.llen("{lock:lost}:queue") == 1)
    until(lambda: "sub=1" in r.execute_command("CLIENT", "LIST").decode())
    r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")  # the subscription drops
    released = time.monotonic()
    holder.release()
    waiter.join(HANDOFF + RECHECK + 5)
    assert got and got[0] - released < HANDOFF + RECHECK + 1


def _enter_and_time(lock: Lock) -> float:
    with lock:
        return time.monotonic()


def test_a_grantee_holding_past_the_hand_off_lease_keeps_the_lock(
    waiters: Any, r: redis.Redis
) -> None:
    holder = Lock("long", ttl=10)
    holder.acquire()
    out = waiters("long", 1, hold=HANDOFF * 2.5)
    holder.release()
    until(lambda: r.get("lock:long") is not None)
    time.sleep(HANDOFF * 1.5)  # past the hand-off lease: renewal took it to the full ttl
    assert r.pttl("lock:long") > HANDOFF_MS
    (result,) = results(out, 1)
    assert len(result) == 3, result  # entered and left, no LockLost


def test_freed_semaphore_slots_go_to_the_waiters_in_order(waiters: Any, r: redis.Redis) -> None:
    a, b = Semaphore("slots", limit=2, ttl=10), Semaphore("slots", limit=2, ttl=10)
    a.acquire()
    b.acquire()
    out = waiters("slots", 3, limit=2, key="sem:slots", hold=0.3)
    a.release()
    b.release()
    served = sorted(results(out, 3), key=lambda r: r[1])
    # The two freed slots went to the first two waiters (which wakes first is a race).
    assert {x[0] for x in served[:2]} == {0, 1} and served[2][0] == 2
    assert served[2][1] >= min(served[0][2], served[1][2])  # the third waited for a slot
    until(lambda: r.dbsize() == 0)


def test_a_waiter_giving_up_passes_on_a_hand_off_that_reached_it(r: redis.Redis) -> None:
    holder = Lock("race", ttl=10)
    holder.acquire()
    entered: list[str] = []
    late = threading.Thread(target=lambda: entered.append(str(Lock("race", wait=0.3).acquire())))
    late.start()
    until(lambda: r.llen("{lock:race}:queue") == 1)
    patient = threading.Thread(target=lambda: entered.append(_patient()))
    patient.start()
    until(lambda: r.llen("{lock:race}:queue") == 2)
    late.join(5)  # gave up: it left the queue
    holder.release()
    patient.join(10)
    assert entered == ["False", "patient"]
    until(lambda: r.dbsize() == 0)


def _patient() -> str:
    with Lock("race", wait=10):
        return "patient"


def subscriptions(r: redis.Redis) -> int:
    return sum(1 for line in r.execute_command("CLIENT", "LIST").decode().splitlines()
               if " sub=0 " not in line or " psub=0 " not in line)  # fmt: skip


@pytest.mark.parametrize("flavour", ["threads", "tasks"])
def test_a_thousand_waiters_in_one_process_wait_on_one_subscription(
    flavour: str, r: redis.Redis
) -> None:
    holder = Lock("crowd", ttl=30)
    holder.acquire()
    before = len(r.client_list())
    inside = [0, 0]  # now, most ever

    def body() -> None:
        inside[0] += 1
        inside[1] = max(inside)
        inside[0] -= 1

    done: list[int] = []
    if flavour == "threads":
        section = locked("crowd", wait=60)(body)
        crowd = [threading.Thread(target=section) for _ in range(1000)]
        for thread in crowd:
            thread.start()
    else:

        async def tasks() -> None:
            @locked("crowd", wait=60)
            async def asection() -> None:
                body()

            await asyncio.gather(*(asection() for _ in range(1000)))
            done.append(1)

        runner = threading.Thread(target=asyncio.run, args=(tasks(),))
        runner.start()
    until(lambda: r.llen("{lock:crowd}:queue") == 1000, within=60)
    assert subscriptions(r) == 1  # one subscription carries every waiter's grant
    assert len(r.client_list()) - before <= 100  # attempts share the pool; nobody blocks in it
    holder.release()
    if flavour == "threads":
        for thread in crowd:
            thread.join(60)
    else:
        runner.join(60)
        assert done
    assert inside[1] == 1
    until(lambda: r.dbsize() == 0)


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server this test may restart."""
    with RedisServer() as srv:
        yield srv


def test_no_waiter_is_stranded_when_the_server_restarts_mid_wait(own_server: RedisServer) -> None:
    register_provider("own", own_server.url)
    holder = Lock("restart", ttl=10, provider="own", auto_renew=False)
    holder.acquire()
    got: list[float] = []
    waiter = threading.Thread(
        target=lambda: got.append(_enter_and_time(Lock("restart", wait=30, provider="own")))
    )
    waiter.start()
    until(lambda: own_server.client().llen("{lock:restart}:queue") == 1)
    own_server.restart()  # no data kept: the lock, the queue and the subscription are gone
    waiter.join(RECHECK + 10)
    assert got  # it asked the server again, found the lock free and took it
    with pytest.raises(LockNotOwned):  # and the old holder learns its lease is gone
        holder.release()
