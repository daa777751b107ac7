"""A call's wait bounds it even when the server stalls or dies.

A provider registered as a URL builds clients with a socket timeout and one retry
(``providers.SOCKET_TIMEOUT``, ``providers.URL_RETRIES``), so a call with ``wait=W`` on a
stalled server ends within about ``W + (1 + URL_RETRIES) * SOCKET_TIMEOUT``, with redis' own
TimeoutError/ConnectionError or LockNotAcquired -- once it lasted as long as the stall. An
acquire that fails because the server is unreachable leaves its clean-up to the background
(the claim's SET may still land), so the caller waits for one command's retry policy, not two,
and the clean-up releases the claim once the server answers again.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import ConnectionError, TimeoutError
from support import flavours
from support.samples import wait_until

from redlock_deco import LockNotAcquired, limited, locked, register_provider
from redlock_deco import _renewal as renewal
from redlock_deco._providers import SOCKET_TIMEOUT, URL_RETRIES, url_client_options
from redlock_deco.testing import RedisServer

pytestmark = pytest.mark.slow

WAIT = 0.5
TTL = 30  # far longer than the tests: a key gone was released, not expired
STALL = 8.0  # the server resumes by itself after this long, if the test has not resumed it
MARGIN = 1.5  # scheduling on a busy machine, reconnects, backoff
BOUND = WAIT + (1 + URL_RETRIES) * SOCKET_TIMEOUT + MARGIN
ENDINGS = (LockNotAcquired, TimeoutError, ConnectionError)
SAMPLES = 9


def bare_client(url: str) -> redis.Redis:
    """A plain client with the settings the URL provider uses: what one command costs."""
    return redis.Redis.from_url(url, **url_client_options("sync"))


def bare_async_client(url: str) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(url, **url_client_options("async"))


def protected(kind: str, *, is_async: bool) -> Callable[[], Any]:
    """A function protected by a lock or a semaphore on the provider "own"."""
    options: dict[str, Any] = {"wait": WAIT, "ttl": TTL, "provider": "own"}
    decorator = (
        locked("stalled", **options) if kind == "lock" else limited("stalled", limit=2, **options)
    )
    if is_async:

        async def call_async() -> str:
            return "ran"

        return decorator(call_async)

    def call() -> str:
        return "ran"

    return decorator(call)


def timed(fn: Callable[[], Any]) -> tuple[object, float]:
    """What ``fn()`` returned or raised, and how long it took."""
    started = time.monotonic()
    try:
        outcome: object = fn()
    except Exception as exc:
        outcome = exc
    return outcome, time.monotonic() - started


async def timed_async(fn: Callable[[], Any]) -> tuple[object, float]:
    started = time.monotonic()
    try:
        outcome: object = await fn()
    except Exception as exc:
        outcome = exc
    return outcome, time.monotonic() - started


def ended_properly(outcome: object) -> bool:
    return outcome == "ran" or isinstance(outcome, ENDINGS)


@pytest.fixture
def own() -> Iterator[RedisServer]:
    """A server of the test's own, under the provider "own", to stall or kill."""
    with RedisServer() as srv:
        register_provider("own", srv.url)
        yield srv


