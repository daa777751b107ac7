"""The sync renewer's thread wakes for every job it is given, whatever line of an earlier
``add`` an interrupt cut short (a KeyboardInterrupt between its two last lines once left the
thread asleep until its own wake-up time, up to IDLE seconds, and every later add with it:
a dropped section's lease stayed held that long on a loaded machine). Threads only: the
jobs run on a fake target that records what it was sent."""

from __future__ import annotations

import inspect
import sys
import threading
import time
from types import FrameType
from typing import Any

import pytest
from support.core_helpers import make_claim
from support.samples import wait_until

from redlock_deco import _renewal as renewal
from redlock_deco._lifecycle import Cleanup
from redlock_deco._protocol import SINGLE


class FakeTarget:
    """Answers every step as a successful release, and remembers when it was asked."""

    algorithms = SINGLE
    renewal_worker = None

    def __init__(self) -> None:
        self.sent = threading.Event()

    def execute(self, step: Any) -> Any:
        self.sent.set()
        return 1


def cleanup(token: str, target: FakeTarget, due_in: float = 0.0) -> Cleanup:
    return Cleanup(make_claim("lock:wake", token=token), target, time.monotonic() + due_in)


def add_lines() -> list[int]:
    lines, start = inspect.getsourcelines(renewal.Renewer._add_locked)
    body = [start + i for i, text in enumerate(lines) if text.strip() and i > 0]
    return [line for line in body if not lines[line - start].strip().startswith(("#", '"'))]


@pytest.mark.parametrize("state", ["idling", "ended"])
@pytest.mark.parametrize("line", add_lines())
def test_a_job_added_after_an_interrupted_add_runs_at_once(
    line: int, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In both states of the thread: idling, and ended (idle long enough: the add starts a
    new one). An interrupt between creating that thread and starting it left a thread never
    started standing for the renewer: nothing of the process was renewed or given back again
    (CI's interrupts leg, once the renewer had ended just before an interrupted add)."""
    if state == "ended":
        monkeypatch.setattr(renewal, "IDLE", 0.05)
    renewer = renewal.Renewer()
    first = FakeTarget()
    renewer.add(cleanup("warm", first))  # the thread runs, then idles (its table empty)
    assert first.sent.wait(2)
    time.sleep(0.3)
    if state == "ended":
        assert wait_until(lambda: renewer._thread is None, 5)

    code = renewal.Renewer._add_locked.__code__

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is code:
            if event == "line" and frame.f_lineno == line:
                sys.settrace(None)
                raise KeyboardInterrupt
            return tracer
        return tracer if event == "call" and frame.f_code is code else None

    later = FakeTarget()
    sys.settrace(tracer)
    try:
        renewer.add(cleanup("interrupted", later))  # due at once
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    started = time.monotonic()
    now = FakeTarget()
    renewer.add(cleanup("now", now))  # due a moment after the interrupted one
    assert now.sent.wait(6), f"an add interrupted at line {line} left the renewer asleep"
    waited = time.monotonic() - started
    assert waited < 1.0, f"an add interrupted at line {line}: the next job waited {waited:.2f} s"


def test_short_leases_that_come_and_go_do_not_wake_the_thread_each_time() -> None:
    """Jobs due far ahead, added and removed as an uncontended lock cycle does, are noticed
    at the thread's own next wake-up: an add notifies only when it is due before that. (An
    idle thread that called its wake-up time "never" was notified by every add, woke after
    the job had gone, and said "never" again: one wake-up per lock cycle, +14% client CPU.)"""
    renewer = renewal.Renewer()
    warm = FakeTarget()
    renewer.add(cleanup("warm", warm))  # the thread runs, then idles (its table empty)
    assert warm.sent.wait(2)
    time.sleep(0.3)
    notified = [0]
    notify = renewer._wake.notify

    def counted(n: int = 1) -> None:
        notified[0] += 1
        notify(n)

    renewer._wake.notify = counted  # type: ignore[method-assign]
    target = FakeTarget()
    cycles = 0
    deadline = time.monotonic() + 0.6  # three of the thread's polls
    while time.monotonic() < deadline:
        job = cleanup(f"cycle-{cycles}", target, due_in=30.0)
        renewer.add(job)
        renewer.remove(job)
        time.sleep(0.0005)  # (the round trips of the next cycle: the thread runs meanwhile)
        cycles += 1
    assert cycles > 100
    assert notified[0] <= 6, f"{notified[0]} wake-ups for {cycles} cycles"
