"""An interrupt as a closing call begins, with the exception kept (review 68, F1-F4).

A signal is looked for as a function's frame starts, before the first line of its own
``try``: an interrupt there leaves the call that closes a section without having closed
anything. The section's finalizer gave the lease back once the frames that held it were
collected -- but a caller that keeps the exception (a retry's last error, a logged record,
``sys.last_value``) keeps those frames through its traceback, and the name stayed held and
renewed, refused to every other thread and process, for as long as it kept it. Here each
such start is interrupted (``sys.settrace`` raising at its 'call' event), the exception is
kept, and nothing may stay held. And one cut the object itself keeps: a long-lived object's
block, cut as ``open_section`` returned into ``__enter__`` (where Python 3.10 looks for a
signal), stayed open on the object until the thread's next ``with`` on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
import redis
import redis.asyncio

from redlock_deco import Lock, Semaphore, current_lease, locked
from redlock_deco import _guard as guard
from redlock_deco import _ownership as ownership
from redlock_deco import _primitive as primitive
from redlock_deco import _renewal as renewal
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore
from redlock_deco.testing import RedisServer

NAME = "kept"


def _decorated() -> None:
    @locked(NAME, ttl=5)
    def protected() -> None:
        pass

    protected()


def _several_names() -> None:
    @locked(NAME, NAME + "-2", ttl=5)
    def protected() -> None:
        pass

    protected()


def _with_block() -> None:
    with Lock(NAME, ttl=5):
        pass


def _semaphore_block() -> None:
    with Semaphore(NAME, limit=1, ttl=5):
        pass


LONG_LIVED = Lock(NAME, ttl=5)


def _long_lived_block() -> None:
    with LONG_LIVED:
        pass


STACKED = Lock(NAME, ttl=5)


def _stack_block() -> None:
    with contextlib.ExitStack() as stack:
        stack.enter_context(STACKED)


def _by_hand_block() -> None:
    LONG_LIVED.__enter__()
    LONG_LIVED.__exit__(None, None, None)


def _starts(code: Any) -> Callable[[FrameType, str], bool]:
    """The start of a call of ``code`` (its 'call' event)."""
    return lambda frame, event: event == "call" and frame.f_code is code


def _stack_exit_starts(frame: FrameType, event: str) -> bool:
    return event == "call" and frame.f_code is contextlib.ExitStack.__exit__.__code__


def _returns(callee: Any, into: Any) -> Callable[[FrameType, str], bool]:
    """``callee`` returning into ``into`` (where Python 3.10 looks for a signal)."""

    def where(frame: FrameType, event: str) -> bool:
        caller = frame.f_back
        return (
            event == "return"
            and frame.f_code is callee.__code__
            and caller is not None
            and caller.f_code is into.__code__
        )

    return where


_returns_into_enter = _returns(guard.open_section, primitive.Primitive.__enter__)


CUTS: dict[str, tuple[Callable[[], None], Callable[[FrameType, str], bool]]] = {
    "decorated, as close_section starts": (_decorated, _starts(guard.close_section.__code__)),
    "several names, as close_sections starts": (
        _several_names,
        _starts(guard.close_sections.__code__),
    ),
    "several names, as close_section starts": (
        _several_names,
        _starts(guard.close_section.__code__),
    ),
    "with-block, as close_block starts": (_with_block, _starts(guard.close_block.__code__)),
    "semaphore block, as close_block starts": (
        _semaphore_block,
        _starts(guard.close_block.__code__),
    ),
    "long-lived block, as open_section returns into __enter__": (
        _long_lived_block,
        _returns_into_enter,
    ),
    "block entered by hand, as open_section returns into __enter__": (
        _by_hand_block,
        _returns_into_enter,
    ),
    "block entered through an ExitStack, as open_section returns into __enter__": (
        _stack_block,
        _returns_into_enter,
    ),
    # (contextlib's window: its exit is never pushed; the block's second exit, on the stack
    # before __enter__ returned, is run by the stack the interrupt unwinds through)
    "block entered through an ExitStack, as contextlib pushes its exit": (
        _stack_block,
        _starts(contextlib.ExitStack._push_cm_exit.__code__),
    ),
}
# Cut where only the exception's going lets the block go: contextlib's own exit, whose
# first instruction is as a with statement's (GUARANTEES); but once the stack is gone, the
# block goes with it (review 69, F1: it stayed held and renewed for good).
DROPPED: dict[str, tuple[Callable[[], None], Callable[[FrameType, str], bool]]] = {
    "ExitStack, as its exit starts": (_stack_block, _stack_exit_starts),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cut", [*CUTS, *DROPPED])
def test_an_interrupt_as_a_closing_call_starts_leaves_nothing_held_while_it_is_kept(
    server: RedisServer, r: redis.Redis, cut: str
) -> None:
    run, where = CUTS.get(cut) or DROPPED[cut]
    fired: list[bool] = []

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if not fired and where(frame, event):
            fired.append(True)
            raise KeyboardInterrupt
        return tracer if not fired else None

    kept: list[BaseException] = []  # (the caller keeps it: so do its frames)
    sys.settrace(tracer)
    try:
        run()
    except KeyboardInterrupt as exc:
        kept.append(exc)
    finally:
        sys.settrace(None)
    assert fired and kept, "the cut was not reached"
    if cut in DROPPED:
        kept.clear()
        gc.collect()
    assert current_lease(None) is None, f"a section left open: {cut}"
    deadline = time.monotonic() + 2
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.02)  # (a give-back handed to the background: within a moment)
    assert r.dbsize() == 0, f"held after {cut}: {r.keys('*')}"
    assert len(renewal.renewer()) == 0, f"still renewed after {cut}"
    taken: list[bool] = []

    def other() -> None:
        lock = Lock(NAME, wait=0)
        taken.append(lock.acquire())
        if taken[-1]:
            lock.release()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    assert taken == [True], f"another thread could not take {NAME!r} after {cut}"
    kept.clear()


def _at_the_try(frame: FrameType, event: str) -> bool:
    """The first line of close_block's ``try``."""
    source = inspect.getsource(guard.close_block).splitlines()
    first = guard.close_block.__code__.co_firstlineno
    line = first + next(n for n, text in enumerate(source) if text.strip() == "try:") + 1
    return frame.f_code is guard.close_block.__code__ and (event, frame.f_lineno) == ("line", line)


