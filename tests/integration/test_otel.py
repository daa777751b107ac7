"""``redlock_deco.otel``: spans and metrics from real locks on a real server, read back
through the OpenTelemetry SDK's own in-memory span exporter and metric reader -- contended
waits, busy (``on_busy="skip"``), leases lost at release and found lost by renewal, sync and
async -- and the clear ImportError without the ``otel`` extra."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from support.flavours import Api

from redlock_deco import LockLost, add_listener, limited, locked, remove_listener, throttled
from redlock_deco.otel import (
    BUSY,
    HOLD_DURATION,
    HOLD_SPAN,
    LOST,
    THROTTLE_DELAY,
    THROTTLE_SPAN,
    THROTTLED,
    WAIT_DURATION,
    WAIT_SPAN,
    OpenTelemetryListener,
)

T = "redlock_deco.template"
F = "redlock_deco.function"
P = "redlock_deco.provider"
O = "redlock_deco.outcome"  # noqa: E741  # a constant, not a loop variable


@dataclass
class Telemetry:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for one in scope.metrics:
                    if one.name == metric:
                        found.extend(one.data.data_points)
        return found


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    listener = OpenTelemetryListener(tracer_provider, meter_provider)
    add_listener(listener)
    yield Telemetry(exporter, reader, tracer_provider)
    remove_listener(listener)
    meter_provider.shutdown()
    tracer_provider.shutdown()


def qualified(func: Any) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def duration(span: ReadableSpan) -> float:
    assert span.start_time is not None and span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


def test_contended_waits_and_holds(api: Api, otel: Telemetry) -> None:
    async def charge_body(order_id: int) -> None:
        await api.sleep(0.05)

    charge = api.decorate(locked("otel:order:{order_id}", wait=5), charge_body)

    async def scenario(api: Api) -> None:
        async with api.Lock("otel:order:7"):
            waiter = api.spawn(lambda: api.call(charge, 7))
            await api.sleep(0.3)
        await api.join(waiter)

    api.run(scenario)
    labels = {T: "otel:order:{order_id}", F: qualified(charge_body), P: "default"}
    [waited] = [s for s in otel.spans(WAIT_SPAN) if s.attributes and s.attributes.get(F)]
    assert waited.attributes == {**labels, O: "acquired", "redlock_deco.name": "otel:order:7",
                                 "redlock_deco.key": "lock:otel:order:7"}  # fmt: skip
    assert 0.2 < duration(waited) < 2.0  # the start is backdated by the time waited
    holds = {s.attributes[T]: s for s in otel.spans(HOLD_SPAN) if s.attributes}
    assert set(holds) == {"otel:order:{order_id}", "otel:order:7"}
    assert 0.25 < duration(holds["otel:order:7"]) < 2.0  # the holder, a Lock used directly
    assert F not in (holds["otel:order:7"].attributes or {})
    assert holds["otel:order:{order_id}"].attributes[O] == "released"  # type: ignore[index]
    assert all(s.status.status_code is StatusCode.UNSET for s in otel.spans(HOLD_SPAN))
    assert all("order:7" not in s.name for s in otel.exporter.get_finished_spans())

    [wait_point] = [p for p in otel.points(WAIT_DURATION) if p.attributes.get(F)]
    assert dict(wait_point.attributes) == {**labels, O: "acquired"}
    assert wait_point.count == 1 and 0.2 < wait_point.sum < 2.0
    [hold_point] = [p for p in otel.points(HOLD_DURATION) if p.attributes.get(F)]
    assert dict(hold_point.attributes) == {**labels, O: "released"}
    assert hold_point.count == 1 and 0.04 < hold_point.sum < 1.0
    for metric in (WAIT_DURATION, HOLD_DURATION):  # names and keys never label a metric
        for point in otel.points(metric):
            assert not {"redlock_deco.name", "redlock_deco.key"} & set(point.attributes)
    assert otel.points(BUSY) == [] and otel.points(LOST) == []


def test_busy_with_on_busy_skip(api: Api, otel: Telemetry) -> None:
    async def job_body() -> str:
        return "ran"

    job = api.decorate(locked("otel:job", wait=0.1, on_busy="skip"), job_body)

    async def scenario(api: Api) -> Any:
        async with api.Lock("otel:job"):
            return await api.join(api.spawn(lambda: api.call(job)))

    assert api.run(scenario) is None
    labels = {T: "otel:job", F: qualified(job_body), P: "default"}
    [busy] = otel.points(BUSY)
    assert dict(busy.attributes) == labels and busy.value == 1
    [waited] = [s for s in otel.spans(WAIT_SPAN) if (s.attributes or {}).get(O) == "busy"]
    assert 0.08 < duration(waited) < 1.0
    [point] = [p for p in otel.points(WAIT_DURATION) if p.attributes.get(O) == "busy"]
    assert dict(point.attributes) == {**labels, O: "busy"} and point.count == 1


@pytest.mark.parametrize("how", ["expired", "deleted"])
def test_a_lost_lease(api: Api, otel: Telemetry, r: redis.Redis, how: str) -> None:
    """Expired with auto_renew=False: the release finds it gone. Deleted while renewed: the
    renewer finds it gone first, in its own thread or task. Either way the hold span and the
    hold histogram say lost, and the lost counter counts it once."""

    async def overrun_body() -> None:
        if how == "deleted":
            r.delete("lock:otel:lost")
        await api.sleep(0.3)  # past the ttl, or past a renewal (ttl/3)

    async def next_body() -> None: ...

    renew = how == "deleted"
    overrun = api.decorate(locked("otel:lost", ttl=0.15, auto_renew=renew), overrun_body)
    next_holder = api.decorate(locked("otel:lost"), next_body)

    async def scenario(api: Api) -> None:
        with pytest.raises(LockLost):
            await api.call(overrun)
        await api.call(next_holder)

    api.run(scenario)
    labels = {T: "otel:lost", F: qualified(overrun_body), P: "default"}
    [lost] = otel.points(LOST)
    assert dict(lost.attributes) == labels and lost.value == 1
    holds = [s for s in otel.spans(HOLD_SPAN) if s.attributes and s.attributes[T] == "otel:lost"]
    assert len(holds) == 2
    lost_span, kept_span = sorted(holds, key=lambda s: s.start_time or 0)
    assert lost_span.attributes and lost_span.attributes[O] == "lost"
    assert lost_span.status.status_code is StatusCode.ERROR and duration(lost_span) > 0.25
    # The next hold of the same key, after the loss was reported, is not marked lost.
    assert kept_span.attributes and kept_span.attributes[O] == "released"
    assert kept_span.status.status_code is StatusCode.UNSET
    outcomes = {p.attributes[O]: p.count for p in otel.points(HOLD_DURATION)}
    assert outcomes == {"lost": 1, "released": 1}


def test_wait_and_hold_spans_are_children_of_the_callers_span(api: Api, otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("the-app")

    async def export_body(tenant: str) -> None: ...

    export = api.decorate(limited("otel:partner:{tenant}", limit=2), export_body)

    async def scenario(api: Api) -> Any:
        with tracer.start_as_current_span("request") as request:
            await api.call(export, "acme")
        return request.get_span_context().span_id

    parent = api.run(scenario)
    ours = [*otel.spans(WAIT_SPAN), *otel.spans(HOLD_SPAN)]
    assert len(ours) == 2
    assert all(s.parent is not None and s.parent.span_id == parent for s in ours)
    assert all(s.attributes and s.attributes[T] == "otel:partner:{tenant}" for s in ours)


def test_a_throttle_reports_admissions_waits_and_refusals(otel: Telemetry) -> None:
    @throttled("otel:api:{tenant}", rate=2, per=1.0, burst=1, wait=0.6, on_busy="skip")
    def call(tenant: str) -> str:
        return tenant

    assert call("acme") == "acme"
    # The next slot is 0.5 s away (within wait), the one after 1 s (beyond it, for a call
    # made within 0.4 s: refused). Wide margins: CI found the first ones (20 ms) too tight.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        later = pool.submit(call, "acme")
        time.sleep(0.1)  # its reservation first
        last = pool.submit(call, "acme")
        assert sorted(map(str, [later.result(), last.result()])) == ["None", "acme"]
    labels = {T: "otel:api:{tenant}", F: qualified(call), P: "default"}
    spans = otel.spans(THROTTLE_SPAN)
    assert sorted(s.attributes[O] for s in spans if s.attributes) == [
        "admitted", "admitted", "throttled"
    ]  # fmt: skip
    spans.sort(key=lambda s: (s.attributes or {}).get(O) == "throttled")
    assert spans[0].attributes == {**labels, O: "admitted", "redlock_deco.name": "otel:api:acme",
                                   "redlock_deco.key": "throttle:otel:api:acme"}  # fmt: skip
    assert 0 < duration(spans[1]) < 0.51 and duration(spans[2]) == 0  # slept for its slot
    [delays] = otel.points(THROTTLE_DELAY)
    assert dict(delays.attributes) == labels and delays.count == 2 and 0 < delays.sum < 0.51
    [refused] = otel.points(THROTTLED)
    assert dict(refused.attributes) == labels and refused.value == 1


def test_losses_never_released_are_bounded(otel: Telemetry) -> None:
    """A lost lease whose holder never gives it back leaves a note; notes cannot pile up."""
    from redlock_deco import LockEvent
    from redlock_deco import otel as module

    listener = OpenTelemetryListener(otel.tracer_provider)
    for n in range(module.MAX_PENDING_LOSSES + 50):
        listener(LockEvent("lost", f"n{n}", f"lock:n{n}", None, "n{n}", None, "default"))
    assert len(listener._losses) == module.MAX_PENDING_LOSSES
    assert ("default", "lock:n0") not in listener._losses  # the oldest went first


def test_without_the_otel_extra_the_import_error_names_it() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
        import redlock_deco  # the package itself never needs it
        try:
            import redlock_deco.otel
        except ImportError as exc:
            print(exc)
        else:
            raise SystemExit("imported without opentelemetry")
        """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pip install 'redlock-deco[otel]'" in done.stdout


def test_the_module_does_not_shadow_the_opentelemetry_package() -> None:
    code = "import redlock_deco.otel, opentelemetry.trace; print(opentelemetry.trace.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "redlock_deco" not in done.stdout and "opentelemetry" in done.stdout
