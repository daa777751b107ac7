"""Background threads do not pile up: they end when idle and when their provider is replaced.

Renewals run on one serial worker per Redis target, and a quorum on one per master. Each used
to be a thread pool that lived as long as its target, and a replaced target (a provider
registered again: per test, per tenant, after a configuration reload) never let its threads
go. Now a worker thread ends after ``worker.IDLE`` seconds without work, and at once (after
its queued work) when its target is replaced.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack

import pytest
import redis

from redlock_deco import Lock, register_provider
from redlock_deco import _worker as worker
from redlock_deco._worker import SerialWorker
from redlock_deco.testing import RedisServer

ROUNDS = 10
# The live targets' threads (renewer, renewal workers, quorum workers: 6 here) and a few
# retired ones finishing their last job.
SLACK = 8


def ours() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("redlock-deco-")]


def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(scope="module")
def masters() -> Iterator[list[RedisServer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(RedisServer()) for _ in range(3)]


@pytest.mark.slow
def test_re_registering_providers_does_not_pile_up_threads(
    server: RedisServer, masters: list[RedisServer], r: redis.Redis
) -> None:
    before = set(threading.enumerate())
    start = threading.active_count()
    counts = []
    for _ in range(ROUNDS):
        register_provider("default", server.url)
        register_provider("q", [m.url for m in masters])
        # ttl 1 s, renewal due after a third of it: a loaded CI machine (a quorum round is
        # three round trips) missed a 0.3 s ttl's renewal once.
        with Lock("t", ttl=1) as single, Lock("tq", ttl=1, provider="q") as quorum:
            leases = [lease for lease in (single.lease, quorum.lease) if lease is not None]
            left = [lease.remaining() for lease in leases]
            time.sleep(0.6)  # past a renewal, due at ttl / 3
            assert len(leases) == 2
            for lease, before_sleep in zip(leases, left, strict=True):
                assert lease.remaining() > before_sleep - 0.6, "not renewed"
        counts.append(threading.active_count())
    assert max(counts) <= start + SLACK, counts
    assert counts[-1] <= counts[0] + 2, counts  # no growth round after round
    assert r.dbsize() == 0
    # Idle now: the threads this test started end within the idle time.
    started_here = [t for t in ours() if t not in before]
    assert started_here, "the test should have started renewal and quorum workers"
    assert wait_until(lambda: not any(t.is_alive() for t in started_here), worker.IDLE + 3), [
        t.name for t in started_here if t.is_alive()
    ]


IDLE_SCRIPT = """
import sys, threading, time
from redlock_deco import Lock, register_provider
from redlock_deco import _worker as worker
register_provider("default", sys.argv[1])
register_provider("q", sys.argv[2:])
with Lock("t", ttl=0.3), Lock("tq", ttl=0.3, provider="q"):
    time.sleep(0.25)  # past a renewal
def ours():
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("redlock-deco-"))
print(",".join(ours()))
deadline = time.monotonic() + worker.IDLE + 3
while ours() and time.monotonic() < deadline:
    time.sleep(0.05)
