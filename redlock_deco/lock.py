"""``Lock``: a re-entrant Redis token lock as a context manager and explicit object."""

from __future__ import annotations

from . import ownership, providers
from .lease import Lease
from .options import build_options
from .primitive import Primitive
from .protocol import LOCK, Call


class Lock(Primitive):
    """A distributed lock on the Redis key ``prefix + name``.

    Ownership belongs to the calling thread, like :class:`threading.RLock`: the same thread
    may acquire again (it only counts), and only the thread that acquired may release. Every
    ``Lock`` object (and ``@locked`` function) naming the same key shares that ownership.
    """

    kind = LOCK

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
        options = build_options(
            ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider, prefix=prefix
        )
        super().__init__(name, options)

    def _lease(self) -> Lease | None:
        # guard.enter/leave keep re-entrant leases in the thread's table themselves.
        return ownership.thread_holdings().get((self.options.provider, self.key))

    def locked(self) -> bool:
        """True if anyone holds the lock now."""
        target = providers.sync_target(self.options.provider)
        return bool(target.execute(Call(("EXISTS", self.key))))

    def __enter__(self) -> Lock:
        super().__enter__()
        return self
