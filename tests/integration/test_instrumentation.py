"""Lock commands are visible to the tracing users already run: with OpenTelemetry's redis
instrumentation on (and anything else that wraps ``Redis.execute_command``: ddtrace's and
Sentry's integrations, an application's own), every command we send goes through the client's
``execute_command``, where it sees them; with nothing wrapped, the direct path stays."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import redlock_deco.asyncio
from redlock_deco import Lock, Semaphore, limited, locked
from redlock_deco._drivers import traced

CALLS = 5


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """OpenTelemetry's redis instrumentation, on for the test, spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = RedisInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()


class Sent:
    """Every command clients send to the server meanwhile, as MONITOR reports them (not the
    ones scripts run inside): the oracle for "every command appears"."""

    END = "instrumentation-test-end"

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.commands: list[str] = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _read(self) -> None:
        with self.r.monitor() as monitor:
            self.ready.set()
            for entry in monitor.listen():
                if entry["client_type"] == "lua":
                    continue
                if entry["command"] == f"ECHO {self.END}":
                    return
                self.commands.append(entry["command"].split()[0].upper())

    def __enter__(self) -> Sent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.r.echo(self.END)
        self.thread.join(10)
        assert not self.thread.is_alive()

    def lock_commands(self) -> list[str]:
        return [name for name in self.commands if name in LOCK_COMMANDS]


LOCK_COMMANDS = ("EVALSHA", "EVAL", "SET")


def lock_commands(exporter: InMemorySpanExporter) -> list[str]:
    return [
        span.name for span in exporter.get_finished_spans() if span.name.split()[0] in LOCK_COMMANDS
    ]


def test_opentelemetry_sees_every_command_of_sync_locks_and_semaphores(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    client = redis.Redis.from_url(_url(r))
    redlock_deco.register_provider("default", client)
    assert traced(client)

    @locked("traced:{n}")
    def call(n: int) -> int:
        return n

    @limited("traced", limit=2)
    def limited_call(n: int) -> int:
        return n

    with Sent(r) as sent:
        for n in range(CALLS):
            assert call(n) == n
            assert limited_call(n) == n
        with Lock("traced:obj", ttl=5) as lock:
            lock.extend(to=6)
        with Semaphore("traced:obj", limit=3):
            pass
    assert len(sent.lock_commands()) >= 4 * CALLS + 5  # (each cycle: acquire + release)
    assert lock_commands(spans) == sent.lock_commands()  # every one of them, in order
    assert r.dbsize() == 0


def test_with_nothing_wrapped_the_direct_path_is_kept(r: redis.Redis) -> None:
    client = redis.Redis.from_url(_url(r))
    assert not traced(client)
    exporter = InMemorySpanExporter()
    with Lock("untraced", ttl=5):
        pass
    assert exporter.get_finished_spans() == ()


def test_any_wrapper_of_execute_command_sees_the_commands(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ddtrace wraps the class method with wrapt, Sentry replaces it with a function of its
    own (made with functools.wraps); an application may wrap one client. All of them see."""
    seen: list[str] = []
    plain = redis.Redis.execute_command

    @functools.wraps(plain)
    def wrapped(self: redis.Redis, *args: Any, **options: Any) -> Any:
        seen.append(str(args[0]))
        return plain(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", wrapped)
    client = redis.Redis.from_url(_url(r))
    redlock_deco.register_provider("default", client)
    with Lock("wrapped", ttl=5):
        pass
    assert [name for name in seen if name in ("EVALSHA", "EVAL", "SET")]
    monkeypatch.undo()

    one = redis.Redis.from_url(_url(r))
    assert not traced(one)
    mine: list[str] = []
    original = one.execute_command

    def instance_wrapper(*args: Any, **options: Any) -> Any:
        mine.append(str(args[0]))
        return original(*args, **options)

    one.execute_command = instance_wrapper  # type: ignore[method-assign]
    assert traced(one)
    redlock_deco.register_provider("default", one)
    with Lock("wrapped", ttl=5):
        pass
    assert [name for name in mine if name in ("EVALSHA", "EVAL", "SET")]
    assert r.dbsize() == 0


def test_opentelemetry_sees_the_asyncio_commands_too(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    async def main() -> None:
        @locked("traced-async:{n}")
        async def call(n: int) -> int:
            return n

        for n in range(CALLS):
            assert await call(n) == n
        await redlock_deco.aclose()

    with Sent(r) as sent:
        asyncio.run(main())
    assert len(sent.lock_commands()) >= 2 * CALLS
    assert lock_commands(spans) == sent.lock_commands()
    assert r.dbsize() == 0


def _url(r: redis.Redis) -> str:
    kwargs = r.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"
