"""Process-wide state, all of it: what a forked child must not inherit, and what is kept per
event loop. One fork hook, one per-loop table with one clean-up path.

- Per thread and per asyncio task: the locks held (re-entrancy) and the stack of protected
  sections entered (``current_lease()``), see :mod:`redlock_deco._ownership`.
- Per process: the sync targets built from providers, the sync renewer.
- Per event loop (:class:`LoopState`): the asyncio targets and the clients built for that
  loop, its renewer, and the leases acquired in it.

A loop's state is cleaned up on one path, :meth:`LoopState.aclose`: it releases whatever the
loop still holds, then closes the clients built for it. ``asyncio.run`` reaches it through
the loop's async-generator shutdown, which runs *after* every task has been cancelled and has
finished -- so holders cancelled at shutdown release their locks on clients that are still
open (a task-based reaper was cancelled together with them and closed the clients under their
releases). Code that manages loops by hand calls ``await redlock_deco.aclose()``. A loop
closed without either is forgotten at the next loop's first use: what it still held lapses
after its ttl, its connections are dropped unclosed (a ResourceWarning under ``-W default``,
as for any client nobody closed), and its idle grant subscriber is destroyed without the
"Task was destroyed but it is pending" report (it holds nothing, see ``_waiting``); a renewal
round in flight as such a loop closed is reported so (its lease lapses within its ttl).

Why one module: the fork hook must reset every table here, and a loop's clean-up reads all
of its state at once (targets current and retired, clients, leases, renewer); split, a table
added on one side was missed by the other's reset or clean-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any, TypeVar

from redis.exceptions import RedisError

from . import _drivers as drivers
from . import _tokens as tokens
from . import _worker as worker
from ._errors import ProviderError
from ._lifecycle import Lease, notify_lost, say_released

log = logging.getLogger("redlock_deco")

# How long a loop's clean-up may spend releasing what is left (all at once) on a slow server.
SHUTDOWN_TIMEOUT = 5.0
# How often a loop's shutdown looks whether the other async generators have ended.
BLOCKS_POLL = 0.01
# How long a loop's shutdown lets the commands in flight end before closing their clients.
SENDING_GRACE = 1.0

HoldingKey = tuple[str, str]  # (provider name, Redis key)
Holdings = dict[HoldingKey, Lease]
Calls = list[tuple[int, Lease]]  # protected sections entered, innermost last, with a sequence
Tables = tuple[Holdings, Calls]


class LoopState:
    """Everything redlock-deco keeps for one event loop."""

    __slots__ = (
        "__weakref__",
        "_closer",
        "built",
        "clients",
        "closed",
        "leases",
        "loop",
        "renewer",
        "retired",
        "targets",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)  # a strong one would keep a closed loop alive
        self.targets: dict[str, Any] = {}  # provider name -> AsyncTarget | QuorumAsyncTarget
        self.built: dict[str, object] = {}  # provider name -> the registration it was built from
        # Replaced by a provider registered again, with commands in flight or leases on them
        # still (see retire): waited for and stopped at aclose() as the current ones are.
        self.retired: list[Any] = []
        self.clients: list[Any] = []  # clients built here from URLs: ours to close
        self.renewer: Any = None  # the loop's AsyncRenewer, once needed
        self.leases: set[Lease] = set()  # acquired in this loop and not yet released
        self.closed = False  # aclose() has begun: it closes its clients
        self._closer: AsyncGenerator[None, None] | None = None

    def watch_shutdown(self) -> None:
        """Arrange for :meth:`aclose` to run at ``asyncio.run``'s shutdown.

        An async generator iterated once in the running loop is registered with it, and the
        loop's ``shutdown_asyncgens()`` closes it after all tasks have finished. Driven by
        hand to its first ``yield`` (nothing in it awaits before), so no task is created.
        """
        closer = _until_shutdown(self)
        step = closer.asend(None)
        with contextlib.suppress(StopIteration):
            step.send(None)
        self._closer = closer  # a strong reference: the loop keeps only a weak one

    async def _others_left(self, beside: Callable[[], bool]) -> None:
        """At ``asyncio.run``'s shutdown, let the loop's other async generators end first,
        for up to half the shutdown's time: ``shutdown_asyncgens()`` closes them beside this
        closer (``beside()``: some still run), and one suspended inside a lock block, or
        holding a lock by its object until its ``finally``, releases it itself when its
        clean-up is done. Released here at once, the key went to another client while that
        clean-up still ran, with no loss signal, and an object's own release then raised
        LockNotOwned (review 18, 02). What is still held after that is released here; a
        block still open inside it is reported lost first."""
        if self.renewer is not None and beside():
            for lease in self.leases:
                if lease.sections:
                    lease._kept_through_shutdown()
            self.renewer.resume()  # stopped by asyncio.run with every other task
        await _while(beside, time.monotonic() + SHUTDOWN_TIMEOUT / 2)

    def retire(self, name: str) -> None:
        """Forget the target of provider ``name`` (registered again, or unregistered), but
        keep it for aclose() while it is in use: a quorum's, replaced while a stalled
        master still owed an acquire and the releases queued behind it, was closed at
        once under them at the loop's end, and they never went out (review 64, F5: keys
        left on every master until their ttl)."""
        target = self.targets.pop(name, None)
        # (Called from the registering thread while the loop's own thread changes its leases:
        # a set iterated in Python raised "Set changed size during iteration" out of
        # register_provider, which left the later loops' targets on the old server -- two
        # holders of one name, review 65, F1. list() of a set is one C call.)
        held = {id(lease.target) for lease in list(self.leases) if lease.held}
        self.retired = [
            old
            for old in (*self.retired, *([target] if target is not None else []))
            if old.busy or old.sending or getattr(old, "owed", 0) or id(old) in held
        ]

    def _all_targets(self) -> list[Any]:
        return [*self.targets.values(), *self.retired]

    def _in_use(self) -> bool:
        """Whether an acquire, a round trip or a wait is in flight on the loop's clients."""
        return any(target.busy or target.sending for target in self._all_targets())

    def check_idle(self) -> None:
        """Refuse to clean up under a running task that still holds a lease: releasing it
        would let another holder in while that task is still inside."""
        # An object's lease (acquired in a helper task) is in use while its object lives.
        busy = sorted({lease.key for lease in self.leases if lease.held and lease.alive()})
        if busy:
            raise RuntimeError(
                f"redlock_deco.aclose() while tasks of this loop still hold {', '.join(busy)}: "
                "call it after they have finished (it is meant as the last thing before "
                "closing a loop you manage by hand)"
            )

    async def aclose(self, at_shutdown: bool = False) -> None:
        """Release what this loop still holds, stop its renewer, close its clients.

        Releases and pending clean-ups run together under one deadline, so a dead server
        costs shutdown at most SHUTDOWN_TIMEOUT, not a socket timeout per lease.
        """
        if self.closed:
            return  # aclose() by hand, then the closer at the loop's shutdown: done already
        self.closed = True
        started = time.monotonic()
        beside = _closing_beside(asyncio.current_task())
        if at_shutdown:
            await self._others_left(beside)
        loop = self.loop()
        if loop is not None and _loops.get(loop) is self:
            del _loops[loop]  # then: nothing may reach the clients being closed
        leases, self.leases = list(self.leases), set()
        for lease in leases:
            # A block still runs inside it: never released in silence. (Not a lease held by
            # its object: which code may still use it cannot be told, and reporting every
            # one lost when any generator's clean-up ran long was wrong for the rest: review
            # 26, 03. Its own release() raises LockNotOwned, as documented.)
            if lease.sections and lease._lose():
                notify_lost(lease)
        work = [release_at_shutdown(lease) for lease in leases]
        if self.renewer is not None:
            work.append(self.renewer.last_cleanups())
        if work:
            try:
                await asyncio.wait_for(asyncio.gather(*work, return_exceptions=True),
                                       SHUTDOWN_TIMEOUT)  # fmt: skip
            except (TimeoutError, asyncio.TimeoutError):
                log.warning(
                    "redlock-deco: releases at loop shutdown did not finish within %.0f s; "
                    "what remains expires within its ttl",
                    SHUTDOWN_TIMEOUT,
                )
        if at_shutdown:
            # A generator still closing may be waiting for a lock on these clients: closed
            # under it, the client reconnected and was never closed (review 21, 02). Its
            # acquire, once granted, is refused (the state is gone) and given back here.
            # Only while something is in flight, and within the shutdown's time: a task of
            # unknown origin closing a generator may never end (review 23, 01: a wait
            # without the library's); past that, the closed targets send nothing more
            # (review 22, 02).
            await _while(lambda: beside() and self._in_use(), started + SHUTDOWN_TIMEOUT)
        if self.renewer is not None:
            stopping = self.renewer.stop()
            if stopping:  # let the cancelled tasks end while the loop still runs
                await asyncio.wait(stopping, timeout=SHUTDOWN_TIMEOUT)
        for target in self._all_targets():
            stop = getattr(target, "stop", None)  # its subscriber; and it takes no more
            if stop is not None:
                stop()
        # A command still in flight ends first: closed under it, the client's retry
        # reconnected, and nothing closed that connection (review 22, 02). What a quorum's
        # stalled master still owes (an acquire, the release queued behind it) gets the rest
        # of the shutdown's time: closed after a second, the release never went out, and the
        # acquire, run once the master came back, left a lease of a finished call (review 41).
        # In use, not only sending: a waiter refused by the stop gives its place in the
        # queue back first (see AsyncTarget.stop), an await later.
        grace = time.monotonic() + SENDING_GRACE
        if any(getattr(target, "owed", 0) for target in self._all_targets()):
            grace = max(grace, started + SHUTDOWN_TIMEOUT)
        await _while(self._in_use, grace)
        for target in self._all_targets():
            seal = getattr(target, "seal", None)
            if seal is not None:
                seal()
        for client in self.clients:
            with contextlib.suppress(Exception):  # a dead server must not spoil shutdown
                await client.aclose()
        self.clients.clear()
        self.targets.clear()
        self.retired.clear()


