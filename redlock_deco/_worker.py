"""Work that runs on its own: a serial worker thread that ends when idle, and asyncio tasks
kept referenced until done (:func:`background`).

Used wherever work for one Redis target must run in order on a thread of its own (renewals
per target, requests per quorum master). ``ThreadPoolExecutor`` threads never end while their
executor lives, so every target that was replaced (a provider registered again, per test or
per tenant) used to leave its threads behind for good. This worker's thread ends after
``idle`` seconds without work and starts again on the next submission, and a dropped worker
costs nothing once its thread has ended.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Coroutine
from typing import Any, Generic, TypeVar

from ._flag import Flag

T = TypeVar("T")

IDLE = 5.0


def start(thread: threading.Thread) -> bool:
    """Start ``thread``, unless the interpreter is finalizing; whether it started. A thread
    started then never runs, and on Python 3.11 its start() never returns: the process never
    exited -- a block left open and collected at exit (found by a mutant), a generator left
    inside a block and closed at exit with the server down (review 39). What such a call
    would have released lapses within its ttl."""
    if sys.is_finalizing():
        return False
    thread.start()
    return True


class Outcome(Generic[T]):
    """What a call run on a worker thread came to, for the thread that waits for it.

    Not a ``concurrent.futures.Future``: each of its methods, and ``wait()``, takes the
    future's ``threading.Condition`` through Python code (``Condition.__enter__``,
    ``_AcquireFutures``), and a KeyboardInterrupt raised as that code returned left the
    condition's lock held for good. The master's worker then blocked in ``set_result``, and
    every later call through that quorum master hung, whatever its ``wait`` (review 43, F4).
    Here the waiting thread reads attributes and sleeps on a :class:`Flag`, whose one C lock
    is taken by ``with``."""

    __slots__ = ("_error", "_flag", "_value", "_watchers")

    def __init__(self) -> None:
        self._flag = Flag()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._watchers: list[Flag] = []  # set too when it is done (see first_done)

    def set_result(self, value: T) -> None:
        self._value = value
        self._settle()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._settle()

    def _settle(self) -> None:
        self._flag.set()
        for watcher in list(self._watchers):  # (a copy: a waiter may stop watching meanwhile)
            watcher.set()

    def done(self) -> bool:
        return self._flag.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it is done, once it is or ``timeout`` seconds have passed."""
        return self._flag.wait(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._flag.wait(timeout):
            raise TimeoutError(f"no outcome within {timeout} s")
        return self._error

    def result(self, timeout: float | None = None) -> T:
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._value  # type: ignore[return-value]  # (set, since it is done)


def done_outcome(value: T) -> Outcome[T]:
    made: Outcome[T] = Outcome()
    made.set_result(value)
    return made


def first_done(outcomes: Collection[Outcome[Any]], timeout: float) -> list[Outcome[Any]]:
    """Those of ``outcomes`` done within ``timeout`` seconds, as soon as one is (None done
    by then: an empty list)."""
    woken = Flag()
    for outcome in outcomes:
        outcome._watchers.append(woken)
    try:
        if not _finished(outcomes):  # (watched first: one done meanwhile sets ``woken``)
            woken.wait(timeout)
        return _finished(outcomes)
    finally:
        _unwatch(outcomes, woken)


def _finished(outcomes: Collection[Outcome[Any]]) -> list[Outcome[Any]]:
    return [outcome for outcome in outcomes if outcome.done()]


def _unwatch(outcomes: Collection[Outcome[Any]], woken: Flag) -> None:
    for outcome in outcomes:
        if woken in outcome._watchers:  # (an interrupt here leaves a stale Flag: harmless)
            outcome._watchers.remove(woken)


class SerialWorker:
    """Run submitted calls one at a time, in order, on one daemon thread."""

    def __init__(self, name: str, idle: float = IDLE) -> None:
        self.name = name
        self.idle = idle
        self.pid = os.getpid()  # (a forked child makes its own: see _renewal._forked)
        self._queue: collections.deque[tuple[Outcome[Any], Callable[..., Any], tuple[Any, ...]]]
        self._queue = collections.deque()
        # Taken with `with self._lock:` (the C lock's own enter and exit), never `with
        # self._ready:`: Condition.__enter__ is Python code, and a KeyboardInterrupt raised as
        # it returned left the lock held for good -- a quorum call interrupted in submit()
        # hung in its own clean-up, and every later call through that master hung past its
        # wait (review 40, 6; the renewer's twin was review 4's).
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[..., T], *args: Any) -> Outcome[T]:
        future: Outcome[T] = Outcome()
        if sys.is_finalizing():
            # Nothing would run it, and the lock may be held for good by this worker's
            # daemon thread, stopped wherever it stood when the exit began (see the
            # renewer's _at_exit): fail at once.
            future.set_exception(RuntimeError("the interpreter is shutting down"))
            return future
        with self._lock:
            self._queue.append((future, fn, args))
            if self._thread is None or not self._thread.is_alive():
                # (Not alive: an interrupt before start() left a thread that never ran, and
                # nothing submitted here ran again -- see the renewer's twin.)
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                try:
                    started = start(self._thread)
                except BaseException:
                    # No thread (RuntimeError: a limit on threads or processes): the call is
                    # not queued for a thread that will never run it; the caller is told.
                    self._queue.pop()
                    self._thread = None
                    raise
                if not started:
                    self._queue.pop()
                    self._thread = None
                    future.set_exception(RuntimeError("the interpreter is shutting down"))
            else:
                self._ready.notify()
        return future

    def retire(self) -> None:
        """End the thread as soon as the queued work is done (its target was replaced)."""
        with self._lock:
            self.idle = 0.0
            self._ready.notify()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    _busy = 0  # 1 while a call runs
    _since = 0.0  # when the one running began
    _last = 0.0  # how long the last call took

    def _run(self) -> None:
        while True:
            with self._lock:
                self._busy = 0
                if not self._queue and self.idle > 0:
                    self._ready.wait(self.idle)
                if not self._queue:
                    self._thread = None  # under the lock: a submit now starts a new thread
                    return
                future, fn, args = self._queue.popleft()
                self._busy = 1
                self._since = time.monotonic()
                self._began()
            _settle(future, fn, args, self)

    def _began(self) -> None:
        """Under the lock, as a call begins on the worker's thread (see Lanes)."""


