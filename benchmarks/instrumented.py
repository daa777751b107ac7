"""What Redis tracing costs a lock: ``python -m benchmarks.instrumented`` (needs the ``test``
extra, for opentelemetry-sdk and opentelemetry-instrumentation-redis).

An uncontended ``@locked`` cycle, in rounds, three ways in the same run:

- ``direct``: nothing wraps ``Redis.execute_command``, so the sync API writes its commands to
  pooled connections itself (what every user without tracing runs);
- ``through execute_command``: something wraps it (here a ``functools.wraps`` pass-through,
  as Sentry's integration replaces it), so every command goes through redis-py's
  ``execute_command``, where a tracer would see it;
- ``OpenTelemetry on``: ``RedisInstrumentor`` with an SDK tracer recording spans in memory.

Printed: cycles per second and the ratio to ``direct``, and client CPU per cycle.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import redlock_deco
from redlock_deco.testing import RedisServer

ROUNDS = 4
SECONDS = 1.5


def rate(call: Callable[[int], int]) -> tuple[float, float]:
    """Cycles per second and client CPU µs per cycle, after a warm-up."""
    for n in range(200):
        call(n)
    cpu, started, cycles = time.process_time(), time.perf_counter(), 0
    while time.perf_counter() - started < SECONDS:
        for n in range(100):
            call(n)
        cycles += 100
    return cycles / (time.perf_counter() - started), (time.process_time() - cpu) / cycles * 1e6


def main() -> int:
    with RedisServer() as server:
        redlock_deco.register_provider("default", server.url)

        @redlock_deco.locked("traced:{n}", ttl=10)
        def call(n: int) -> int:
            return n

        plain = redis.Redis.execute_command

        @functools.wraps(plain)
        def wrapped(self: redis.Redis, *args: Any, **options: Any) -> Any:
            return plain(self, *args, **options)

        found: dict[str, list[tuple[float, float]]] = {
            "direct": [],
            "through execute_command": [],
            "OpenTelemetry on": [],
        }
        for _ in range(ROUNDS):
            found["direct"].append(rate(call))
            redis.Redis.execute_command = wrapped  # type: ignore[method-assign]
            try:
                found["through execute_command"].append(rate(call))
            finally:
                redis.Redis.execute_command = plain  # type: ignore[method-assign]
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
            instrumentor = RedisInstrumentor()
            instrumentor.instrument(tracer_provider=provider)
            try:
                found["OpenTelemetry on"].append(rate(call))
            finally:
                instrumentor.uninstrument()
        base = statistics.median(cycles for cycles, _ in found["direct"])
        for way, runs in found.items():
            cycles = statistics.median(c for c, _ in runs)
            cpu = statistics.median(u for _, u in runs)
            print(f"{way}: {cycles:.0f} cycles/s ({cycles / base:.2f}x direct), "
                  f"client CPU {cpu:.0f} us a cycle")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
