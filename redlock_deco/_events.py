"""Events: what happened to a lease, for logs and metrics.

``add_listener(fn)`` registers ``fn(event)``; events are ``acquired`` (with the time waited),
``released`` (with the time held), ``busy`` (``wait`` ran out, with the time waited), ``lost``
(found by renewal or at release) and ``renewed``. Listeners run synchronously where the event
happens (the calling thread or task, or the renewer); keep them quick. A listener that raises
is logged and ignored. With no listener registered nothing is built: the hot path pays one
truth test of a tuple.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

EventKind = Literal["acquired", "released", "busy", "lost", "renewed"]
Listener = Callable[["LockEvent"], object]

log = logging.getLogger("redlock_deco")

#: The registered listeners; replaced (never mutated) so readers need no lock.
listeners: tuple[Listener, ...] = ()
_registering = threading.Lock()


@dataclass(frozen=True, slots=True)
class LockEvent:
    kind: EventKind
    name: str
    key: str
    seconds: float | None = None  # acquired/busy: time waited; released: time held


def add_listener(listener: Listener) -> None:
    """Call ``listener(event)`` for every lock and semaphore event from now on."""
    global listeners
    if not callable(listener):
        raise TypeError(f"a listener must be callable, got {listener!r}")
    with _registering:
        listeners = (*listeners, listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling ``listener`` (no error if it was not registered)."""
    global listeners
    with _registering:
        listeners = tuple(
            known for known in listeners if known != listener
        )  # bound methods are new objects each time, equal by value


def emit(kind: EventKind, name: str, key: str, seconds: float | None = None) -> None:
    event = LockEvent(kind, name, key, seconds)
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            log.exception("redlock_deco event listener %r failed on %s", listener, kind)


class LoggingListener:
    """Log every event through :mod:`logging` (``redlock_deco._events`` logger by default)."""

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self.logger: logging.Logger = logger or logging.getLogger("redlock_deco._events")
        self.level: int = level

    def __call__(self, event: LockEvent) -> None:
        if not self.logger.isEnabledFor(self.level):
            return
        timing = "" if event.seconds is None else f" after {event.seconds * 1000:.1f} ms"
        if event.kind == "released" and event.seconds is not None:
            timing = f", held {event.seconds * 1000:.1f} ms"
        self.logger.log(self.level, "%s %s (%s)%s", event.kind, event.name, event.key, timing)