print(",".join(ours()))
"""


@pytest.mark.slow
def test_idle_renewal_and_quorum_threads_end(
    server: RedisServer, masters: list[RedisServer]
) -> None:
    # In a process of its own: another test's pending clean-ups would keep this one's
    # renewer busy, and "no thread of ours alive" is a statement about the whole process.
    done = subprocess.run(
        [sys.executable, "-c", IDLE_SCRIPT, server.url, *(m.url for m in masters)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    busy, idle = done.stdout.splitlines()
    assert set(busy.split(",")) == {
        "redlock-deco-renewer",
        "redlock-deco-renewal",
        "redlock-deco-quorum",
    }, busy
    assert busy.split(",").count("redlock-deco-quorum") == 3, busy  # one per master
    assert idle == "", f"still alive after {worker.IDLE + 3}s idle: {idle}"
    assert done.stderr == ""


def test_a_lease_held_across_re_registration_is_still_renewed(server: RedisServer) -> None:
    """Replacing a provider retires its target's threads, but a lease taken through it
    keeps that target: its renewals must still run (on a thread started for them)."""
    with Lock("kept", ttl=0.3) as lock:
        register_provider("default", server.url)  # retires the target the lease lives on
        time.sleep(1.0)  # several ttls: only renewals keep it
        assert lock.owned()
        lease = lock.lease
        assert lease is not None and not lease.lost


# -- SerialWorker -----------------------------------------------------------------------


def test_serial_worker_runs_calls_one_at_a_time_in_order() -> None:
    work = SerialWorker("test-serial", idle=1.0)
    seen: list[int] = []
    inside = threading.Semaphore(1)

    def step(i: int) -> int:
        assert inside.acquire(blocking=False), "two calls ran at once"
        try:
            time.sleep(0.001)
            seen.append(i)
            return i * i
        finally:
            inside.release()

    futures = [work.submit(step, i) for i in range(100)]
    assert [f.result(timeout=10) for f in futures] == [i * i for i in range(100)]
    assert seen == list(range(100))
    work.retire()


def test_serial_worker_hands_exceptions_to_the_future_and_goes_on() -> None:
    work = SerialWorker("test-serial", idle=1.0)

    def fail() -> None:
        raise KeyError("boom")

    failed = work.submit(fail)
    after = work.submit(lambda: "still running")
    with pytest.raises(KeyError, match="boom"):
        failed.result(timeout=5)
    assert after.result(timeout=5) == "still running"
    work.retire()


def thread_of(work: SerialWorker) -> threading.Thread:
    return work.submit(threading.current_thread).result(timeout=5)


def test_serial_worker_thread_ends_when_idle_and_starts_again() -> None:
    work = SerialWorker("test-serial", idle=0.2)
    first = thread_of(work)
    assert first.name == "test-serial" and first.daemon
    assert work.running
    first.join(5)
    assert not first.is_alive()
    assert not work.running
    second = thread_of(work)  # a submission after the thread ended starts a new one
    assert second is not first
    assert work.submit(lambda: 42).result(timeout=5) == 42
    work.retire()
    second.join(5)
    assert not second.is_alive()


def test_serial_worker_retire_ends_the_thread_promptly() -> None:
    work = SerialWorker("test-serial", idle=60.0)
    thread = thread_of(work)
    started = time.monotonic()
    work.retire()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - started < 1.0
    assert not work.running


def test_serial_worker_retire_finishes_the_queued_work_first() -> None:
    work = SerialWorker("test-serial", idle=60.0)
    gate = threading.Event()
    blocked = work.submit(gate.wait, 10)
    queued: list[Future[int]] = [work.submit(lambda i=i: i) for i in range(5)]
    work.retire()
    gate.set()
    assert blocked.result(timeout=5) is True
    assert [f.result(timeout=5) for f in queued] == list(range(5))
    assert wait_until(lambda: not work.running, 2.0)


def test_a_retired_serial_worker_still_runs_later_submissions() -> None:
    work = SerialWorker("test-serial", idle=60.0)
    thread_of(work)
    work.retire()
    assert wait_until(lambda: not work.running, 2.0)
    assert thread_of(work).name == "test-serial"
    assert work.submit(lambda: "done").result(timeout=5) == "done"
    assert wait_until(lambda: not work.running, 2.0)  # and ends again at once


def test_serial_worker_survives_submissions_racing_its_idle_end() -> None:
    """A submission landing just as the thread decides to end is never lost."""
    work = SerialWorker("test-serial", idle=0.001)
    for i in range(300):
        assert work.submit(lambda i=i: i).result(timeout=5) == i
        if i % 3 == 0:
            time.sleep(0.001)  # now and then let the thread reach its idle end
    work.retire()
