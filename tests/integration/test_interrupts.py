"""An interrupt at every line of the acquire, hold and release paths (issue 22 B.2).

A scenario (one lock or semaphore taken, held and given back through the public API) is run
once under ``sys.settrace`` to list every line of the package it executes, in the order each
is first reached. Then, for each of those lines, the scenario runs again and is interrupted
exactly there: a ``KeyboardInterrupt`` raised by the trace function in the traced frame
(sync), or the running task cancelled (asyncio: the ``CancelledError`` arrives at its next
await, as a real ``Task.cancel()`` would). After each run:

- the call raised (KeyboardInterrupt / CancelledError), unless the interrupt came after its
  last line;
- nothing of it stays held: another thread takes the name at once (within the bound a
  background clean-up may take, CLEANUP seconds), and the server keeps no key of it after
  that other thread let go;
- nothing of it is renewed: the process's renewer keeps no lease;
- nothing of it still waits for a grant: the process's registry of waiting tokens is empty
  (a registration left behind kept the loop's subscriber alive for good: review 3);
- the thread's (or task's) own tables are empty: no ``current_lease()``, and the same thread
  takes the name afresh (a new token on the server, not a re-entered leftover).

Enumerated, not sampled: a line reached only on one path (a contended wait, a hand-off) is
covered by a scenario that takes that path.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import redis

import redlock_deco
from redlock_deco import Lock, Semaphore, current_lease, limited, locked
from redlock_deco import _renewal as renewal
from redlock_deco import _waiting as waiting
from redlock_deco import asyncio as aio

# A CI leg of its own (minutes: one run per line); a test's own time bound is raised.
pytestmark = [pytest.mark.interrupts, pytest.mark.timeout(900)]

PACKAGE = str(Path(redlock_deco.__file__).parent)
# What is not on the acquire/hold/release paths: the test helpers, the CLI.
SKIPPED = tuple(
    str(Path(PACKAGE, name)) for name in ("testing.py", "_cli.py", "_demo.py", "otel.py")
)
# A background clean-up (an interrupted release or acquire handed to the renewer) may take
# this long to give the name back.
CLEANUP = 1.5
NAME = "intr"

Line = tuple[str, int]


def _ours(frame: FrameType) -> bool:
    name = frame.f_code.co_filename
    return name.startswith(PACKAGE) and not name.startswith(SKIPPED)


class Tracer:
    """Lists the package's lines as first reached; or acts once at ``target``."""

    def __init__(self, target: Line | None = None, act: Callable[[], None] | None = None) -> None:
        self.target = target
        self.act = act
        self.seen: dict[Line, None] = {}
        self.fired = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            return self._local if _ours(frame) else None
        return None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            line = (frame.f_code.co_filename, frame.f_lineno)
            if self.target is None:
                self.seen.setdefault(line)
            elif line == self.target and not self.fired:
                self.fired = True
                assert self.act is not None
                self.act()  # may raise: into the traced frame, and the tracer is unset
        return self._local


def _interrupt() -> None:
    raise KeyboardInterrupt


def _holder_thread(r: redis.Redis, key: str, hold: float) -> threading.Thread:
    """Another thread holding ``NAME`` for ``hold`` seconds (the traced call then waits and
    is handed the lock): it takes the lock before this returns."""
    taken = threading.Event()

    def hold_it() -> None:
        with Lock(NAME, ttl=5, wait=5):
            taken.set()
            time.sleep(hold)

    thread = threading.Thread(target=hold_it, daemon=True)
    thread.start()
    assert taken.wait(5)
    return thread


# -- scenarios: each returns a callable that runs in the traced thread --------------------


def _plain_with(_: redis.Redis) -> Callable[[], None]:
    def run() -> None:
        with Lock(NAME, ttl=5, wait=2):
            pass

    return run


def _decorated(_: redis.Redis) -> Callable[[], None]:
    @locked(NAME, ttl=5, wait=2)
    def protected() -> int:
        return 1

    def run() -> None:
        assert protected() == 1

    return run


class _Bare:
    """acquire(), extend(), release() on one object. An acquire() that raised must leave the
    object holding nothing (and the server nothing of it). An interrupted extend() or
    release() may leave the object holding what the acquire took -- a release interrupted
    before it did anything released nothing, as ``threading.Lock.release()`` would not have
    -- and the caller then releases it again (``settle``); but the object never loses track
    of a lease the server still holds for it."""

    def __init__(self) -> None:
        self.lock = Lock(NAME, ttl=5, wait=2)
        self.phase = ""

    def __call__(self) -> None:
        self.phase = "acquire"
        assert self.lock.acquire()
        self.phase = "extend"
        self.lock.extend()
        self.phase = "release"
        self.lock.release()
        self.phase = "done"

    def settle(self, where: str) -> None:
        if self.phase in ("acquire", "done"):
            assert self.lock.lease is None, f"the object holds after {self.phase}, {where}"
        elif self.lock.lease is not None:
            with contextlib.suppress(redlock_deco.LockError):  # it may have ended meanwhile
                self.lock.release()


def _bare_acquire_release(_: redis.Redis) -> Callable[[], None]:
    return _Bare()


def _semaphore(_: redis.Redis) -> Callable[[], None]:
    @limited(NAME, limit=1, ttl=5, wait=2)
    def protected() -> int:
        return 1

    def run() -> None:
        assert protected() == 1

    return run


def _handed_off(r: redis.Redis) -> Callable[[], None]:
    def run() -> None:
        holder = _holder_thread(r, "lock:" + NAME, 0.05)
        try:
            with Lock(NAME, ttl=5, wait=3):
                pass
        finally:
            holder.join(5)

    return run