async def release_at_shutdown(lease: Lease) -> None:
    """Give back a lease whose loop is ending: nothing could renew or release it later. Its
    "released" closes its events, sent or not (a block dropped open as its loop ended, an
    object's lease: they stopped at "acquired", review 93a, F1)."""
    lease._release()
    if lease.pid != os.getpid():
        return
    try:
        await drivers.run_async(lease.target.algorithms.release(lease.claim), lease.target)
    except (RedisError, OSError) as exc:
        log.warning("releasing %r at loop shutdown failed (%r); it expires within its ttl",
                    lease.key, exc)  # fmt: skip
    finally:
        say_released(lease, time.monotonic() - lease.acquired_at)


async def _until_shutdown(state: LoopState) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        try:
            running = asyncio.get_running_loop() is state.loop()
        except RuntimeError:
            running = False
        # Closed by the loop's shutdown (or aclose): clean up in it. Collected without a
        # running loop: there is nothing to await with, so only forget.
        if running:
            await state.aclose(at_shutdown=True)


async def _while(condition: Callable[[], bool], deadline: float) -> None:
    while time.monotonic() < deadline and condition():
        await asyncio.sleep(BLOCKS_POLL)


def _closing_beside(me: asyncio.Task[Any] | None) -> Callable[[], bool]:
    """A check that async generators the loop's shutdown closes beside this closer still
    run. ``shutdown_asyncgens()`` closes them all in one gather, whose tasks are this
    closer's siblings: waiting for any other task closing a generator waited for one the
    shutdown does not wait for (review 23, 01: a generator's aclose() pending in a task of
    its own), and for another closer of the same loop, which waited for this one (review
    23, 05). Without the gather (another event loop's internals), any task closing an async
    generator counts, within the shutdown's time."""
    siblings = _gathered_with(me)
    if siblings is not None:
        return lambda: any(not task.done() for task in siblings)
    return lambda: any(
        task is not me and type(task.get_coro()).__name__ == "async_generator_athrow"
        for task in asyncio.all_tasks()
    )


