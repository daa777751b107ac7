"""``Lock``: a re-entrant Redis token lock as a context manager and explicit object."""

from __future__ import annotations

import time
from types import TracebackType

from . import drivers, guard, ownership, protocol, providers
from .errors import LockNotAcquired, LockNotOwned
from .lease import Lease
from .options import LeaseOptions, build_options, check_seconds, check_wait
from .protocol import LOCK, Call

_DEFAULT = object()


class Lock:
    """A distributed lock on the Redis key ``prefix + name``.

    Ownership belongs to the calling thread, like :class:`threading.RLock`: the same thread
    may acquire again (it only counts), and only the thread that acquired may release. Any
    ``Lock`` object (or ``@locked`` function) naming the same key shares that ownership.
    """

    def __init__(
        self,
        name: str,
        *,
        ttl: float = 30.0,
        wait: float | None = 10.0,
        auto_renew: bool = True,
        provider: str = "default",
        prefix: str = "lock:",
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"lock name must be a str, got {name!r}")
        self.name = name
        self.key = prefix + name
        self.options: LeaseOptions = build_options(
            ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider, prefix=prefix
        )

    def __repr__(self) -> str:
        return f"<Lock {self.key!r} provider={self.options.provider!r}>"

    def _lease(self) -> Lease | None:
        return ownership.thread_holdings().get((self.options.provider, self.key))

    def acquire(self, wait: float | object | None = _DEFAULT) -> bool:
        """Take the lock, waiting up to ``wait`` seconds (default: the lock's ``wait``)."""
        wait_s = self.options.wait if wait is _DEFAULT else check_wait(wait)
        return guard.enter(LOCK, self.options, self.name, self.key, wait_s) is not None

    def release(self) -> None:
        """Give the lock back; LockNotOwned if this thread does not hold it (or it was lost)."""
        lease = self._lease()
        if lease is None:
            raise LockNotOwned(
                f"cannot release {self.key!r}: this thread does not hold it",
                name=self.name,
                key=self.key,
            )
        if not guard.leave(lease):
            raise LockNotOwned(
                f"cannot release {self.key!r}: the lease had already ended (expired or taken "
                "over); nothing was deleted",
                name=self.name,
                key=self.key,
            )

    def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds (default: the lock's ttl) from now.

        A new ``ttl`` also becomes the length of later automatic renewals.
        """
        lease = self._lease()
        ttl_ms = self.options.ttl_ms
        if ttl is not None:
            ttl_ms = max(1, round(check_seconds("ttl", ttl) * 1000))
        started = time.monotonic()
        if lease is None or not drivers.run(protocol.extend(lease.claim, ttl_ms), lease.target):
            raise LockNotOwned(
                f"cannot extend {self.key!r}: this thread does not hold it (or it expired)",
                name=self.name,
                key=self.key,
            )
        lease.renewed(started, ttl_ms)

    def locked(self) -> bool:
        """True if anyone holds the lock now."""
        target = providers.sync_target(self.options.provider)
        return bool(target.execute(Call(("EXISTS", self.key))))

    def owned(self) -> bool:
        """True if this thread holds the lock, as confirmed by the server."""
        lease = self._lease()
        if lease is None:
            return False
        stored = lease.target.execute(Call(("GET", self.key)))
        return protocol.same_token(stored, lease.token)

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockNotAcquired(name=self.name, key=self.key, waited=self.options.wait or 0.0)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease = self._lease()
        if lease is not None:
            guard.finish(lease, exc)
