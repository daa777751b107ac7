"""One test body, two flavours: behaviour tests are ``async def scenario(api)`` functions run
once as sync code and once as asyncio code.

In the sync flavour the scenario coroutine is driven by hand without an event loop: every
``api`` call runs the sync API and never suspends. In the async flavour it runs under
``asyncio.run`` against the asyncio API. Other owners are threads (sync) or tasks (async).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import redis

import redlock_deco
import redlock_deco.asyncio

Scenario = Callable[["Api"], Coroutine[Any, Any, Any]]


def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (the sync flavour) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a sync-flavour scenario suspended: use api.sleep / api.call only")


class SyncAwaitable:
    """A sync primitive seen through awaitable methods and ``async with``."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call

    async def __aenter__(self) -> SyncAwaitable:
        self._obj.__enter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._obj.__exit__(*exc)


class Api:
    name: str

    def __init__(self, url: str) -> None:
        self.url = url

    # Filled in by the flavours.
    def Lock(self, name: str, **kw: Any) -> Any: ...
    def Semaphore(self, name: str, **kw: Any) -> Any: ...
    def decorate(self, decorator: Any, body: Callable[..., Awaitable[Any]]) -> Any: ...
    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any: ...
    async def sleep(self, seconds: float) -> None: ...
    def spawn(self, scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any: ...
    async def join(self, handle: Any) -> Any: ...
    def register(self, name: str, *, decode: bool = False, **kw: Any) -> None: ...
    def run(self, scenario: Scenario) -> Any: ...


class SyncApi(Api):
    name = "sync"

    def Lock(self, name: str, **kw: Any) -> Any:
        return SyncAwaitable(redlock_deco.Lock(name, **kw))

    def Semaphore(self, name: str, **kw: Any) -> Any:
        return SyncAwaitable(redlock_deco.Semaphore(name, **kw))

    def decorate(self, decorator: Any, body: Callable[..., Awaitable[Any]]) -> Any:
        @functools.wraps(body)
        def sync_body(*args: Any, **kwargs: Any) -> Any:
            return drive(body(*args, **kwargs))  # type: ignore[arg-type]

        # sync_body runs the coroutine to completion: a sync function. Left in place, the
        # __wrapped__ that functools.wraps sets would make the decorators take it for a
        # pass-through wrapper of an async def, and give it the async path. The signature
        # (which templates are checked against) is kept by hand instead.
        del sync_body.__wrapped__
        sync_body.__signature__ = inspect.signature(body)  # type: ignore[attr-defined]  # read by inspect.signature
        return decorator(sync_body)

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def spawn(self, scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        out: list[Any] = []

        def target() -> None:
            try:
                out.append(("ok", drive(scenario())))
            except BaseException as exc:
                out.append(("err", exc))

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread, out

    async def join(self, handle: Any) -> Any:
        thread, out = handle
        thread.join(30)
        kind, value = out[0]
        if kind == "err":
            raise value
        return value

    def register(self, name: str, *, decode: bool = False, **kw: Any) -> None:
        client = redis.Redis.from_url(self.url, decode_responses=decode, **kw)
        redlock_deco.register_provider(name, client)

    def run(self, scenario: Scenario) -> Any:
        return drive(scenario(self))


class AsyncApi(Api):
    name = "async"

    def Lock(self, name: str, **kw: Any) -> Any:
        return redlock_deco.asyncio.Lock(name, **kw)

    def Semaphore(self, name: str, **kw: Any) -> Any:
        return redlock_deco.asyncio.Semaphore(name, **kw)

    def decorate(self, decorator: Any, body: Callable[..., Awaitable[Any]]) -> Any:
        return decorator(body)

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def spawn(self, scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return asyncio.get_running_loop().create_task(scenario())

    async def join(self, handle: Any) -> Any:
        return await asyncio.wait_for(handle, 30)

    def register(self, name: str, *, decode: bool = False, **kw: Any) -> None:
        # A URL: the registry builds one asyncio client per loop and closes it at shutdown.
        query = "&".join(f"{k}={v}" for k, v in {"decode_responses": decode, **kw}.items())
        redlock_deco.register_provider(name, f"{self.url}?{query}")

    def run(self, scenario: Scenario) -> Any:
        return asyncio.run(scenario(self))