class Lanes(SerialWorker):
    """A worker whose queue more threads help drain while its calls are slow: once a call has
    taken longer than SLOW (or the one running has), each call waiting behind it gets a
    helper thread -- as it is submitted, as the next call begins, or at a nudge -- up to
    ``width`` threads in all. Helpers end
    as soon as the queue is empty. Calls are started in order, but may then run side by side.

    For the sync renewer's rounds on one target: one worker ran them one at a time, and a
    round waits for its server -- a quorum's round for a stopped master's node timeout, 0.25 s
    -- so a process renewed at most four leases a second there, and of 12 leases of 2 s, 7
    were lost while a minority of the masters was stopped (review 61, F1); a server 100 ms
    away lost 18 of 30 so. While rounds are quick it is one thread, as before (a thread per
    call of a batch started 8 per provider for nothing: review 62, F2). A helper that cannot
    start (a limit on threads) is done without: the calls wait for the threads there are."""

    def __init__(self, name: str, width: int) -> None:
        super().__init__(name)
        self.width = width
        self._helpers = 0  # helper threads
        self._helping = 0  # of them, those running a call

    def submit(self, fn: Callable[..., T], *args: Any) -> Outcome[T]:
        future = super().submit(fn, *args)
        with self._lock:
            self._help()
        return future

    def _help(self) -> None:
        """Under the lock: a helper thread for the calls waiting, if calls are slow."""
        while (
            self._queue
            and self._busy
            and (self._last > SLOW or time.monotonic() - self._since > SLOW)
            and self._helpers < self.width - 1
            and len(self._queue) > self._helpers - self._helping  # (more than will take them)
        ):
            helper = threading.Thread(target=self._drain, name=self.name, daemon=True)
            self._helpers += 1
            try:
                started = start(helper)
            except RuntimeError:
                started = False
            if not started:
                self._helpers -= 1
                return

    def _began(self) -> None:
        self._help()  # (the calls queued behind the one beginning, if calls are slow)

    def nudge(self) -> None:
        """Helpers for the calls queued behind one that has become slow while it runs (the
        sync renewer calls this as it goes round): counted as quick until it ended, it held
        up every call behind it -- of 10 leases of 1 s with a quorum master stopped, one was
        lost (review 63, F3)."""
        with self._lock:
            self._help()

    @property
    def waiting(self) -> bool:
        return bool(self._queue)

    def _drain(self) -> None:
        ran = False
        try:
            while True:
                with self._lock:
                    if ran:
                        self._helping -= 1
                        ran = False
                    if not self._queue:
                        return
                    future, fn, args = self._queue.popleft()
                    self._helping += 1
                    ran = True
                _settle(future, fn, args, self)
        finally:
            with self._lock:
                self._helpers -= 1
                if ran:  # (ended otherwise: what a helper runs is caught, but)
                    self._helping -= 1