_returning_into_exit = _returns(guard.close_block, primitive.Primitive.__dict__["__exit__"].func)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "where", [_at_the_try, _returning_into_exit], ids=["at its try", "as it returns"]
)
def test_an_inner_exit_cut_leaves_the_outer_block_of_the_object_held(
    r: redis.Redis, where: Callable[[FrameType, str], bool]
) -> None:
    """Review 69, F3: close_block marked that it had begun as its ``try`` began; a cut
    there had its own handler give the inner block up, and then ``__exit__`` -- seeing it
    unmarked -- gave up the block its exit was leaving, by then the outer one: the outer
    body ran on unprotected while another thread took the name. Review 70, F1: the same
    with the inner exit cut as close_block returned (Python 3.10 looks for a signal
    there). The outer block must stay held, and end cleanly."""
    fired: list[bool] = []

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if fired:
            return None
        if where(frame, event):
            fired.append(True)
            raise KeyboardInterrupt
        return tracer

    lock = Lock(NAME, ttl=5)
    taken: list[bool] = []
    with lock:
        try:
            with lock:
                sys.settrace(tracer)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert fired, "the cut was not reached"
        thread = threading.Thread(target=lambda: taken.append(Lock(NAME, wait=0).acquire()))
        thread.start()
        thread.join(10)
        assert lock.owned(), "the outer block was given up by the inner exit"
    assert taken == [False], "another thread got in while the outer block ran"
    assert r.dbsize() == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_an_async_block_cut_as_its_section_returns_into_aenter_is_given_back(
    server: RedisServer, r: redis.Redis, kind: str
) -> None:
    """The asyncio twin of the "as open_section returns into __enter__" cuts above: a
    long-lived object's block, cut as open_section_async returned its section into
    ``__aenter__`` (a signal handler's exception; Python 3.10 looks for a signal there),
    stayed open on the object, held and renewed, for as long as the exception was kept."""
    obj = AsyncLock(NAME, ttl=5) if kind == "lock" else AsyncSemaphore(NAME, limit=1, ttl=5)
    fired: list[bool] = []

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if fired:
            return None
        if (
            event == "return"
            and frame.f_code is guard.open_section_async.__code__
            and isinstance(arg, ownership.Section)  # (its return, not a suspension)
        ):
            fired.append(True)
            raise KeyboardInterrupt
        return tracer

    async def scenario(looking: redis.asyncio.Redis) -> None:
        kept: list[BaseException] = []
        sys.settrace(tracer)
        try:
            async with obj:
                pass
        except KeyboardInterrupt as exc:
            kept.append(exc)
        finally:
            sys.settrace(None)
        assert fired and kept, "the cut was not reached"
        assert not obj._blocks, "the block stayed open on the object"
        assert await looking.dbsize() == 0, "held while the exception is kept"
        async with AsyncLock(NAME, wait=0):  # (anyone may take it)
            pass
        kept.clear()

    async def run() -> None:
        async with redis.asyncio.Redis.from_url(server.url) as looking:
            await scenario(looking)

    asyncio.run(run())
    assert r.dbsize() == 0
