"""Providers: every accepted source, lazy resolution, REDIS_URL, clear errors, thread and
fork safety, prompt connection errors."""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import suppress
from types import FrameType
from typing import Any

import pytest
import redis
import redis.asyncio
from support.interrupts import signal_cannot_land

import redlock_deco
from redlock_deco import (
    Lock,
    ProviderError,
    ProviderNotFound,
    locked,
    register_provider,
    unregister_provider,
)
from redlock_deco._providers import sync_target
from redlock_deco.testing import RedisServer, free_port


def test_url_instance_and_factory_sources(server: RedisServer) -> None:
    register_provider("url", server.url)
    register_provider("inst", server.client())
    calls: list[int] = []

    def factory() -> redis.Redis:
        calls.append(1)
        return server.client()

    register_provider("factory", factory)
    assert calls == []  # nothing is built at registration
    for name in ("url", "inst", "factory"):
        with Lock(f"p:{name}", provider=name, wait=0) as lock:
            assert lock.owned()
    with Lock("again", provider="factory"):
        pass
    assert calls == [1]  # called once per process, lazily


def test_a_sync_client_and_an_asyncio_one_serve_one_name(server: RedisServer) -> None:
    """An application's ready-made pair: the sync client for sync code, the asyncio factory
    (called once per event loop) for async code, under one name."""
    import asyncio

    import redlock_deco.asyncio

    made: list[redis.asyncio.Redis] = []

    def async_client() -> redis.asyncio.Redis:
        made.append(redis.asyncio.Redis(port=server.port))
        return made[-1]

    sync_client = server.client()
    register_provider("pair", sync_client, asyncio=async_client)
    assert sync_target("pair").client is sync_client

    async def use() -> bool:
        async with redlock_deco.asyncio.Lock("pair", provider="pair", wait=0) as lock:
            owned = await lock.owned()
        await redlock_deco.aclose()
        for client in made:  # (a factory's clients are the application's to close)
            await client.aclose()
        return owned

    assert asyncio.run(use()) and asyncio.run(use())
    assert len(made) == 2  # one client per loop
    with pytest.raises(ProviderError, match=r"asyncio=\.\.\."):
        register_provider("pair", sync_client, asyncio=server.client())  # a sync one: refused
    register_provider("pair", sync_client, asyncio=server.client)  # a factory of sync ones
    with pytest.raises(ProviderError, match="its asyncio= side must give asyncio clients"):
        asyncio.run(use())
    register_provider("pair", sync_client)  # registered again without it: sync only
    with pytest.raises(ProviderError, match="needs an asyncio client"):
        asyncio.run(use())
    unregister_provider("pair")


def test_factory_may_return_a_url(server: RedisServer) -> None:
    register_provider("late", lambda: server.url)
    with Lock("x", provider="late", wait=0) as lock:
        assert lock.owned()


def test_redis_url_environment_fallback(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    unregister_provider("default")
    with pytest.raises(ProviderNotFound) as info:
        Lock("x").acquire()
    message = str(info.value)
    assert "'default'" in message and "register_provider" in message and "REDIS_URL" in message
    assert isinstance(info.value, LookupError)
    monkeypatch.setenv("REDIS_URL", server.url)
    with Lock("x", wait=0) as lock:
        assert lock.owned()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("http://localhost", "not a Redis URL"),
        (42, "expected a redis client"),
        (["redis://a", "redis://b"], "at least 3 independent masters"),
        (["redis://a", "redis://b", ["redis://c"]], "cannot nest"),
    ],
)
def test_unusable_sources_are_refused_at_registration(value: object, fragment: str) -> None:
    with pytest.raises(ProviderError, match=fragment):
        register_provider("bad", value)


def test_connection_failure_is_redis_error_and_prompt() -> None:
    register_provider("dead", f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=1")

    @locked("x", provider="dead")
    def f() -> None: ...

    started = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError):
        f()
    assert time.monotonic() - started < 5


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_forked_child_builds_its_own_client_and_holds_nothing(
    server: RedisServer, r: redis.Redis
) -> None:
    register_provider("forky", server.url)
    parent_target = sync_target("forky")
    lock = Lock("forked", provider="forky", ttl=5)
    lock.acquire()
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # child: report, never return into pytest
        code = 0
        try:
            fresh = sync_target("forky") is not parent_target
            not_owned = not lock.owned()
            blocked = not Lock("forked", provider="forky", wait=0).acquire()
            from redlock_deco._renewal import renewer

            code = 0 if (fresh and not_owned and blocked and len(renewer()) == 0) else 1
        except BaseException:
            code = 2
        os.write(write, bytes([code]))
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    result = os.read(read, 1)
    os.close(read)
    assert result == b"\x00", result
    assert lock.owned()  # the child did not release or disturb the parent's lease
    lock.release()