def _settle(
    future: Outcome[Any], fn: Callable[..., Any], args: tuple[Any, ...], worker: SerialWorker
) -> None:
    """Run ``fn(*args)`` into ``future``, the time it took noted on ``worker`` first (read by
    Lanes: whoever waits for the outcome may submit the next call at once)."""
    began = time.monotonic()
    try:
        result = fn(*args)
    except BaseException as exc:  # handed to whoever waits for the outcome
        worker._last = time.monotonic() - began
        future.set_exception(exc)
        return
    worker._last = time.monotonic() - began
    future.set_result(result)


# A call that takes longer than this is slow (see Lanes): a local server's round takes well
# under a millisecond; a stopped quorum master's, the node timeout (0.25 s).
SLOW = 0.02


_running: set[asyncio.Task[Any]] = set()
_abandoned: dict[asyncio.Task[Any], Callable[[], None]] = {}  # see background()


def background(
    coro: Coroutine[Any, Any, None], name: str, abandoned: Callable[[], None] | None = None
) -> asyncio.Task[None]:
    """Start ``coro`` on the running loop and keep it referenced until it is done.

    asyncio holds only weak references to tasks: one nobody references can be collected
    while pending, its coroutine closed mid-flight. ``abandoned``: called if its loop is
    found closed with the task still pending (closed by hand), when it is forgotten.
    """
    forget_closed()
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _running.add(task)
    task.add_done_callback(_done)
    if abandoned is not None:
        _abandoned[task] = abandoned
    return task


def _done(task: asyncio.Task[Any]) -> None:
    _running.discard(task)
    _abandoned.pop(task, None)


def forget_closed() -> None:
    """Stop keeping the tasks of loops closed without running them to their end (a loop
    closed by hand leaves its grant subscriber pending): referenced here, each kept its
    connection open until the next purge, and it warned, unclosed, wherever it was then
    collected (CI's slow leg, once the asyncio renewer no longer started a task per loop)."""
    # A copy first (list() of a set runs in C, between no two thread switches): other
    # threads' loops add and discard tasks while this looks at each (review 13: "Set changed
    # size during iteration" with loops in 12 threads).
    for stale in [t for t in list(_running) if t.get_loop().is_closed()]:
        _running.discard(stale)
        abandoned = _abandoned.pop(stale, None)
        if abandoned is not None:
            with contextlib.suppress(Exception):  # best effort: the loop is gone
                abandoned()


async def set_within(event: asyncio.Event, timeout: float | None) -> bool:
    """Whether ``event`` is set within ``timeout`` seconds (None: however long).

    Not ``asyncio.wait_for``: on Python 3.10 it returns the result, and drops the
    cancellation, when the task is cancelled as the awaited thing completes -- a waiter
    cancelled as its grant arrived went on, acquired and ran its body, and a looping worker
    whose cancel was dropped kept ``asyncio.run`` from ending (review 16, 08: 51 of 134
    cancels at a grant). ``asyncio.wait`` raises the cancellation whatever completed."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((waiter,), timeout=timeout)
    finally:
        waiter.cancel()  # (done already: nothing)
    return event.is_set()


def quiet(future: asyncio.Future[Any]) -> None:
    """A done-callback reading a background future's outcome: a failure nobody waits for is
    dropped, never logged as "exception was never retrieved"."""
    if not future.cancelled():
        future.exception()


def forget_tasks() -> None:
    """In a forked child: the parent's tasks and loops do not run here."""
    _running.clear()
