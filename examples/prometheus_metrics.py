"""Prometheus metrics for every lock and semaphore: one listener feeds prometheus_client
histograms and counters, labelled by template, function and provider -- never by the rendered
name (``report:2026-01-07``), which would make one time series per day, order or user.

Six threads build the same day's report (five wait their turn), and a refresh that finds the
lock busy is skipped; the script prints the exposition text and checks the counts. In an
application, register the listener once and serve the default registry, e.g. with
``prometheus_client.start_http_server(9100)``.
"""

from __future__ import annotations

import threading
import time

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest

from redlock_deco import (
    Lock,
    LockEvent,
    add_listener,
    locked,
    register_provider,
    remove_listener,
)
from redlock_deco.testing import redis_url

LABELS = ("template", "function", "provider")
#: Seconds: an uncontended lock takes well under a millisecond, a contended one much longer.
BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)


class PrometheusListener:
    """Lock events as Prometheus metrics (``redlock_deco_wait_seconds``,
    ``redlock_deco_hold_seconds``, ``redlock_deco_busy_total``, ``redlock_deco_lost_total``)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.wait = Histogram(
            "redlock_deco_wait_seconds", "Time spent waiting for a lock or semaphore slot",
            [*LABELS, "outcome"], registry=registry, buckets=BUCKETS,
        )  # fmt: skip
        self.hold = Histogram(
            "redlock_deco_hold_seconds", "Time a lock or semaphore slot was held",
            LABELS, registry=registry, buckets=BUCKETS,
        )  # fmt: skip
        self.busy = Counter("redlock_deco_busy", "Waits that ran out", LABELS, registry=registry)
        self.lost = Counter(
            "redlock_deco_lost", "Leases that ended while held", LABELS, registry=registry
        )

    def __call__(self, event: LockEvent) -> None:
        labels = (event.template, event.function or "", event.provider)
        if event.kind in ("acquired", "busy"):
            self.wait.labels(*labels, event.kind).observe(event.seconds or 0.0)
            if event.kind == "busy":
                self.busy.labels(*labels).inc()
        elif event.kind == "released":
            self.hold.labels(*labels).observe(event.seconds or 0.0)
        elif event.kind == "lost":
            self.lost.labels(*labels).inc()


@locked("report:{day}", ttl=10, wait=10)
def build_report(day: str) -> None:
    time.sleep(0.02)


@locked("report:{day}", wait=0, on_busy="skip")
def refresh_report(day: str) -> str:
    return f"refreshed {day}"


def contend(builders: int, day: str = "2026-01-07") -> str | None:
    """``builders`` threads build ``day``'s report at once; one refresh runs meanwhile
    (skipped while the report is being built). Returns what the refresh returned."""
    started = threading.Barrier(builders + 1)
    refreshed: list[str | None] = []

    def build() -> None:
        started.wait()
        build_report(day)

    threads = [threading.Thread(target=build) for _ in range(builders)]
    for thread in threads:
        thread.start()
    started.wait()
    report = Lock(f"report:{day}")
    deadline = time.monotonic() + 5
    while not report.locked() and time.monotonic() < deadline:
        time.sleep(0.001)  # until a builder holds it (the others queue behind it)
    refreshed.append(refresh_report(day))
    for thread in threads:
        thread.join()
    return refreshed[0]


def main() -> int:
    registry = CollectorRegistry()  # the default REGISTRY in an application
    listener = PrometheusListener(registry)
    add_listener(listener)
    try:
        with redis_url() as url:
            register_provider("default", url)
            refreshed = contend(6)
    finally:
        remove_listener(listener)
    for line in generate_latest(registry).decode().splitlines():
        if not line.startswith("#") and "_bucket{" not in line and "_created{" not in line:
            print(line)  # counts and sums (a scrape shows the buckets too)
    labels = {"template": "report:{day}", "provider": "default"}
    builder = {**labels, "function": f"{__name__}.build_report"}
    waits = registry.get_sample_value(
        "redlock_deco_wait_seconds_count", {**builder, "outcome": "acquired"}
    )
    holds = registry.get_sample_value("redlock_deco_hold_seconds_count", builder)
    busy = registry.get_sample_value(
        "redlock_deco_busy_total", {**labels, "function": f"{__name__}.refresh_report"}
    )
    waits, holds = waits or 0.0, holds or 0.0
    print(
        f"6 builds waited and held: {waits:.0f} and {holds:.0f}; refresh {refreshed}, busy {busy}"
    )
    return 0 if waits == holds == 6 and busy == 1 and refreshed is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
