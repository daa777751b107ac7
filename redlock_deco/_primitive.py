"""What every primitive shares: ownership bookkeeping, errors, and the explicit
acquire/release/extend/owned/holders/locked API with the context-manager protocol -- as a sync
class and its asyncio twin, side by side so they cannot drift (a test compares them)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from . import _drivers as drivers
from . import _guard as guard
from . import _ownership as ownership
from . import _providers as providers
from . import _renewal as renewal
from ._errors import KeyTemplateError, LockNotAcquired, LockNotOwned
from ._lifecycle import Lease
from ._naming import bounded, has_address
from ._options import LeaseOptions, acquire_wait, check_seconds, check_wait, to_ms
from ._protocol import Kind

DEFAULT: Any = object()


class Holding:
    """One acquisition by one primitive object, and the protected section it opened (with
    the frame that runs that ``with`` block)."""

    __slots__ = ("frame", "lease", "section")

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.section: ownership.Section | None = None
        self.frame = 0


def _user_frame() -> int:
    """The id of the frame running the ``with`` statement (the first caller outside this
    package): it is alive, and so unique, for as long as its block is open."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("redlock_deco"):
        frame = frame.f_back  # type: ignore[assignment]  # None ends the loop
    return id(frame)


class ObjectOwner:
    """Stands for "the object itself" as the owner of leases a helper task acquired."""

    __slots__ = ("__weakref__",)


class Base:
    """Name, options, and the leases this object took, per owner (thread or task).

    What owns a lease: the object *and* the owner that acquired it (a thread for ``Lock``, a
    task for the asyncio ``Lock``). Another object naming the same key does not own it (API:
    "held by this object"), and neither does another thread or task using this object, so
    tasks sharing one object never release each other's lock. The one exception is an
    acquire that runs as a task of its own -- ``asyncio.gather(lock.acquire(), ...)``,
    ``asyncio.shield(lock.acquire())``, ``asyncio.wait_for(lock.acquire(), t)`` before Python
    3.12: that task ends as soon as the lock is taken, so the lease belongs to the object
    alone, like a ``threading.Lock``: it is renewed while the object exists, any task using
    the object may ``release``, ``extend`` or check it (a task's own lease comes first), and
    it is never re-entered -- another ``acquire`` or ``async with`` waits for it like anyone
    else (handing it to whichever task asked next let a second task in).
    """

    kind: Kind
    noun = "lock"
    is_async = False
    owner_hint = ""

    def __init__(self, name: str, options: LeaseOptions) -> None:
        if options.on_lost == "cancel" and not self.is_async:
            raise ValueError(
                "on_lost='cancel' needs the asyncio primitive: only a task can be "
                "cancelled; pass a callback instead"
            )
        if has_address(name):
            raise KeyTemplateError(
                f"lock name {name!r} holds an object's default repr (<... at 0x...>), which "
                "differs per object and per process, so it would exclude nobody; build the "
                "name from a stable attribute (an id) instead",
                template=name,
            )
        self.name: str = bounded(name)
        self.key: str = options.prefix + self.name
        self.options: LeaseOptions = options
        self.limit: int = options.limit
        self._mine: weakref.WeakKeyDictionary[Any, list[Holding]] = weakref.WeakKeyDictionary()
        self._object_owner = ObjectOwner()

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} {self.key!r}>"

    @property
    def lease(self) -> Lease | None:
        """The lease the calling owner holds through this object (``.fencing_token``,
        ``.remaining()``, ``.lost``...), or None."""
        holding = self._holding()
        return None if holding is None else holding.lease

    def _lease(self) -> Lease | None:
        """``self.lease`` under its pre-0.2 private name (the review's repro scripts use it)."""
        return self.lease

    def _owner(self) -> Any:
        return threading.current_thread()

    def _holding(self) -> Holding | None:
        """This object's newest acquisition by the calling owner -- or, failing that, one
        the object itself holds -- if any (never one taken by the parent of a forked child,
        whose thread object the child inherits)."""
        mine = self._mine.get(self._owner()) or self._mine.get(self._object_owner)
        if not mine or mine[-1].lease.pid != os.getpid():
            return None
        return mine[-1]

    def _exiting(self) -> Holding | None:
        """The acquisition this ``with`` block entered: the newest one entered from the
        frame now exiting. (The newest of all would be wrong when blocks on one object end
        out of order -- a generator suspended inside one outlives a later block -- and the
        ending block would give back the generator's slot while keeping its own.)"""
        frame = _user_frame()
        for owner in (self._owner(), self._object_owner):
            for holding in reversed(self._mine.get(owner, [])):
                if holding.frame == frame and holding.lease.pid == os.getpid():
                    return holding
        return self._holding()

    def _keep(self, lease: Lease, owner: Any = None) -> None:
        self._mine.setdefault(owner or self._owner(), []).append(Holding(lease))

    def _forget(self, holding: Holding) -> None:
        for owner in (self._owner(), self._object_owner):
            mine = self._mine.get(owner, [])
            if holding in mine:
                mine.remove(holding)
                return

    def _owned_holding(self, action: str) -> Holding:
        holding = self._holding()
        if holding is None:
            raise LockNotOwned(
                f"cannot {action} {self.key!r}: this owner (thread or task) does not hold it"
                + self.owner_hint,
                name=self.name,
                key=self.key,
            )
        return holding

    def _ended(self, action: str) -> LockNotOwned:
        return LockNotOwned(
            f"cannot {action} {self.key!r}: its lease had already ended (expired or taken "
            "over); nothing of another holder's was touched",
            name=self.name,
            key=self.key,
        )

    def _wait(self, blocking: bool, timeout: float | None, wait: float | None) -> float | None:
        """How long ``acquire`` waits: ``wait=`` as given, else ``blocking``/``timeout`` in
        threading.Lock's meaning (see options.acquire_wait), else this object's ``wait``."""
        if wait is DEFAULT:
            return acquire_wait(blocking, timeout, self.options.wait)
        if blocking is not True or timeout is not None:
            raise TypeError(
                f"acquire() takes wait= or blocking=/timeout=, not both (got wait={wait!r}, "
                f"blocking={blocking!r}, timeout={timeout!r}): they say the same thing"
            )
        return check_wait(wait)

    def _ttl_ms(self, ttl: float | None) -> int:
        return self.options.ttl_ms if ttl is None else to_ms(check_seconds("ttl", ttl))

    def _not_acquired(self, started: float) -> LockNotAcquired:
        return LockNotAcquired(name=self.name, key=self.key, waited=time.monotonic() - started)