def _gathered_with(me: asyncio.Task[Any] | None) -> list[asyncio.Future[Any]] | None:
    """The other children of the gather ``me`` runs in, found through the gather's
    done-callback on ``me`` (asyncio's internals: its closure holds the gathering future,
    whose ``_children`` are the gathered tasks); None if ``me`` is not in one."""
    for callback, _context in getattr(me, "_callbacks", None) or ():
        for cell in getattr(callback, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            children = getattr(value, "_children", None)
            if isinstance(value, asyncio.Future) and isinstance(children, list):
                return [child for child in children if child is not me]
    return None


_T = TypeVar("_T")

_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopState] = (
    weakref.WeakKeyDictionary()
)


def loop_state() -> LoopState:
    """The state of the running event loop, created on its first use."""
    loop = asyncio.get_running_loop()
    state = _loops.get(loop)
    if state is None:
        if getattr(loop, "_asyncgens_shutdown_called", False):
            # Its closer would be registered after shutdown_asyncgens() (asyncio warns), so
            # nothing would close the clients this state builds (review 20, 02: a lock
            # taken in an async generator's finally at asyncio.run's end leaked them).
            raise ProviderError(
                "this event loop is shutting down (shutdown_asyncgens() has run, as at the "
                "end of asyncio.run), and a connection opened now would never be closed: "
                "take the lock before the loop's end, not in an async generator's clean-up "
                "that the shutdown runs"
            )
        for closed in [known for known in _copied(_loops.keys) if known.is_closed()]:
            _loops.pop(closed, None)  # closed without asyncio.run or aclose(): forget
        worker.forget_closed()  # and their tasks still pending (a grant subscriber)
        state = _loops[loop] = LoopState(loop)
        state.watch_shutdown()
    return state


