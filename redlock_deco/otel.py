"""OpenTelemetry spans and metrics for every lock and semaphore, with only ``opentelemetry-api``.

Install the ``otel`` extra (``pip install 'redlock-deco[otel]'``) and register the listener
once; your OpenTelemetry SDK set-up (exporters, sampling, views) does the rest::

    from redlock_deco import add_listener
    from redlock_deco.otel import OpenTelemetryListener

    add_listener(OpenTelemetryListener())  # the global tracer and meter providers

Spans (``INTERNAL``, children of the span current where the lock was taken or given back):

- ``redlock_deco.wait``: the wait for a lock or slot, ending when it was acquired or ``wait``
  ran out; ``redlock_deco.outcome`` is ``acquired`` or ``busy``.
- ``redlock_deco.hold``: from acquisition to release; ``redlock_deco.outcome`` is
  ``released``, or ``lost`` (status ERROR) when the lease ended while it was held.
- ``redlock_deco.throttle``: a throttle's decision (``@throttled``, ``Throttle``), ending as
  the call's slot came; ``redlock_deco.outcome`` is ``admitted`` or ``throttled`` (no slot
  within ``wait``: a span of no length).

Each carries ``redlock_deco.template``, ``redlock_deco.function`` (decorated functions only)
and ``redlock_deco.provider``, and -- spans only, never metrics -- the per-call
``redlock_deco.name`` and ``redlock_deco.key``. Span names are fixed: a name or key in a span
name would make one span name per order, user or tenant.

Metrics (attributes ``redlock_deco.template``, ``redlock_deco.function``,
``redlock_deco.provider``; the histograms also ``redlock_deco.outcome``):

- ``redlock_deco.wait.duration`` (histogram, s): time waited, acquired or busy;
- ``redlock_deco.hold.duration`` (histogram, s): time held, released or lost;
- ``redlock_deco.busy`` (counter): waits that ran out (``on_busy`` took over);
- ``redlock_deco.lost`` (counter): leases that ended while held;
- ``redlock_deco.throttle.delay`` (histogram, s): how long admitted calls slept for their slot;
- ``redlock_deco.throttled`` (counter): calls a throttle refused (``on_busy`` took over).

Why spans are built after the fact. Events arrive once a wait or a hold is over, with its
length in ``seconds``; each span is started then with ``start_time`` set that far back and
ended at once. Opening a span at ``acquired`` and closing it at ``released`` would need state
per lease that events cannot key (two holders of one semaphore name in one process look the
same), and making it the current span would mean attaching and detaching contexts across
calls we do not control. The price: the protected call's own spans are the hold span's
siblings, not its children.

The one thing kept between events: a lease's ``lost`` always comes before its ``released``
(from the renewer, or from the release itself), so the listener notes each loss per provider
and key and marks the next hold of that key that began before the loss as lost. That is exact
for exclusive locks; for a semaphore (or a lock held ``shared``) with several holders of one
name in this process, the loss may be marked on the span of another holder of that name (the
``lost`` counter stays exact). At most :data:`MAX_PENDING_LOSSES` keys are remembered (the
oldest are dropped), so a lease that is never given back cannot grow it without bound.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Final

try:
    from opentelemetry import metrics, trace
except ImportError as _missing:  # pragma: no cover -- tests/test_otel.py runs it in a subprocess
    raise ImportError(
        "redlock_deco.otel needs the OpenTelemetry API, which redlock-deco does not install "
        "by default: pip install 'redlock-deco[otel]' (or opentelemetry-api>=1.30)"
    ) from _missing

from ._events import LockEvent

__all__ = [
    "BUCKETS",
    "BUSY",
    "HOLD_DURATION",
    "HOLD_SPAN",
    "LOST",
    "MAX_PENDING_LOSSES",
    "THROTTLED",
    "THROTTLE_DELAY",
    "THROTTLE_SPAN",
    "WAIT_DURATION",
    "WAIT_SPAN",
    "OpenTelemetryListener",
]

#: Span names.
WAIT_SPAN: Final = "redlock_deco.wait"
HOLD_SPAN: Final = "redlock_deco.hold"
THROTTLE_SPAN: Final = "redlock_deco.throttle"
#: Instrument names.
WAIT_DURATION: Final = "redlock_deco.wait.duration"
HOLD_DURATION: Final = "redlock_deco.hold.duration"
BUSY: Final = "redlock_deco.busy"
LOST: Final = "redlock_deco.lost"
THROTTLE_DELAY: Final = "redlock_deco.throttle.delay"
THROTTLED: Final = "redlock_deco.throttled"
#: Keys whose losses wait for their lease's release (see the module docstring).
MAX_PENDING_LOSSES: Final = 10_000

#: Histogram buckets, in seconds: an uncontended lock takes well under a millisecond, a
#: contended one can wait for minutes (advice to the SDK: a view overrides it).
BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                  2.5, 5.0, 10.0, 30.0, 60.0, 300.0)  # fmt: skip

_SCOPE = "redlock_deco"


def _version() -> str:
    from . import __version__  # at call time: importing the package here would be circular

    return __version__


# Every listener, for one fork hook (a hook per listener cannot be removed: each listener
# made cost every later fork, review 62, F4).
_LISTENERS: weakref.WeakSet[OpenTelemetryListener] = weakref.WeakSet()


def _unheld() -> None:
    """A new lock for each listener in a forked child, where listeners go on: a parent's
    thread may have held one as it forked, and the child's first loss would have waited for
    it for good (tests/integration/test_fork_locks.py)."""
    for listener in list(_LISTENERS):
        listener._losses_lock = threading.Lock()


os.register_at_fork(after_in_child=_unheld)


class OpenTelemetryListener:
    """Turn lock events into OpenTelemetry spans and metrics (see the module docstring).

    :param tracer_provider: where spans go; the global tracer provider when None (resolved
        lazily, so the listener may be registered before the SDK is configured). Pass
        ``opentelemetry.trace.NoOpTracerProvider()`` for metrics only.
    :param meter_provider: where metrics go; the global meter provider when None. Pass
        ``opentelemetry.metrics.NoOpMeterProvider()`` for spans only.

    Register it with :func:`redlock_deco.add_listener`. Safe to share between threads,
    tasks and event loops.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        version = _version()
        self._tracer = trace.get_tracer(_SCOPE, version, tracer_provider)
        meter = metrics.get_meter(_SCOPE, version, meter_provider)
        self._wait = meter.create_histogram(
            WAIT_DURATION, unit="s", explicit_bucket_boundaries_advisory=BUCKETS,
            description="Time spent waiting for a lock or a semaphore slot, by outcome "
            "(acquired, or busy when wait ran out)",
        )  # fmt: skip
        self._hold = meter.create_histogram(
            HOLD_DURATION, unit="s", explicit_bucket_boundaries_advisory=BUCKETS,
            description="Time a lock or semaphore slot was held, by outcome (released, or "
            "lost when the lease ended while held)",
        )  # fmt: skip
        self._busy = meter.create_counter(
            BUSY, unit="{wait}", description="Waits for a lock or slot that ran out"
        )
        self._lost = meter.create_counter(
            LOST, unit="{lease}", description="Leases that ended while their holder held them"
        )
        self._delay = meter.create_histogram(
            THROTTLE_DELAY, unit="s", explicit_bucket_boundaries_advisory=BUCKETS,
            description="Time a call admitted by a throttle slept until its slot",
        )  # fmt: skip
        self._throttled = meter.create_counter(
            THROTTLED, unit="{call}", description="Calls a throttle had no slot for within wait"
        )
        # (provider, key) -> monotonic times of losses not yet matched with their release.
        self._losses: dict[tuple[str, str], list[float]] = {}
        self._losses_lock = threading.Lock()
        _LISTENERS.add(self)  # (its lock a new one in a forked child: see _unheld)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__}>"

    def __call__(self, event: LockEvent) -> None:
        kind = event.kind
        if kind == "acquired" or kind == "busy":
            self._waited(event, kind)
        elif kind == "released":
            self._released(event)
        elif kind == "lost":
            self._lost.add(1, _labels(event))
            self._note_loss(event)
        elif kind == "admitted" or kind == "throttled":
            self._throttle(event, kind)
        # "renewed" is routine: neither a span nor a metric.

    def _waited(self, event: LockEvent, outcome: str) -> None:
        seconds = event.seconds or 0.0
        labels = _labels(event)
        if outcome == "busy":
            self._busy.add(1, labels)
        labels["redlock_deco.outcome"] = outcome
        self._wait.record(seconds, labels)
        self._span(WAIT_SPAN, event, labels, seconds, lost=False)

    def _throttle(self, event: LockEvent, outcome: str) -> None:
        labels = _labels(event)
        if outcome == "admitted":
            seconds = event.seconds or 0.0
            self._delay.record(seconds, labels)
        else:
            seconds = 0.0  # decided at once: its seconds say how far the next slot was
            self._throttled.add(1, labels)
        labels["redlock_deco.outcome"] = outcome
        self._span(THROTTLE_SPAN, event, labels, seconds, lost=False)

    def _released(self, event: LockEvent) -> None:
        seconds = event.seconds or 0.0
        lost = self._was_lost(event, time.monotonic() - seconds)
        labels = _labels(event)
        labels["redlock_deco.outcome"] = "lost" if lost else "released"
        self._hold.record(seconds, labels)
        self._span(HOLD_SPAN, event, labels, seconds, lost=lost)

    def _span(
        self, span_name: str, event: LockEvent, labels: dict[str, str], seconds: float, lost: bool
    ) -> None:
        end = time.time_ns()
        attributes = {**labels, "redlock_deco.name": event.name, "redlock_deco.key": event.key}
        span = self._tracer.start_span(
            span_name, kind=trace.SpanKind.INTERNAL, attributes=attributes,
            start_time=end - round(seconds * 1e9),
        )  # fmt: skip
        if lost:
            span.set_status(trace.StatusCode.ERROR, "the lease ended while it was held")
        span.end(end_time=end)

    def _note_loss(self, event: LockEvent) -> None:
        key = (event.provider, event.key)
        with self._losses_lock:
            self._losses.setdefault(key, []).append(time.monotonic())
            if len(self._losses) > MAX_PENDING_LOSSES:
                del self._losses[next(iter(self._losses))]  # the oldest key first

    def _was_lost(self, event: LockEvent, began: float) -> bool:
        """Was a loss noted for this key since this hold began? (Consumes that note.)"""
        if not self._losses:  # the usual case: no lock taken for it
            return False
        key = (event.provider, event.key)
        with self._losses_lock:
            times = self._losses.get(key)
            if not times:
                return False
            for index, noted in enumerate(times):
                # Earlier notes belong to older holds of this key, not yet given back.
                if noted >= began:
                    del times[index]
                    if not times:
                        del self._losses[key]
                    return True
            return False


def _labels(event: LockEvent) -> dict[str, str]:
    """The low-cardinality attributes of ``event``: never its name or key."""
    labels = {"redlock_deco.template": event.template, "redlock_deco.provider": event.provider}
    if event.function is not None:
        labels["redlock_deco.function"] = event.function
    return labels