class Stalled:
    """The server paused (SIGSTOP) until :meth:`resume`, or after ``STALL`` at the latest."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.timer = threading.Timer(STALL, server.resume)

    def __enter__(self) -> Stalled:
        self.server.pause()
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.resume()

    def resume(self) -> None:
        self.timer.cancel()
        self.server.resume()


def check_bounded(outcome: object, took: float, bare_took: float) -> None:
    assert ended_properly(outcome), repr(outcome)
    assert took < BOUND, f"wait={WAIT} on a stalled server took {took:.1f}s ({outcome!r})"
    # The acquire's own retry policy, not that and a clean-up's again in the foreground.
    assert took < bare_took + WAIT + MARGIN, f"{took:.1f}s against one command's {bare_took:.1f}s"


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_call_on_a_stalled_server_ends_within_its_bound(own: RedisServer, kind: str) -> None:
    call = protected(kind, is_async=False)
    assert call() == "ran"  # a pooled connection is made: the stall hits a live socket
    bare = bare_client(own.url)
    bare.ping()
    try:
        with Stalled(own) as stall:
            bare_result: list[tuple[object, float]] = []
            one_command = threading.Thread(target=lambda: bare_result.append(timed(bare.ping)))
            one_command.start()
            outcome, took = timed(call)
            one_command.join(STALL + 5)
            stall.resume()
        (bare_outcome, bare_took) = bare_result[0]
        assert isinstance(bare_outcome, (TimeoutError, ConnectionError)), repr(bare_outcome)
        check_bounded(outcome, took, bare_took)
        # The acquire's write reached the server as it stalled and runs now that it is
        # back: the clean-up left in the background removes it long before its ttl.
        own_client = own.client()
        try:
            assert wait_until(lambda: own_client.dbsize() == 0, 6.0), own_client.keys("*")
        finally:
            own_client.close()
    finally:
        bare.close()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_an_async_call_on_a_stalled_server_ends_within_its_bound(
    own: RedisServer, kind: str
) -> None:
    call = protected(kind, is_async=True)
    own_client = own.client()

    async def main() -> None:
        assert await call() == "ran"
        bare = bare_async_client(own.url)
        await bare.ping()
        try:
            with Stalled(own) as stall:
                (outcome, took), (bare_outcome, bare_took) = await asyncio.gather(
                    timed_async(call), timed_async(bare.ping)
                )
                stall.resume()
        finally:
            await bare.aclose()
        assert isinstance(bare_outcome, (TimeoutError, ConnectionError)), repr(bare_outcome)
        check_bounded(outcome, took, bare_took)
        # The clean-up runs in this loop's renewer: keep the loop going until it is done.
        deadline = time.monotonic() + 6.0
        while own_client.dbsize() or renewal.async_renewer().pending_cleanups:
            assert time.monotonic() < deadline, own_client.keys("*")
            await asyncio.sleep(0.05)

    try:
        asyncio.run(main())
    finally:
        own_client.close()


def test_a_waiter_caught_by_a_stall_ends_within_its_bound(
    api: flavours.Api, own: RedisServer
) -> None:
    """The server stalls while the call is already waiting for a busy lock (queued, listening
    for its hand-off)."""
    own_client = own.client()
    own_client.set("lock:stalled", "another holder", px=TTL * 1000)

    async def body() -> str:
        return "ran"

    call = api.decorate(locked("stalled", wait=WAIT, ttl=TTL, provider="own"), body)

    async def scenario(api: flavours.Api) -> tuple[object, float]:
        with pytest.raises(LockNotAcquired):
            await api.call(call)  # connected, and the lock is busy
        stall = Stalled(own)
        pauser = threading.Timer(0.2, stall.__enter__)  # mid-wait
        pauser.start()
        started = time.monotonic()
        try:
            outcome: object = await api.call(call)
        except Exception as exc:
            outcome = exc
        took = time.monotonic() - started
        pauser.join()
        stall.resume()
        # Whatever the waiter left behind is cleaned up: only the other holder's key stays.
        for _ in range(120):
            if own_client.keys("*") == [b"lock:stalled"]:
                break
            await api.sleep(0.05)
        return outcome, took

    outcome, took = api.run(scenario)
    try:
        assert ended_properly(outcome), repr(outcome)
        assert outcome != "ran"
        assert took < BOUND, f"wait={WAIT} on a stalled server took {took:.1f}s ({outcome!r})"
        assert own_client.keys("*") == [b"lock:stalled"]
    finally:
        own_client.close()


def test_a_call_on_a_dead_server_fails_after_one_commands_retries(own: RedisServer) -> None:
    call = protected("lock", is_async=False)
    assert call() == "ran"
    bare = bare_client(own.url)
    bare.ping()
    others = renewal.renewer().pending_cleanups  # left by earlier tests, if any
    own.kill()
    calls: list[float] = []
    commands: list[float] = []
    try:
        for _ in range(SAMPLES):  # interleaved, so a busy moment hits both alike
            outcome, took = timed(bare.ping)
            assert isinstance(outcome, ConnectionError), repr(outcome)
            commands.append(took)
            outcome, took = timed(call)
            assert isinstance(outcome, ConnectionError), repr(outcome)
            calls.append(took)
    finally:
        bare.close()
    call_took, command_took = statistics.median(calls), statistics.median(commands)
    # One command's failure (no retry), not two: the clean-up is left to the background.
    # (A millisecond of slack: refused connects take well under one here, noise included.)
    assert call_took < 1.5 * command_took + 0.001, f"call {calls} vs one command {commands}"
    assert renewal.renewer().pending_cleanups > others  # left to the background
    own.restart()
    # Retried every half second, the clean-ups go through once the server answers again.
    assert wait_until(lambda: renewal.renewer().pending_cleanups <= others, 5.0)
    assert call() == "ran"
    own_client = own.client()
    try:
        assert own_client.dbsize() == 0
    finally:
        own_client.close()


def test_an_async_call_on_a_dead_server_fails_after_one_commands_retries(
    own: RedisServer,
) -> None:
    call = protected("lock", is_async=True)

    async def main() -> tuple[list[float], list[float]]:
        assert await call() == "ran"
        bare = bare_async_client(own.url)
        await bare.ping()
        own.kill()
        calls: list[float] = []
        commands: list[float] = []
        try:
            for _ in range(SAMPLES):
                outcome, took = await timed_async(bare.ping)
                assert isinstance(outcome, ConnectionError), repr(outcome)
                commands.append(took)
                outcome, took = await timed_async(call)
                assert isinstance(outcome, ConnectionError), repr(outcome)
                calls.append(took)
        finally:
            await bare.aclose()
        assert renewal.async_renewer().pending_cleanups > 0
        own.restart()
        deadline = time.monotonic() + 5.0
        while renewal.async_renewer().pending_cleanups:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert await call() == "ran"
        return calls, commands

    calls, commands = asyncio.run(main())
    call_took, command_took = statistics.median(calls), statistics.median(commands)
    assert call_took < 1.5 * command_took + 0.001, f"call {calls} vs one command {commands}"
    own_client = own.client()
    try:
        assert own_client.dbsize() == 0
    finally:
        own_client.close()