SYNC = {
    "with-block": _plain_with,
    "decorated": _decorated,
    "bare-acquire": _bare_acquire_release,
    "semaphore": _semaphore,
    "hand-off": _handed_off,
}


def _async_plain(_: redis.Redis) -> Callable[[], Any]:
    async def run() -> None:
        async with aio.Lock(NAME, ttl=5, wait=2):
            await asyncio.sleep(0)

    return run


def _async_decorated(_: redis.Redis) -> Callable[[], Any]:
    @locked(NAME, ttl=5, wait=2)
    async def protected() -> int:
        await asyncio.sleep(0)
        return 1

    async def run() -> None:
        await protected()

    return run


def _async_handed_off(r: redis.Redis) -> Callable[[], Any]:
    async def run() -> None:
        holder = _holder_thread(r, "lock:" + NAME, 0.05)
        try:
            async with aio.Lock(NAME, ttl=5, wait=3):
                await asyncio.sleep(0)
        finally:
            holder.join(5)

    return run


ASYNC = {
    "async-with": _async_plain,
    "async-decorated": _async_decorated,
    "async-hand-off": _async_handed_off,
}


# -- checks ----------------------------------------------------------------------------------


def _until(condition: Callable[[], object], within: float) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _primitive(kind: str) -> Any:
    if kind == "semaphore":  # of limit 1: a slot left held would keep everyone out
        return Semaphore(NAME, limit=1, ttl=5, wait=CLEANUP)
    return Lock(NAME, ttl=5, wait=CLEANUP)


def _nothing_left(r: redis.Redis, where: str, kind: str = "lock") -> None:
    """Another thread takes the name at once; nothing renews anything; the same thread takes
    it afresh; no key is left once they let go."""
    taken: list[bool] = []

    def other() -> None:
        lock = _primitive(kind)
        ok = lock.acquire()
        taken.append(ok)
        if ok:
            lock.release()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(CLEANUP + 5)
    assert taken == [True], f"another thread could not take the name after {where}"
    assert _until(lambda: len(renewal.renewer()) == 0, CLEANUP), f"still renewed after {where}"
    assert not waiting.registry.waiting, f"still registered for a grant after {where}"
    assert current_lease(None) is None, f"a section left open after {where}"
    mine = _primitive(kind)
    assert mine.acquire(), f"this thread could not take the name after {where}"
    try:
        assert mine.lease is not None
        token = mine.lease.token.encode()
        if kind == "semaphore":
            assert r.zrange("sem:" + NAME, 0, -1) == [token], f"slots left after {where}"
        else:
            assert r.get("lock:" + NAME) == token, f"re-entered after {where}"
    finally:
        mine.release()
    assert _until(lambda: r.dbsize() == 0, CLEANUP), f"keys left after {where}: {r.keys('*')}"


def _lines(run: Callable[[], None]) -> list[Line]:
    tracer = Tracer()
    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return list(tracer.seen)


def _where(line: Line) -> str:
    return f"{Path(line[0]).name}:{line[1]}"


@pytest.fixture
def r(server: Any) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


@pytest.mark.parametrize("scenario", list(SYNC))
def test_a_keyboard_interrupt_at_every_line_leaves_nothing_held(
    r: redis.Redis, scenario: str
) -> None:
    make = SYNC[scenario]
    kind = "semaphore" if scenario == "semaphore" else "lock"
    lines = _lines(make(r))
    assert len(lines) > 20  # the tracer saw the package run
    _nothing_left(r, "the listing run", kind)
    missed = []
    for line in lines:
        tracer = Tracer(line, _interrupt)
        run = make(r)
        sys.settrace(tracer)
        try:
            run()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        if not tracer.fired:
            missed.append(line)  # not reached this time (a path that depends on timing)
        settle = getattr(run, "settle", None)
        if settle is not None:
            settle(f"an interrupt at {_where(line)}")
        _nothing_left(r, f"an interrupt at {_where(line)}", kind)
    assert len(missed) < len(lines) / 2, [_where(line) for line in missed]


def _run_async(run: Callable[[], Any], tracer: Tracer | None) -> bool:
    """Run the coroutine function ``run`` in a fresh loop with ``tracer``; True if it ended
    cancelled."""

    async def main() -> bool:
        task = asyncio.ensure_future(run())
        if tracer is not None:
            tracer.act = task.cancel  # type: ignore[assignment]
        try:
            await task
        except asyncio.CancelledError:
            return True
        finally:
            await redlock_deco.aclose()
        return False

    if tracer is not None:
        sys.settrace(tracer)
        # settrace covers this thread's new frames; the loop's tasks run in it.
    try:
        return asyncio.run(main())
    finally:
        sys.settrace(None)


@pytest.mark.parametrize("scenario", list(ASYNC))
def test_a_cancel_at_every_line_leaves_nothing_held(r: redis.Redis, scenario: str) -> None:
    make = ASYNC[scenario]
    listing = Tracer()
    _run_async(make(r), listing)
    lines = list(listing.seen)
    assert len(lines) > 20
    _nothing_left(r, "the listing run")
    missed = []
    for line in lines:
        tracer = Tracer(line, None)
        cancelled = _run_async(make(r), tracer)
        if not tracer.fired:
            missed.append(line)
        elif not cancelled:
            # Cancelled after its last await: the call completed, and must have released.
            pass
        _nothing_left(r, f"a cancel at {_where(line)}")
    assert len(missed) < len(lines) / 2, [_where(line) for line in missed]
