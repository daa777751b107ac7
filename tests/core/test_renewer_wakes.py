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


@pytest.mark.parametrize("line", add_lines())
def test_a_job_added_after_an_interrupted_add_runs_at_once(line: int) -> None:
    renewer = renewal.Renewer()
    first = FakeTarget()
    renewer.add(cleanup("warm", first))  # the thread runs, then idles (its table empty)
    assert first.sent.wait(2)
    time.sleep(0.3)

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
