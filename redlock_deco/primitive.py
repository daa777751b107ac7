"""What ``Lock`` and ``Semaphore`` share: the explicit acquire/release/extend object API and
the context-manager protocol, over :mod:`redlock_deco.guard`."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from . import drivers, guard, protocol
from .errors import LockNotAcquired, LockNotOwned
from .lease import Lease
from .options import LeaseOptions, check_seconds, check_wait, to_ms
from .protocol import Kind

DEFAULT: Any = object()


class Primitive:
    """Base of the sync primitives; subclasses say where an owner's lease is kept."""

    kind: Kind
    noun = "lock"

    def __init__(self, name: str, options: LeaseOptions) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{self.noun} name must be a str, got {name!r}")
        self.name = name
        self.key = options.prefix + name
        self.options = options

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r} provider={self.options.provider!r}>"

    # Where the calling owner's lease lives: overridden per primitive.
    def _lease(self) -> Lease | None:
        raise NotImplementedError

    def _keep(self, lease: Lease) -> None:
        """Remember a new lease of the calling owner."""

    def _forget(self, lease: Lease) -> None:
        """Forget a lease of the calling owner that is being released."""

    def acquire(self, wait: float | None = DEFAULT) -> bool:
        """Take it, waiting up to ``wait`` seconds (default: this object's ``wait``)."""
        wait_s = self.options.wait if wait is DEFAULT else check_wait(wait)
        lease = guard.enter(self.kind, self.options, self.name, self.key, wait_s)
        if lease is None:
            return False
        self._keep(lease)
        return True

    def _owned_lease(self, action: str) -> Lease:
        lease = self._lease()
        if lease is None:
            raise LockNotOwned(
                f"cannot {action} {self.key!r}: this thread does not hold it",
                name=self.name,
                key=self.key,
            )
        return lease

    def release(self) -> None:
        """Give it back; LockNotOwned if this thread does not hold it (or its lease ended)."""
        lease = self._owned_lease("release")
        self._forget(lease)
        if not guard.leave(lease):
            raise LockNotOwned(
                f"cannot release {self.key!r}: the lease had already ended (expired or taken "
                "over); nothing of another holder's was touched",
                name=self.name,
                key=self.key,
            )

    def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds from now (default: this object's ttl).

        A new ``ttl`` also becomes the length of later automatic renewals.
        """
        ttl_ms = self.options.ttl_ms if ttl is None else to_ms(check_seconds("ttl", ttl))
        lease = self._owned_lease("extend")
        started = time.monotonic()
        if not drivers.run(protocol.extend(lease.claim, ttl_ms), lease.target):
            raise LockNotOwned(
                f"cannot extend {self.key!r}: its lease had already ended",
                name=self.name,
                key=self.key,
            )
        lease.renewed(started, ttl_ms)

    def owned(self) -> bool:
        """True if this thread holds it, as confirmed by the server."""
        lease = self._lease()
        if lease is None:
            return False
        return drivers.run(protocol.owned(lease.claim), lease.target)

    def __enter__(self) -> Any:
        started = time.monotonic()
        if not self.acquire():
            raise LockNotAcquired(name=self.name, key=self.key, waited=time.monotonic() - started)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease = self._lease()
        if lease is not None:
            self._forget(lease)
            guard.finish(lease, exc)
