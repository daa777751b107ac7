"""What every primitive shares: ownership bookkeeping, errors, and the explicit
acquire/release/extend/owned/holders/locked API with the context-manager protocol -- as a sync
class and its asyncio twin, side by side so they cannot drift (a test compares them)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from types import TracebackType
from typing import Any

from . import drivers, guard, ownership, providers
from .errors import LockNotAcquired, LockNotOwned
from .lease import Lease
from .naming import bounded
from .options import LeaseOptions, check_seconds, check_wait, to_ms
from .protocol import Kind

DEFAULT: Any = object()


class Base:
    """Name, options, and the leases this object took, per owner (thread or task)."""

    kind: Kind
    noun = "lock"
    is_async = False

    def __init__(self, name: str, options: LeaseOptions) -> None:
        if options.on_lost == "cancel" and not self.is_async:
            raise ValueError(
                "on_lost='cancel' needs the asyncio primitive: only a task can be "
                "cancelled; pass a callback instead"
            )
        self.name = bounded(name)
        self.key = options.prefix + self.name
        self.options = options
        self.limit = options.limit
        # Ownership is per object *and* per owner: another object naming the same key does not
        # own what this one took (API: "held by this object"), and another thread or task
        # using this object does not either. Re-entrancy itself is the owner's (guard.py).
        self._mine: weakref.WeakKeyDictionary[Any, list[Lease]] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} {self.key!r}>"

    def _owner(self) -> Any:
        return threading.current_thread()

    def _lease(self) -> Lease | None:
        """The newest lease this object took for the calling owner, if any (never one taken
        by the parent of a forked child, whose thread object the child inherits)."""
        mine = self._mine.get(self._owner())
        if not mine or mine[-1].pid != os.getpid():
            return None
        return mine[-1]

    def _keep(self, lease: Lease) -> None:
        self._mine.setdefault(self._owner(), []).append(lease)

    def _forget(self, lease: Lease) -> None:
        mine = self._mine.get(self._owner(), [])
        if lease in mine:
            mine.remove(lease)

    def _owned_lease(self, action: str) -> Lease:
        lease = self._lease()
        if lease is None:
            raise LockNotOwned(
                f"cannot {action} {self.key!r}: this owner (thread or task) does not hold it",
                name=self.name,
                key=self.key,
            )
        return lease

    def _ended(self, action: str) -> LockNotOwned:
        return LockNotOwned(
            f"cannot {action} {self.key!r}: its lease had already ended (expired or taken "
            "over); nothing of another holder's was touched",
            name=self.name,
            key=self.key,
        )

    def _wait(self, wait: float | None) -> float | None:
        return self.options.wait if wait is DEFAULT else check_wait(wait)

    def _ttl_ms(self, ttl: float | None) -> int:
        return self.options.ttl_ms if ttl is None else to_ms(check_seconds("ttl", ttl))

    def _not_acquired(self, started: float) -> LockNotAcquired:
        return LockNotAcquired(name=self.name, key=self.key, waited=time.monotonic() - started)


class Primitive(Base):
    """The sync API; ownership belongs to the calling thread."""

    def acquire(self, wait: float | None = DEFAULT) -> bool:
        """Take it, waiting up to ``wait`` seconds (default: this object's ``wait``)."""
        lease = guard.enter(self.kind, self.options, self.name, self.key, self._wait(wait))
        if lease is not None:
            self._keep(lease)
        return lease is not None

    def release(self) -> None:
        """Give it back; LockNotOwned if this thread does not hold it (or its lease ended)."""
        lease = self._owned_lease("release")
        self._forget(lease)
        if not guard.leave(lease):
            raise self._ended("release")

    def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds from now (default: this object's ttl); a new
        ``ttl`` also becomes the length of later automatic renewals."""
        ttl_ms = self._ttl_ms(ttl)
        lease = self._owned_lease("extend")
        started = time.monotonic()
        if not drivers.run(lease.target.algorithms.extend(lease.claim, ttl_ms), lease.target):
            raise self._ended("extend")
        lease.renewed(started, ttl_ms)

    def owned(self) -> bool:
        """True if this thread holds it, as confirmed by the server."""
        lease = self._lease()
        return lease is not None and drivers.run(
            lease.target.algorithms.owned(lease.claim), lease.target
        )

    def holders(self) -> int:
        """How many hold it now (live leases, by the server's clock)."""
        target = providers.sync_target(self.options.provider)
        return drivers.run(target.algorithms.holders(self.kind, self.key), target)

    def locked(self) -> bool:
        """True if it is fully taken now (an acquire would have to wait)."""
        return self.holders() >= self.limit

    def __enter__(self) -> Any:
        started = time.monotonic()
        if not self.acquire():
            raise self._not_acquired(started)
        lease = self._lease()
        if lease is not None:
            ownership.enter_call(lease, task=False)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease = self._lease()
        if lease is not None:
            _leave_call(ownership.thread_calls(), lease)
            self._forget(lease)
            guard.finish(lease, exc)


class AsyncPrimitive(Base):
    """The asyncio API; ownership belongs to the calling task."""

    is_async = True

    def _owner(self) -> Any:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("redlock_deco.asyncio primitives must be used inside a task")
        return task

    async def acquire(self, wait: float | None = DEFAULT) -> bool:
        """Take it, waiting up to ``wait`` seconds (default: this object's ``wait``)."""
        lease = await guard.enter_async(
            self.kind, self.options, self.name, self.key, self._wait(wait)
        )
        if lease is not None:
            self._keep(lease)
        return lease is not None

    async def release(self) -> None:
        """Give it back; LockNotOwned if this task does not hold it (or its lease ended)."""
        lease = self._owned_lease("release")
        self._forget(lease)
        if not await guard.leave_async(lease):
            raise self._ended("release")

    async def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds from now (default: this object's ttl); a new
        ``ttl`` also becomes the length of later automatic renewals."""
        ttl_ms = self._ttl_ms(ttl)
        lease = self._owned_lease("extend")
        started = time.monotonic()
        if not await drivers.run_async(
            lease.target.algorithms.extend(lease.claim, ttl_ms), lease.target
        ):
            raise self._ended("extend")
        lease.renewed(started, ttl_ms)

    async def owned(self) -> bool:
        """True if this task holds it, as confirmed by the server."""
        lease = self._lease()
        return lease is not None and await drivers.run_async(
            lease.target.algorithms.owned(lease.claim), lease.target
        )

    async def holders(self) -> int:
        """How many hold it now (live leases, by the server's clock)."""
        target = providers.async_target(self.options.provider)
        return await drivers.run_async(target.algorithms.holders(self.kind, self.key), target)

    async def locked(self) -> bool:
        """True if it is fully taken now (an acquire would have to wait)."""
        return await self.holders() >= self.limit

    async def __aenter__(self) -> Any:
        started = time.monotonic()
        if not await self.acquire():
            raise self._not_acquired(started)
        lease = self._lease()
        if lease is not None:
            ownership.enter_call(lease, task=True)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease = self._lease()
        if lease is not None:
            _leave_call(ownership.task_calls(), lease)
            self._forget(lease)
            await guard.finish_async(lease, exc)


def _leave_call(calls: ownership.Calls, lease: Lease) -> None:
    """Pop the innermost entry of ``lease`` from an owner's stack of protected sections."""
    for index in range(len(calls) - 1, -1, -1):
        if calls[index][1] is lease:
            del calls[index]
            return
