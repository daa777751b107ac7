"""A KeyboardInterrupt anywhere in a flag's or a serial worker's code run on another
thread's behalf leaves nothing locked (review 40, 4-6).

``threading.Event`` and ``Condition`` take their lock in ``Condition.__enter__``, Python
code: an interrupt raised as it returns leaves the lock held for good, and every thread that
touches the event again hangs -- the thread whose grant the sync reader was waking, every
waiter once the first one's subscription "set" was interrupted, every call through a quorum
master whose worker's submit() was. Here the interrupt comes at every line and every return
of the calls, in this thread and in the functions they call (threading's too); after each,
another thread must still get through within a second.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from support.interrupts import signal_cannot_land

from redlock_deco._flag import Flag
from redlock_deco._worker import SerialWorker


class Interrupted(KeyboardInterrupt):
    pass


def _ours(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_globals.get("__name__", "").startswith("redlock_deco")


def interrupt_at(n: int, call: Callable[[], Any]) -> bool:
    """Run ``call`` with a KeyboardInterrupt raised at the ``n``-th place a signal could be:
    a line of the package's code, or the return of a function it called (a signal is checked
    right after a call returns: after ``Condition.__enter__``'s acquire, as here). Whether it
    came before ``call`` ended. (The standard library's own lines are left alone: an interrupt
    inside ``Thread.start()``, say, breaks threading itself, which no code of ours can mend.)"""
    seen = 0
    fired = False

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal seen, fired
        if fired:
            return None
        if event == "line":
            if not _ours(frame) or signal_cannot_land(frame.f_code, frame.f_lineno, frame.f_lasti):
                return tracer
        elif event != "return" or not _ours(frame.f_back):
            return tracer
        seen += 1
        if seen == n:
            fired = True
            raise Interrupted
        return tracer

    sys.settrace(tracer)
    try:
        call()
    except Interrupted:
        pass
    finally:
        sys.settrace(None)
    return fired


def gets_through(action: Callable[[], Any]) -> bool:
    """Whether ``action`` ends within a second on another thread (its error, raised here)."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            failed.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    ended = done.wait(1.0)
    if failed:
        raise failed[0]
    return ended


def every_interrupt(
    make: Callable[[], Any], call: Callable[[Any], Any], check: Callable[[Any], Any]
) -> int:
    """Interrupt ``call(made)`` at each of its events in turn, each on a fresh ``make()``,
    and require ``check(made)`` to get through after each; how many were tried."""
    n = 1
    while True:
        made = make()
        if not interrupt_at(n, lambda made=made: call(made)):
            return n - 1
        assert gets_through(lambda made=made: check(made)), f"wedged by an interrupt at event {n}"
        n += 1


@pytest.mark.parametrize("step", ["set", "clear", "wait"])
def test_an_interrupted_flag_wedges_no_other_thread(step: str) -> None:
    def call(flag: Flag) -> None:
        if step == "set":
            flag.set()
        elif step == "clear":
            flag.clear()
        else:
            flag.wait(0.001)

    def check(flag: Flag) -> None:
        waiter = threading.Thread(target=flag.wait, args=(5,))
        waiter.start()
        flag.set()
        waiter.join()
        flag.clear()
        assert not flag.wait(0.01)

    assert every_interrupt(Flag, call, check) > 0


def test_a_flag_wakes_its_waiters_and_times_out() -> None:
    flag = Flag()
    assert not flag.wait(0.01) and not flag.is_set()
    woken: list[bool] = []
    waiters = [threading.Thread(target=lambda: woken.append(flag.wait(5))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    flag.set()
    for waiter in waiters:
        waiter.join(2)
    assert woken == [True, True, True] and flag.is_set() and flag.wait(0)
    flag.clear()
    assert not flag.is_set() and not flag.wait(0.01)


def test_an_interrupted_submit_wedges_no_later_submit() -> None:
    def check(worker: SerialWorker) -> None:
        assert worker.submit(lambda: 7).result(5) == 7

    assert every_interrupt(lambda: SerialWorker("test-worker", idle=0.2),
                           lambda worker: worker.submit(lambda: 1), check) > 3  # fmt: skip