def test_registering_a_provider_while_another_threads_loop_churns_leases_is_safe(
    server: RedisServer,
) -> None:
    """Review 65, F1 (two holders of one name): registering a provider again walked each
    loop's set of leases from the registering thread while that loop's thread changed it;
    "Set changed size during iteration" escaped register_provider and left the later loops
    on the old server's target. No error, and every loop follows the new source."""
    import asyncio
    import threading

    from redlock_deco import _process
    from redlock_deco.asyncio import Lock as AsyncLock

    with RedisServer() as other:
        register_provider("churned", server.url)
        stop, ready = threading.Event(), threading.Event()
        loops: list[asyncio.AbstractEventLoop] = []

        async def churn(n: int) -> None:
            while not stop.is_set():
                async with AsyncLock(f"churn:{n}", provider="churned", ttl=5):
                    await asyncio.sleep(0)

        async def main() -> None:
            loops.append(asyncio.get_running_loop())
            ready.set()
            await asyncio.gather(*(churn(n) for n in range(50)))

        thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        thread.start()
        assert ready.wait(10)
        switching = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # (the loop's thread runs between any two bytecodes)
        try:
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                register_provider("churned", other.url)
                register_provider("churned", server.url)
        finally:
            sys.setswitchinterval(switching)
            stop.set()
            thread.join(10)
        register_provider("churned", other.url)

        async def where() -> str:
            async with AsyncLock("where", provider="churned", ttl=5):
                return "other" if other.client().exists("lock:where") else "server"

        assert asyncio.run(where()) == "other"
        assert not [state for state in _process.loop_states() if state.loop() in loops]


def _line_events(codes: set[Any], call: Callable[[], object], cut: int | None = None) -> int:
    """How many line events ``call()`` runs in frames of ``codes`` where a real signal can
    land; with ``cut``, a KeyboardInterrupt raised at that one (by index) instead."""
    seen = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal seen
        if event == "line" and not signal_cannot_land(frame.f_code, frame.f_lineno, frame.f_lasti):
            seen += 1
            if seen - 1 == cut:
                sys.settrace(None)
                raise KeyboardInterrupt
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code in codes else None)
    try:
        call()
    finally:
        sys.settrace(None)
    return seen


def _with_inner(*functions: Any) -> set[Any]:
    """The code objects of ``functions`` and of what they define (comprehensions)."""
    codes: set[Any] = set()
    pending = [function.__code__ for function in functions]
    while pending:
        code = pending.pop()
        codes.add(code)
        pending.extend(const for const in code.co_consts if isinstance(const, type(code)))
    return codes


def test_a_registration_cut_at_any_line_leaves_every_loop_and_thread_on_one_server(
    server: RedisServer,
) -> None:
    """Review 66, F1 (two holders of one name): an interrupt inside register_provider, after
    it stored the new source and before it dropped another thread's loop's target, left
    that loop locking on the old server while the rest of the process locked on the new
    one. Cut at each line of it in turn: whatever the registration came to, sync code and
    the loop take the name on the one server the registry names."""
    import asyncio
    import threading

    from redlock_deco import _process, _providers
    from redlock_deco.asyncio import Lock as AsyncLock

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def in_loop(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(10)

    async def warm() -> None:
        async with AsyncLock("warm", provider="cut", ttl=5):
            pass

    with RedisServer() as other:
        urls = {server.url: server, other.url: other}

        def holding(key: str) -> list[str]:
            return [url for url, each in urls.items() if each.client().exists(key)]

        async def loop_takes() -> list[str]:
            async with AsyncLock("probe", provider="cut", ttl=5):
                return holding("lock:probe")

        def sync_takes() -> list[str]:
            with Lock("probe", provider="cut", ttl=5):
                return holding("lock:probe")

        codes = _with_inner(register_provider, _providers._forget, _process.LoopState.retire)
        register_provider("cut", server.url)
        in_loop(warm())
        sync_takes()
        lines = _line_events(codes, lambda: register_provider("cut", other.url))
        assert lines > 10
        try:
            for cut in range(lines):
                register_provider("cut", server.url)
                in_loop(warm())  # (the loop, and the process, have targets built from the
                sync_takes()  # old source)
                with suppress(KeyboardInterrupt):
                    _line_events(codes, lambda: register_provider("cut", other.url), cut)
                named = [_providers.registered("cut")]
                assert in_loop(loop_takes()) == named, cut
                assert sync_takes() == named, cut
        finally:
            in_loop(redlock_deco.aclose())
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
