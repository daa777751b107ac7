"""The first contended wait of a provider (sync) or of an event loop (asyncio) opens the
process's grant subscription: a path that runs once, which every warmed-up test skips.

Review 31 found both flavours leaving the subscription dead for good there -- every later
wait fell back to its recheck (a wait shorter than 2 s failed with the lock free, and the
FIFO hand-off was gone): a Ctrl-C between creating the subscription and subscribing (or
between reading its confirmation and noting it), and a subscriber task cancelled before its
first step ("cancel every other task" at the turn it was created). Here an interrupt comes at
every line the first wait runs in the library, each time on a fresh provider, and the wait
after it must get a freed lock at once.
"""

from __future__ import annotations

import asyncio
import sys
import time
from types import FrameType
from typing import Any

import pytest
import redis
from support.handing import handed_within, held_elsewhere
from support.interrupts import signal_cannot_land

import redlock_deco
from redlock_deco import Lock, LockNotAcquired
from redlock_deco import _waiting as waiting
from redlock_deco._drivers import checkout
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.testing import RedisServer

HOLD = 0.15  # how long the other thread holds before its release hands the lock on


def interrupted_first_wait(stop_at: int) -> bool:
    """The first contended wait of a fresh provider, interrupted at its ``stop_at``-th line
    in the library; False once the wait ran to its end before that."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if event == "line":
            if signal_cannot_land(frame.f_code, frame.f_lineno, frame.f_lasti):
                return local  # (see support.interrupts)
            count += 1
            if count == stop_at:
                sys.settrace(None)
                raise KeyboardInterrupt
        return local

    def calls(frame: FrameType, event: str, arg: object) -> Any:
        name = frame.f_globals.get("__name__", "")
        return local if name == "redlock_deco._waiting" else None

    with held_elsewhere(HOLD):
        sys.settrace(calls)
        try:
            with Lock("first", ttl=5, wait=2):
                pass
        except KeyboardInterrupt:
            return True
        finally:
            sys.settrace(None)
    return False


@pytest.mark.interrupts  # one wait per line: the interrupts CI leg
def test_an_interrupt_at_any_line_of_the_first_wait_leaves_hand_offs_working(
    server: RedisServer, r: redis.Redis
) -> None:
    stop_at = 0
    try:
        while True:
            stop_at += 1
            redlock_deco.register_provider("default", server.url)  # a fresh target
            if not interrupted_first_wait(stop_at):
                break
            took = handed_within(HOLD)
            assert took is not None and took < HOLD + 0.5, (stop_at, took)
            assert r.keys("lock:*") == []
    finally:
        # An interrupt on a line of the clean-up that closes a grant registration leaves it
        # registered (nothing held; test_interrupts.py says why): not for later tests to see.
        waiting.registry.waiting.clear()
    assert stop_at > 20  # the subscription's lines were all reached


def test_a_subscriber_cancelled_before_its_first_step_is_started_again() -> None:
    """Review 31, 02: the loop's grant subscriber, cancelled at the turn it was created (as a
    task that cancels every other task does), never ran the clean-up that forgets it: no
    subscriber was started again in that loop, and every later wait fell back to polling."""

    async def scenario() -> list[float | None]:
        loop = asyncio.get_running_loop()
        cancelled: list[asyncio.Task[Any]] = []

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            task = asyncio.Task(coro, loop=loop, **kwargs)
            if getattr(coro, "__qualname__", "") == "AsyncWaiting._run" and not cancelled:
                cancelled.append(task)
                task.cancel()  # before its first step
            return task

        loop.set_task_factory(factory)
        try:
            took = []
            for _ in range(3):  # the first wait creates the subscriber, cancelled at once
                took.append(await handed_async())
            return took
        finally:
            loop.set_task_factory(None)

    async def handed_async() -> float | None:
        with held_elsewhere(HOLD):  # (its thread takes the lock in a moment: the loop waits)
            started = time.monotonic()
            try:
                async with AsyncLock("first", ttl=5, wait=1.5):
                    return time.monotonic() - started
            except LockNotAcquired:
                return None

    took = asyncio.run(scenario())
    assert all(t is not None and t < HOLD + 0.5 for t in took[1:]), took


def test_a_subscription_on_a_half_connected_pooled_connection_is_made_again(
    server: RedisServer,
) -> None:
    """A client the application shares with the library can hold a connection that one of
    the application's own calls left half-connected (interrupted in redis-py's handshake:
    socket set, reader never made; redis-py gives it back to the pool as it is). The grant
    subscription that draws it reads nothing, ever: it is dropped once it has gone a second
    unconfirmed (review 32, 01), and the waiter is handed the lock as the holder frees it."""
    client = redis.Redis.from_url(server.url)
    try:
        redlock_deco.register_provider("default", client)
        with Lock("warm", ttl=5):  # the library's own connections are made
            pass
        pool = client.connection_pool
        half = checkout(pool, [])  # (as this redis-py wants get_connection called)
        half._parser.on_disconnect()  # the reader gone, the socket still set
        pool.release(half)
        with held_elsewhere(HOLD):
            started = time.monotonic()
            with Lock("first", ttl=5, wait=2.5):
                took = time.monotonic() - started
        assert took < waiting.UNCONFIRMED + 0.8, took
        assert handed_within(HOLD) is not None  # and from then on at once
    finally:
        redlock_deco.register_provider("default", server.url)
        client.close()


def test_a_replaced_providers_subscription_is_closed(server: RedisServer, r: redis.Redis) -> None:
    """Review 32, 02: registering a provider again retired its target but kept the target's
    grant subscription open -- nobody read it again, releases went on counting it, and each
    registration left one more connection for the collector to close."""

    def subscribers() -> int:
        return int(r.execute_command("PUBSUB", "NUMSUB", waiting.channel())[1])

    before = subscribers()  # (an earlier test's client may still hold one: not ours)
    for _ in range(4):
        redlock_deco.register_provider("default", server.url)
        took = handed_within(HOLD)
        assert took is not None and took < HOLD + 0.5, took
    redlock_deco.register_provider("default", server.url)  # the last one retired too
    deadline = time.monotonic() + 2
    while subscribers() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert subscribers() == before
