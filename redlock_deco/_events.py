"""Events: what happened to a lease, for logs and metrics.

``add_listener(fn)`` registers ``fn(event)``; events are ``acquired`` (with the time waited),
``released`` (with the time held), ``busy`` (``wait`` ran out, with the time waited), ``lost``
(found by renewal or at release) and ``renewed``; a throttle's (``@throttled``, which holds
no lease) are ``admitted`` (with the time the call slept for its slot) and ``throttled`` (no
slot within ``wait``, nothing taken; with how far away the next one was). A lease's last
event is ``released``: a ``lost`` for it comes first (so a listener can tell a hold that ended
lost without waiting for news that may never come). Listeners run synchronously where the
event happens (the calling thread or task, or the renewer); keep them quick. A listener that
raises is logged and ignored. With no listener registered nothing is built: the hot path pays
one truth test of a tuple.

Labels: ``name`` and ``key`` are per call (``order:7``) and grow with the data, so they must
never be metric labels. ``template``, ``function`` and ``provider`` are fixed where the lock is
written -- one value per decorated function or primitive object -- and are what metrics and
span attributes are labelled by. They are worked out once, when the function is decorated or
the object built (a :class:`Source`), never per call.
"""

from __future__ import annotations

import logging
import operator
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

EventKind = Literal["acquired", "released", "busy", "lost", "renewed", "admitted", "throttled"]
Listener = Callable[["LockEvent"], object]

log = logging.getLogger("redlock_deco")

#: The registered listeners; replaced (never mutated) so readers need no lock.
listeners: tuple[Listener, ...] = ()
_registering = threading.Lock()


def _unheld_in_child() -> None:
    """A new lock in a forked child (see _guard's: a parent's thread may have held it)."""
    global _registering
    _registering = threading.Lock()


os.register_at_fork(after_in_child=_unheld_in_child)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a lease comes from: the low-cardinality labels of its events, built once per
    decorated function or primitive object (see :class:`LockEvent`)."""

    template: str
    function: str | None
    provider: str

    @classmethod
    def direct(cls, name: str, provider: str) -> Source:
        """A ``Lock``/``Semaphore`` used directly: its name is its template."""
        return cls(name, None, provider)


@dataclass(frozen=True, slots=True)
class LockEvent:
    """One thing that happened to a lease (see :func:`add_listener`).

    Per call -- never use these as metric labels, they grow with your data:

    - ``name``: the rendered name (``"order:7"``); ``key``: the Redis key (``"lock:order:7"``).
    - ``seconds``: ``acquired``/``busy``: the time waited; ``released``: the time held;
      ``admitted``: the time slept until the call's slot; ``throttled``: how far away the
      next slot was; None for ``lost`` and ``renewed``.

    Fixed where the lock is written -- label metrics and spans by these:

    - ``template``: the name as written in the code. ``@locked("order:{order_id}")`` gives
      ``"order:{order_id}"``; ``@locked`` with no name gives the default name
      (``"<module>.<qualname>"``); a name callable gives its qualified name followed by
      ``()`` (``"app.orders.lock_name()"``); several names give their templates joined by
      ``", "``. For ``Lock(name)`` and ``Semaphore(name)`` used directly it is the name
      itself, so it is low-cardinality only if the names you give them are.
    - ``function``: the decorated function's ``"<module>.<qualname>"`` (for a bound method,
      a partial or a callable object, the code the call runs, as ``name=None`` names it);
      None for a ``Lock`` or ``Semaphore`` used directly.
    - ``provider``: the provider's registered name (``"default"``).

    The last three have defaults only so that events built by hand the 0.1 way
    (``LockEvent(kind, name, key, seconds)``) still construct; every event the library
    emits sets them.
    """

    kind: EventKind
    name: str
    key: str
    seconds: float | None = None  # acquired/busy/admitted: time waited; released: time held
    template: str = ""
    function: str | None = None
    provider: str = ""


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


def emit(
    kind: EventKind,
    name: str,
    key: str,
    seconds: float | None,
    source: Source,
    heard: Callable[[], object] | None = None,
) -> None:
    """Call every listener with the event; ``heard()`` right before the first is called
    (what is done then is not done again if a listener's own exception comes out).

    ``heard`` and the first listener are called in one C call (``list(map(...))``): a
    signal is raised only as a Python function starts or after a call returns, so it lands
    before both, or as the listener starts -- then the listener's own, as one inside it. Apart,
    one landing as ``heard()`` returned left the event marked as sent, and it never was
    (review 96, F3; ``heard`` is a C callable too: see say_released)."""
    event = LockEvent(kind, name, key, seconds, source.template, source.function,
                      source.provider)  # fmt: skip
    for listener in listeners:
        try:
            if heard is None:
                listener(event)
            else:
                first, heard = heard, None
                list(map(_call, (first, partial(listener, event))))
        except Exception:
            log.exception("redlock_deco event listener %r failed on %s", listener, kind)


_call = operator.methodcaller("__call__")  # (operator.call is Python 3.11's)


def emit_renewing(kind: EventKind, name: str, key: str, source: Source) -> None:
    """``emit`` from a renewal round ("renewed", "lost"): no listener may stop it -- not even
    with SystemExit or KeyboardInterrupt (a listener calling sys.exit(), or a Ctrl-C landing
    in one on the loop's thread), which skipped the lease's on_lost, and out of an asyncio
    renewal task, ended asyncio.run (review 67, F2). Logged, as on_lost's are."""
    try:
        emit(kind, name, key, None, source)
    except BaseException:
        log.exception("redlock_deco event listener failed on %s (renewals go on)", kind)


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
        elif event.kind == "throttled" and event.seconds is not None:
            timing = f", next slot in {event.seconds * 1000:.1f} ms"
        self.logger.log(self.level, "%s %s (%s)%s", event.kind, event.name, event.key, timing)
