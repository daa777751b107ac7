"""An interrupt at every step of contextlib's own ExitStack code, on a long-lived stack reused
entry after entry (review 70, F2 and F3).

``stack.enter_context(obj)`` runs ``obj.__enter__`` and then pushes its exit; the stack's
``close()`` pops each exit and then calls it. An interrupt between the two (after the enter
returned, before the push; after the pop, before the call) leaves a block open that no exit
will ever end. The weakref on the stack's callbacks ends it once the stack is collected, but
a stack kept for good (a module's, an attribute) and reused keeps that deque alive: the block
stayed held and renewed for good, and a limit-1 semaphore object refused every later entry,
its own thread's included.

Here every trace event of contextlib's code in one ``enter_context`` + ``close()`` cycle is
cut in turn, the exception kept or dropped; then the same thread enters the object again
(through the stack, or with a ``with`` statement) and closes the stack. Nothing may be left
held or renewed, and a limit-1 semaphore must let the next entry in whenever the cut took the
exit off the stack. (A cut before the exit was popped leaves it on the stack, as contextlib
does for any callback: the stack's next close ends it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
import redis

from redlock_deco import Lock, Semaphore, current_lease
from redlock_deco import _renewal as renewal
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore

NAME = "stacked"


class Cut(BaseException):
    """The interrupt (a BaseException, as KeyboardInterrupt: nothing of ours catches it)."""


class _Cutter:
    """A tracer that counts the trace events of contextlib's frames and raises :class:`Cut`
    at the ``at``-th (never, if ``at`` is None): what each was is in ``seen``."""

    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.seen: list[tuple[str, int, str]] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> Any:
        if self.at is not None and len(self.seen) > self.at:
            return None
        if event != "line" and frame.f_code.co_flags & inspect.CO_COROUTINE:
            # (a coroutine's call and return events are its resumptions and suspensions
            # too: raised there, the exception leaves the coroutine it awaits suspended
            # mid-step, which no interrupt of asyncio's does)
            return self
        if frame.f_globals.get("__name__") == "contextlib":
            self.seen.append((frame.f_code.co_name, frame.f_lineno, event))
            if len(self.seen) - 1 == self.at:
                raise Cut
        return self

    @property
    def where(self) -> tuple[str, int, str] | None:
        return self.seen[self.at] if self.at is not None and len(self.seen) > self.at else None


def _traced(cutter: _Cutter, cycle: Callable[[], Any]) -> None:
    sys.settrace(cutter)
    try:
        cycle()
    finally:
        sys.settrace(None)


def _exit_on(stack: Any, obj: object) -> bool:
    """Whether ``stack`` still holds ``obj``'s exit (contextlib binds it to the object)."""
    return any(getattr(cb, "__self__", None) is obj for _, cb in stack._exit_callbacks)


def _nothing_left(r: redis.Redis, what: str) -> None:
    deadline = time.monotonic() + 2
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.02)  # (a give-back handed to the background: within a moment)
    assert r.dbsize() == 0, f"held after {what}: {r.keys('*')}"
    assert len(renewal.renewer()) == 0, f"still renewed after {what}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
@pytest.mark.parametrize("keep", [False, True], ids=["dropped", "kept"])
@pytest.mark.parametrize("again", ["stack", "with"])
def test_a_cut_in_contextlib_leaves_nothing_held_on_a_reused_stack(
    r: redis.Redis, kind: str, keep: bool, again: str
) -> None:
    obj = Lock(NAME, ttl=5, wait=0) if kind == "lock" else Semaphore(NAME, limit=1, ttl=5, wait=0)
    stack = contextlib.ExitStack()  # (one stack, reused: as a module's or an attribute)

    def cycle() -> None:
        stack.enter_context(obj)
        stack.close()

    cycle()  # (warm: the provider's first call has contextlib steps of its own)
    events = _Cutter()
    _traced(events, cycle)
    assert any(name == "_push_cm_exit" for name, _, _ in events.seen), events.seen
    kept: list[BaseException] = []
    for index in range(len(events.seen)):
        cutter = _Cutter(index)
        try:
            _traced(cutter, cycle)
        except Cut as exc:
            if keep:
                kept.append(exc)
        else:
            pytest.fail(f"event {index} ({events.seen[index]}) was not reached")
        what = f"a cut at {cutter.where} (event {index}), then an entry by {again}"
        if _exit_on(stack, obj):
            stack.close()  # (left on the stack, as contextlib leaves any: its next close)
        if again == "stack":
            stack.enter_context(obj)
        else:
            with obj:
                pass
        stack.close()
        assert not obj._blocks, f"a block left open on the object after {what}"
        assert current_lease(None) is None, f"a section left open after {what}"
        _nothing_left(r, what)
    kept.clear()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_cut_in_contextlib_leaves_nothing_held_on_a_reused_async_stack(
    r: redis.Redis, kind: str
) -> None:
    """The same with an AsyncExitStack, exception kept, next entry through the stack (an
    interrupt there is a signal handler's exception: a cancellation lands only where the
    stack awaits, around the block's own enter and exit)."""

    async def scenario() -> None:
        obj = (
            AsyncLock(NAME, ttl=5, wait=0)
            if kind == "lock"
            else AsyncSemaphore(NAME, limit=1, ttl=5, wait=0)
        )
        stack = contextlib.AsyncExitStack()

        async def cycle(cutter: _Cutter) -> None:
            sys.settrace(cutter)
            try:
                await stack.enter_async_context(obj)
                await stack.aclose()
            finally:
                sys.settrace(None)

        await cycle(_Cutter())  # (warm: see the sync test)
        events = _Cutter()
        await cycle(events)
        assert any(name == "_push_async_cm_exit" for name, _, _ in events.seen), events.seen
        kept: list[BaseException] = []
        for index in range(len(events.seen)):
            cutter = _Cutter(index)
            try:
                await cycle(cutter)
            except Cut as exc:
                kept.append(exc)
            else:
                pytest.fail(f"event {index} ({events.seen[index]}) was not reached")
            what = f"a cut at {cutter.where} (event {index})"
            if _exit_on(stack, obj):
                await stack.aclose()
            await stack.enter_async_context(obj)
            await stack.aclose()
            assert not obj._blocks, f"a block left open on the object after {what}"
            deadline = time.monotonic() + 2
            while r.dbsize() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert r.dbsize() == 0, f"held after {what}: {r.keys('*')}"
        kept.clear()

    asyncio.run(scenario())
