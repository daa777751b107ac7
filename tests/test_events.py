"""Events: acquired (time waited), released (time held), busy, lost, renewed -- sync and
async -- the logging listener, and listeners that fail."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flavours import Api

from redlock_deco import (
    LockEvent,
    LockLost,
    LoggingListener,
    add_listener,
    locked,
    remove_listener,
)


@pytest.fixture
def recorded() -> Iterator[list[LockEvent]]:
    seen: list[LockEvent] = []
    add_listener(seen.append)
    yield seen
    remove_listener(seen.append)


def test_every_kind_of_event(api: Api, r: redis.Redis, recorded: list[LockEvent]) -> None:
    async def held_a_while() -> None:
        await api.sleep(0.25)  # past a renewal (ttl/3 = 0.1 s)

    async def loses_it() -> None:
        r.delete("lock:ev:lost")
        await api.sleep(0.25)

    renewed = api.decorate(locked("ev:renewed", ttl=0.3), held_a_while)
    lost = api.decorate(locked("ev:lost", ttl=0.3), loses_it)
    busy = api.decorate(locked("ev:busy", wait=0.05), held_a_while)

    async def scenario(api: Api) -> None:
        await api.call(renewed)
        with pytest.raises(LockLost):
            await api.call(lost)
        async with api.Lock("ev:busy"):

            async def attempt() -> None:
                from redlock_deco import LockNotAcquired

                with pytest.raises(LockNotAcquired):
                    await api.call(busy)

            await api.join(api.spawn(attempt))

    api.run(scenario)
    kinds = [(e.kind, e.name) for e in recorded]
    assert ("acquired", "ev:renewed") in kinds and ("renewed", "ev:renewed") in kinds
    assert ("released", "ev:renewed") in kinds
    assert kinds.count(("lost", "ev:lost")) == 1  # found by renewal, reported once
    assert ("busy", "ev:busy") in kinds
    held = next(e for e in recorded if e.kind == "released" and e.name == "ev:renewed")
    assert held.seconds is not None and 0.25 <= held.seconds < 1.0
    waited = next(e for e in recorded if e.kind == "busy")
    assert waited.seconds is not None and 0.04 < waited.seconds < 0.5


def test_logging_listener_and_failing_listeners(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: Any) -> None:
        raise RuntimeError("listener bug")

    listener = LoggingListener(level=logging.WARNING)
    add_listener(broken)
    add_listener(listener)
    try:
        with caplog.at_level(logging.INFO):

            @locked("logged")
            def f() -> str:
                return "still works"

            assert f() == "still works"  # a failing listener never breaks the call
    finally:
        remove_listener(broken)
        remove_listener(listener)
    messages = [rec.getMessage() for rec in caplog.records]
    assert any(m.startswith("acquired logged (lock:logged)") for m in messages)
    assert any(m.startswith("released logged (lock:logged), held") for m in messages)
    assert any("listener" in m and "failed" in m for m in messages)
    assert r.dbsize() == 0


def test_listeners_are_removed_and_validated() -> None:
    seen: list[LockEvent] = []
    add_listener(seen.append)
    remove_listener(seen.append)

    @locked("quiet")
    def f() -> None: ...

    f()
    assert seen == []
    with pytest.raises(TypeError):
        add_listener(42)  # type: ignore[arg-type]
