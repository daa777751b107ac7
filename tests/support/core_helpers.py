"""Helpers for the pure-core tests: a fake clock and a driver that feeds scripted replies.

The core modules (protocol, quorum, lifecycle, renewal planning) do no I/O, so these tests
need no server: they run an algorithm step by step and read the steps it yields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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


def own_length(overrides: Mapping[type, float] | None = None) -> Callable[[Any], float]:
    """An ``advance`` for :func:`drive`: a Wait or a Sleep takes as long as it says, unless
    ``overrides`` names its type (``{Wait: 0.1}``: a grant arriving 0.1 s into the wait)."""
    overrides = overrides or {}

    def advance(step: Any) -> float:
        if type(step) in overrides:
            return overrides[type(step)]
        if isinstance(step, protocol.Wait):
            return float(step.timeout)
        if isinstance(step, protocol.Sleep):
            return float(step.seconds)
        return 0.0

    return advance


def make_claim(
    key: str = "lock:k",
    *,
    kind: Kind = protocol.LOCK,
    token: str = "tok",
    ttl_ms: int = 10_000,
    limit: int = 1,
    fencing: bool = False,
    confirm: bool = False,
) -> Claim:
    return Claim(kind, Keys.for_key(key, kind, fencing), token, ttl_ms, limit, confirm=confirm)