class Primitive(Base):
    """The sync API; ownership belongs to the calling thread."""

    def acquire(
        self, blocking: bool = True, timeout: float | None = None, *, wait: float | None = DEFAULT
    ) -> bool:
        """Take it; True if taken, False if the wait ran out.

        As :meth:`threading.Lock.acquire`: ``blocking=False`` tries once; ``timeout=S`` waits
        at most S seconds, ``timeout=-1`` forever; ``blocking=False`` with a timeout is a
        ValueError. Without either, it waits this object's ``wait`` (not forever, unlike
        threading). ``wait=S`` is the same as ``timeout=S`` (0 tries once, None waits forever).
        """
        wait = self._wait(blocking, timeout, wait)
        lease = guard.enter(self.kind, self.options, self.name, self.key, wait)
        if lease is not None:
            self._keep(lease)
        return lease is not None

    def release(self) -> None:
        """Give it back; LockNotOwned if this thread does not hold it (or its lease ended)."""
        holding = self._owned_holding("release")
        self._forget(holding)
        if not guard.leave(holding.lease):
            raise self._ended("release")

    def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds from now (default: this object's ttl); a new
        ``ttl`` also becomes the length of later automatic renewals."""
        ttl_ms = self._ttl_ms(ttl)
        lease = self._owned_holding("extend").lease
        with lease.io:  # ordered with this lease's renewals: see lifecycle.Lease.renewed
            started = time.monotonic()
            extend = lease.target.algorithms.extend(lease.claim, ttl_ms)
            try:
                extended = drivers.run(extend, lease.target)
            except BaseException:
                lease.uncertain(started, ttl_ms)  # it may have landed: assume the worse
                renewal.renewer().reschedule(lease)
                raise
            if not extended:
                lease.lose()
                raise self._ended("extend")
            lease.renewed(started, ttl_ms)
        renewal.renewer().reschedule(lease)  # a shorter ttl is due sooner

    def owned(self) -> bool:
        """True if this thread holds it, as confirmed by the server."""
        lease = self.lease
        return lease is not None and drivers.run(
            lease.target.algorithms.owned(lease.claim), lease.target
        )

    def holders(self) -> int:
        """How many hold it now (live leases, by the server's clock)."""
        target = providers.sync_target(self.options.provider)
        return drivers.run(target.algorithms.holders(self.kind, self.key, self.limit), target)

    def locked(self) -> bool:
        """True if it is fully taken now (an acquire would have to wait): a semaphore's every
        slot, a lock by anyone -- readers included, so for a ``shared=True`` lock it means
        "held", and a shared acquire may still get in beside those readers."""
        return self.holders() >= self.limit

    def __enter__(self) -> Any:
        started = time.monotonic()
        if not self.acquire():
            raise self._not_acquired(started)
        holding = self._owned_holding("enter")
        holding.section = ownership.enter_call(holding.lease, task=False)
        holding.frame = _user_frame()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        holding = self._exiting()
        if holding is not None:
            if holding.section is not None:
                ownership.leave_call(holding.section)
            self._forget(holding)
            guard.finish(holding.lease, exc)


def _runs_alone(frame: FrameType | None) -> bool:
    """True if the current task exists only to run the coroutine of ``frame`` (a helper
    task of ``gather``, ``shield``, ``ensure_future`` or ``wait_for`` before 3.12)."""
    task = asyncio.current_task()
    coro = task.get_coro() if task is not None else None
    return frame is not None and getattr(coro, "cr_frame", None) is frame


class AsyncPrimitive(Base):
    """The asyncio API; ownership belongs to the calling task (see :class:`Base`)."""

    is_async = True
    owner_hint = (
        " (a lease belongs to the task that acquired it; asyncio.gather, shield, and wait_for"
        " before Python 3.12 run the call in a task of their own: call it directly)"
    )

    def _owner(self) -> Any:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("redlock_deco.asyncio primitives must be used inside a task")
        return task

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None, *, wait: float | None = DEFAULT
    ) -> bool:
        """Take it; True if taken, False if the wait ran out. ``blocking``, ``timeout`` and
        ``wait`` as for the sync :meth:`Primitive.acquire`."""
        wait = self._wait(blocking, timeout, wait)
        owner = self._owner()
        helper_of: Callable[[], bool] | None = None
        if _runs_alone(sys._getframe()):
            ref = weakref.ref(self)
            helper_of = lambda: ref() is not None  # noqa: E731
            owner = self._object_owner
        lease = await guard.enter_async(
            self.kind, self.options, self.name, self.key, wait, helper_of=helper_of
        )
        if lease is not None:
            self._keep(lease, owner)
        return lease is not None

    async def release(self) -> None:
        """Give it back; LockNotOwned if this task does not hold it (or its lease ended)."""
        holding = self._owned_holding("release")
        self._forget(holding)
        if not await guard.leave_async(holding.lease):
            raise self._ended("release")

    async def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds from now (default: this object's ttl); a new
        ``ttl`` also becomes the length of later automatic renewals."""
        ttl_ms = self._ttl_ms(ttl)
        lease = self._owned_holding("extend").lease
        async with lease.io:  # ordered with this lease's renewals
            started = time.monotonic()
            extend = lease.target.algorithms.extend(lease.claim, ttl_ms)
            try:
                extended = await drivers.run_async(extend, lease.target)
            except BaseException:  # cancelled or timed out: it may have landed
                lease.uncertain(started, ttl_ms)
                renewal.async_renewer().reschedule(lease)
                raise
            if not extended:
                lease.lose()
                raise self._ended("extend")
            lease.renewed(started, ttl_ms)
        renewal.async_renewer().reschedule(lease)  # a shorter ttl is due sooner

    async def owned(self) -> bool:
        """True if this task holds it, as confirmed by the server."""
        lease = self.lease
        return lease is not None and await drivers.run_async(
            lease.target.algorithms.owned(lease.claim), lease.target
        )

    async def holders(self) -> int:
        """How many hold it now (live leases, by the server's clock)."""
        target = providers.async_target(self.options.provider)
        holders = target.algorithms.holders(self.kind, self.key, self.limit)
        return await drivers.run_async(holders, target)

    async def locked(self) -> bool:
        """True if it is fully taken now (an acquire would have to wait): a semaphore's every
        slot, a lock by anyone -- readers included, so for a ``shared=True`` lock it means
        "held", and a shared acquire may still get in beside those readers."""
        return await self.holders() >= self.limit

    async def __aenter__(self) -> Any:
        started = time.monotonic()
        if not await self.acquire():
            raise self._not_acquired(started)
        holding = self._owned_holding("enter")
        holding.section = ownership.enter_call(holding.lease, task=True)
        holding.frame = _user_frame()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        holding = self._exiting()
        if holding is not None:
            if holding.section is not None:
                ownership.leave_call(holding.section)
            self._forget(holding)
            await guard.finish_async(holding.lease, exc)
