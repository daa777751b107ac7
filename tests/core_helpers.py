"""Helpers for the pure-core tests: a fake clock and a driver that feeds scripted replies.

The core modules (protocol, quorum, lifecycle, renewal planning) do no I/O, so these tests
need no server: they run an algorithm step by step and read the steps it yields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from redlock_deco import _protocol as protocol
from redlock_deco._protocol import Claim, Keys, Kind


class Clock:
    """A monotonic clock that moves only when a test moves it."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


Advance = Mapping[type, float] | Callable[[Any], float]


def drive(
    steps: Any, replies: list[Any], clock: Clock | None = None, advance: Advance | None = None
) -> tuple[list[Any], Any]:
    """Feed ``replies`` in order and return (the steps seen, the result).

    Before each reply the fake clock moves by ``advance``: a mapping from step type to
    seconds, or a function of the step (so a step can take as long as it says, a Sleep).
    """
    seen: list[Any] = []
    clock = clock or Clock()
    try:
        step = next(steps)
        for reply in replies:
            seen.append(step)
            if callable(advance):
                clock.now += advance(step)
            elif advance is not None:
                clock.now += advance.get(type(step), 0.0)
            step = steps.send(reply)
    except StopIteration as done:
        return seen, done.value
    raise AssertionError(f"algorithm still running after all replies; next step {step!r}")


def make_claim(
    key: str = "lock:k",
    *,
    kind: Kind = protocol.LOCK,
    token: str = "tok",
    ttl_ms: int = 10_000,
    limit: int = 1,
) -> Claim:
    return Claim(kind, Keys.for_key(key, kind), token, ttl_ms, limit)


@pytest.fixture(autouse=True, name="_clean_state")
def no_server() -> None:
    """Overrides conftest's autouse fixture of the same name: pure-core tests need no
    redis-server (import it into a test module as ``_clean_state``)."""
