"""``label=``: a fixed, low-cardinality name for the events and metrics of a lock whose names
grow with the data. A ``Lock``/``Semaphore`` used directly (sync and asyncio) has no template
of its own -- its events' ``template`` is its full name -- unless it is given a label; on
``@locked``/``@limited`` a label replaces the template, and ``function`` stays. Real server,
every kind of event, and the OpenTelemetry listener's spans and metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from support.flavours import Api

from redlock_deco import (
    LockEvent,
    LockLost,
    LockNotAcquired,
    add_listener,
    limited,
    locked,
    remove_listener,
)


@pytest.fixture
def recorded() -> Iterator[list[LockEvent]]:
    seen: list[LockEvent] = []
    add_listener(seen.append)
    yield seen
    remove_listener(seen.append)


def qualified(func: Any) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def labels(recorded: list[LockEvent], prefix: str) -> set[tuple[str, str, str | None, str]]:
    return {
        (e.kind, e.template, e.function, e.provider) for e in recorded if e.name.startswith(prefix)
    }


def test_every_event_of_a_labelled_primitive_carries_its_label(
    api: Api, r: redis.Redis, recorded: list[LockEvent]
) -> None:
    async def busy() -> None:  # another thread or task: the holder's own would re-enter
        with pytest.raises(LockNotAcquired):
            async with api.Lock("order:3", label="orders", wait=0):
                pass

    async def scenario(api: Api) -> None:
        for order_id in (1, 2):  # two names, one label
            async with api.Lock(f"order:{order_id}", label="orders", ttl=0.15):
                await api.sleep(0.1)  # past a renewal (ttl/3)
        async with api.Lock("order:3", label="orders"):
            await api.join(api.spawn(busy))
        with pytest.raises(LockLost):
            async with api.Lock("order:4", label="orders", auto_renew=False):
                r.delete("lock:order:4")
        async with api.Semaphore("tenant:acme", limit=2, label="tenants"):
            pass
        async with api.Lock("order:5"):  # no label: its name, as before
            pass

    api.run(scenario)
    orders = labels(recorded, "order:")
    assert {kind for kind, *_ in orders} >= {"acquired", "released", "renewed", "busy", "lost"}
    assert {tuple(labelled) for _, *labelled in orders} == {
        ("orders", None, "default"),
        ("order:5", None, "default"),
    }
    assert [e.template for e in recorded if e.name == "order:5"] == ["order:5", "order:5"]
    assert labels(recorded, "tenant:") == {
        ("acquired", "tenants", None, "default"),
        ("released", "tenants", None, "default"),
    }
    assert {e.name for e in recorded if e.template == "orders"} == {
        f"order:{n}" for n in range(1, 5)
    }


def test_a_decorators_label_replaces_its_template_and_keeps_its_function(
    api: Api, recorded: list[LockEvent]
) -> None:
    async def charge_body(order_id: int) -> None: ...

    async def export_body(tenant: str) -> None: ...

    charge = api.decorate(locked("order:{order_id}", label="charges"), charge_body)
    export = api.decorate(limited("export:{tenant}", 2, label="exports"), export_body)

    async def scenario(api: Api) -> None:
        await api.call(charge, 7)
        await api.call(export, "acme")

    api.run(scenario)
    assert labels(recorded, "order:7") == {
        ("acquired", "charges", qualified(charge_body), "default"),
        ("released", "charges", qualified(charge_body), "default"),
    }
    assert {(e.template, e.function) for e in recorded if e.name == "export:acme"} == {
        ("exports", qualified(export_body))
    }


def test_otel_labels_metrics_and_spans_by_the_label(api: Api) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from redlock_deco.otel import HOLD_DURATION, HOLD_SPAN, WAIT_DURATION, OpenTelemetryListener

    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    listener = OpenTelemetryListener(tracer_provider, meter_provider)
    add_listener(listener)
    try:

        async def scenario(api: Api) -> None:
            for order_id in (1, 2, 3):
                async with api.Lock(f"otel-label:{order_id}", label="orders"):
                    pass

        api.run(scenario)
    finally:
        remove_listener(listener)
    data = reader.get_metrics_data()
    points = [
        (metric.name, dict(point.attributes or {}), getattr(point, "count", None))
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
        if metric.name in (WAIT_DURATION, HOLD_DURATION)
    ]
    meter_provider.shutdown()
    tracer_provider.shutdown()
    # Three names, one series per metric and outcome: the label, never the name.
    assert sorted((name, count) for name, _, count in points) == [
        (HOLD_DURATION, 3),
        (WAIT_DURATION, 3),
    ]
    for _, attributes, _ in points:
        assert attributes["redlock_deco.template"] == "orders"
        assert "redlock_deco.function" not in attributes
        assert not {"redlock_deco.name", "redlock_deco.key"} & set(attributes)
    holds = [s for s in exporter.get_finished_spans() if s.name == HOLD_SPAN]
    assert len(holds) == 3
    assert all((s.attributes or {}).get("redlock_deco.template") == "orders" for s in holds)
    assert {(s.attributes or {}).get("redlock_deco.name") for s in holds} == {
        f"otel-label:{n}" for n in (1, 2, 3)
    }
