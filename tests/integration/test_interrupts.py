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
import queue
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
from redlock_deco import _providers as providers
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


# Where a signal can land as a function returns, before its caller stores the result: after
# a C call inside Python code (CPython checks for signals there), so on the return of the
# standard library's Python code around locks and queues that our code calls (the return of
# Condition.__enter__ once left the renewer's lock held for good: review 4, r02), and of our
# functions that hand a resource to their caller (a lane place, a pooled connection, a
# lease: an interrupt there lost it for good, review 4). (Python 3.11+ checks for signals on
# no other return; 3.10 on more, whose windows this test does not enumerate.)
LIBRARIES = tuple(str(Path(module.__file__)) for module in (threading, queue))
HANDING = frozenset({("_drivers.py", "checkout"), ("_drivers.py", "acquire"),
                     ("_guard.py", "_take")})  # fmt: skip


class Tracer:
    """Lists the package's lines as first reached; or acts once at ``target``.

    With ``returns``, the points include every return of a package function, and of a
    function of ``LIBRARIES`` called from the package (a point ``(file, -line)``): an
    interrupt raised there replaces the returned value, as a signal arriving just after the
    call would -- before the caller could store what it got (a lane place, a pooled
    connection, a lock taken: review 4, r02/r03).
    """

    def __init__(
        self,
        target: Line | None = None,
        act: Callable[[], None] | None = None,
        returns: bool = False,
    ) -> None:
        self.target = target
        self.act = act
        self.returns = returns
        self.seen: dict[Line, None] = {}
        self.fired = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            if _ours(frame):
                return self._local
            caller = frame.f_back
            if (self.returns and caller is not None and _ours(caller)
                    and frame.f_code.co_filename in LIBRARIES):  # fmt: skip
                return self._local
        return None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and _ours(frame):
            self._point((frame.f_code.co_filename, frame.f_lineno))
        elif (
            event == "return"
            and self.returns
            and (
                frame.f_code.co_filename in LIBRARIES
                or (Path(frame.f_code.co_filename).name, frame.f_code.co_name) in HANDING
            )
        ):
            self._point((frame.f_code.co_filename, -frame.f_lineno))
        return self._local

    def _point(self, point: Line) -> None:
        if self.target is None:
            self.seen.setdefault(point)
        elif point == self.target and not self.fired:
            self.fired = True
            assert self.act is not None
            self.act()  # may raise: into the traced frame, and the tracer is unset


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


def _nothing_left(
    r: redis.Redis, where: str, kind: str = "lock", returned: bool = False, line: bool = False
) -> None:
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
    if line and waiting.registry.waiting:
        # A KeyboardInterrupt on a line of the clean-up that closes a grant registration (the
        # acquire's `finally`) leaves it registered: the process's subscriber then stays open
        # (one connection), nothing is held. Asyncio cancellations, and interrupts as a call
        # hands the registration over, are checked below.
        waiting.registry.waiting.clear()
    assert _until(lambda: not waiting.registry.waiting, CLEANUP), (
        f"still registered for a grant after {where}"
    )
    target = providers.sync_target("default")
    if not returned:
        # An interrupt on a line of the very clean-up that gives a connection or a lane
        # place back (a `finally` line) loses it, as in redis-py's own code: capacity, never
        # safety, and a lane waits PLACE_WAIT at most. One as a call returns, before the
        # caller stored what it got, is ours to prevent (review 4, r03). The next run starts
        # with a client of its own, so what this one lost is not charged to it.
        providers.register_provider("default", providers._sources["default"])  # type: ignore[arg-type]
        return
    for lane in target.lanes or ():  # no connection place taken for good (a background
        # clean-up may hold one for a moment)
        assert _until(lambda lane=lane: lane._free.qsize() == lane._n, CLEANUP), (
            f"a lane lost a place after {where}"
        )
    pool = target.direct
    if pool is not None:  # no pooled connection kept out (but the grant subscription's)
        subscription = getattr(getattr(target.waiting, "_pubsub", None), "connection", None)

        def out() -> list[Any]:
            return [conn for conn in pool._in_use_connections if conn is not subscription]

        assert _until(lambda: not out(), CLEANUP), f"a connection kept out after {where}"
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


def _lines(run: Callable[[], None], returns: bool = False) -> list[Line]:
    tracer = Tracer(returns=returns)
    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return list(tracer.seen)


def _where(line: Line) -> str:
    if line[1] < 0:
        return f"the return at {Path(line[0]).name}:{-line[1]}"
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
    lines = _lines(make(r), returns=True)
    assert len(lines) > 20  # the tracer saw the package run
    assert any(line[1] < 0 and line[0] in LIBRARIES for line in lines)  # and what it calls
    _nothing_left(r, "the listing run", kind)
    missed = []
    for line in lines:
        tracer = Tracer(line, _interrupt, returns=True)
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
        _nothing_left(r, f"an interrupt at {_where(line)}", kind, returned=line[1] < 0,
                      line=line[1] > 0)  # fmt: skip
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