def known_loop_state() -> LoopState | None:
    """The running event loop's state, or None if it has none (yet, or any more)."""
    return _loops.get(asyncio.get_running_loop())


def loop_states() -> list[LoopState]:
    """The states of every event loop known in this process."""
    return _copied(_loops.values)


def _copied(view: Callable[[], Iterable[_T]]) -> list[_T]:
    """A list of what ``view()`` yields, taken again if another thread's loop changed the
    mapping meanwhile (a WeakKeyDictionary iterates in Python, between thread switches:
    review 13 saw "dictionary keys changed during iteration" with loops in 12 threads)."""
    while True:
        try:
            return list(view())
        except RuntimeError:
            continue


async def aclose() -> None:
    """Release what the running event loop still holds and close the clients redlock-deco
    built for it. ``asyncio.run`` does this by itself at shutdown; call it before closing a
    loop you manage by hand (``run_until_complete`` + ``close``), once its tasks are done.
    Raises RuntimeError, touching nothing, while a running task still holds a lease."""
    state = _loops.get(asyncio.get_running_loop())
    if state is not None:
        state.check_idle()
        await state.aclose()


# -- per thread and per task -----------------------------------------------------------


class ThreadOwner:
    """Stands for the current thread as the owner of protected sections.

    Kept only in a thread-local, so it is freed when its thread ends -- whatever started
    the thread: ``threading``, ``_thread.start_new_thread``, or C code (mod_wsgi, uWSGI),
    whose ``threading._DummyThread`` objects report ``is_alive()`` forever and are handed
    to a later thread that reuses the ident. Leases hold it weakly: a dead reference is
    the end of the thread (renewal stops), and a new thread always gets a new owner.
    """

    __slots__ = ("__weakref__", "here", "tables")

    def __init__(self) -> None:
        self.tables: Tables = ({}, [])
        # The leases of lock sections open on this thread, whatever their owner (the
        # thread itself or a task of the loop it runs): a sync acquire that waited for one
        # would stop the very thread that has to end it.
        self.here: dict[Lease, None] = {}


_local = threading.local()
_tasks: weakref.WeakKeyDictionary[asyncio.Task[Any], Tables] = weakref.WeakKeyDictionary()


def thread_owner() -> ThreadOwner:
    """The owner object of the calling thread (created on first use)."""
    try:
        owner: ThreadOwner = _local.owner
    except AttributeError:
        owner = _local.owner = ThreadOwner()
    return owner


def thread_tables() -> Tables:
    return thread_owner().tables


def task_tables(task: asyncio.Task[Any] | None = None) -> Tables:
    task = task or asyncio.current_task()
    if task is None:
        raise RuntimeError("redlock_deco.asyncio primitives must be used inside an asyncio task")
    tables = _tasks.get(task)
    if tables is None:
        tables = _tasks[task] = ({}, [])
    return tables


# -- per process -----------------------------------------------------------------------

#: Sync targets built from providers in this process (name -> SyncTarget | QuorumSyncTarget).
sync_targets: dict[str, Any] = {}
#: name -> the registration each of them was built from (see _providers._registered).
sync_built: dict[str, object] = {}
#: Guards building targets and the loop tables' registry (not the lock-free cached reads).
registry_lock = threading.Lock()
#: The sync renewer, created on first use (see renewal.renewer()).
sync_renewer: list[Any] = []


def _after_fork_in_child() -> None:
    """A child is a different process: it takes its own locks, builds its own clients and
    renewers, and never touches its parent's (whose threads do not exist here, and whose
    locks another thread may have held at fork time)."""
    global _local, registry_lock
    tokens.reset()  # a child must never repeat its parent's tokens
    _local = threading.local()
    _tasks.clear()
    registry_lock = threading.Lock()
    sync_targets.clear()
    sync_built.clear()
    sync_renewer.clear()
    _loops.clear()
    worker.forget_tasks()


os.register_at_fork(after_in_child=_after_fork_in_child)
