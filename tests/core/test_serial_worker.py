"""The SerialWorker (one background thread per purpose, started on demand and ended when
idle) runs calls in order, survives their exceptions and ends promptly when retired: threads
only, no server."""

from __future__ import annotations

import inspect
import sys
import threading
import time
from concurrent.futures import Future
from types import FrameType
from typing import Any

import pytest
from support.samples import thread_of, wait_until

from redlock_deco._worker import SLOW, Lanes, SerialWorker


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


def test_a_submit_interrupted_as_it_starts_the_thread_leaves_the_next_one_to_start_it() -> None:
    """A KeyboardInterrupt at the line that starts the worker's thread left a thread never
    started standing for it: every later submit only notified it, and nothing ran again (the
    renewals and give-backs of a target among them)."""
    work = SerialWorker("test-serial", idle=0.05)
    code = SerialWorker.submit.__code__
    lines, first = inspect.getsourcelines(SerialWorker.submit)
    start = next(first + i for i, text in enumerate(lines) if "start(self._thread)" in text)

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is code and event == "line" and frame.f_lineno == start:
            sys.settrace(None)
            raise KeyboardInterrupt
        return tracer if frame.f_code is code else None

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            work.submit(lambda: None)
    finally:
        sys.settrace(None)
    assert work.submit(lambda: 42).result(timeout=5) == 42
    work.retire()


def test_lanes_run_calls_side_by_side_up_to_their_width_once_calls_are_slow() -> None:
    """Review 61, F1: the sync renewer's rounds of one target ran one at a time, and slow
    ones (a stopped quorum master's node timeout) starved the rest. Once a call has been
    slow, calls waiting behind one under way get helper threads, up to ``width`` in all."""
    lanes = Lanes("test-lanes", width=3)
    lanes.submit(time.sleep, 0.05).result(timeout=5)  # (slow: the next ones get helpers)
    release = threading.Event()
    inside: list[int] = []

    def blocked(n: int) -> int:
        inside.append(n)
        release.wait(10)
        return n

    futures = [lanes.submit(blocked, n) for n in range(5)]
    assert wait_until(lambda: len(inside) == 3, timeout=5)  # three at once, the width
    time.sleep(0.05)
    assert len(inside) == 3
    release.set()
    assert [f.result(timeout=10) for f in futures] == list(range(5))
    assert wait_until(lambda: lanes._helpers == 0, timeout=5)  # (helpers end when idle)
    lanes.retire()


def test_lanes_keep_one_thread_while_calls_are_quick() -> None:
    """Review 62, F2: a lane per call of a batch started up to 8 threads per provider for
    rounds of a fraction of a millisecond."""
    lanes = Lanes("test-lanes-quick", width=4)
    futures = [lanes.submit(threading.get_ident) for _ in range(500)]
    assert len({f.result(timeout=5) for f in futures}) == 1  # (one thread ran them all)
    lanes.retire()


def test_lanes_help_the_calls_behind_one_that_becomes_slow_while_it_runs() -> None:
    """Review 63, F3: a call counted as quick until it had ended held up every call behind
    it -- with a quorum master stopped, the first round of a batch (0.25 s) made the rest
    wait, and a lease of 1 s was lost. A nudge (the renewer's, as it goes round) gives them
    helpers once the running call has taken longer than SLOW."""
    lanes = Lanes("test-lanes-nudged", width=3)
    release = threading.Event()
    inside: list[int] = []

    def blocked(n: int) -> int:
        inside.append(n)
        release.wait(10)
        return n

    futures = [lanes.submit(blocked, n) for n in range(4)]
    assert wait_until(lambda: inside == [0], timeout=5)
    time.sleep(2 * SLOW)
    lanes.nudge()
    assert wait_until(lambda: len(inside) == 3, timeout=5)  # (the width)
    release.set()
    assert [f.result(timeout=10) for f in futures] == list(range(4))
    lanes.retire()
