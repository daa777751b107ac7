"""``Semaphore``: at most ``limit`` holders of a name at once, across all processes.

Each holder is a member of a sorted set scored by the end of its lease in the *Redis server's*
clock, so a client with a skewed clock can neither steal nor stretch a slot; a holder that dies
loses its slot when its lease ends. Not re-entrant: every acquisition takes another slot.

Callers that disagree on ``limit`` for one name: each call's own limit applies at its
admission -- a caller with limit 5 is admitted while fewer than 5 hold, one with limit 3 only
while fewer than 3 hold. Nobody is evicted when a smaller limit appears, so a rolling change
of the limit takes effect as current holders leave.
"""

from __future__ import annotations

from . import drivers, ownership, protocol, providers
from .lease import Lease
from .options import build_options
from .primitive import Primitive
from .protocol import SEMAPHORE


class Semaphore(Primitive):
    """A distributed counting semaphore with ``limit`` slots, named ``prefix + name``."""

    kind = SEMAPHORE
    noun = "semaphore"

    def __init__(
        self,
        name: str,
        *,
        limit: int,
        ttl: float = 30.0,
        wait: float | None = 10.0,
        auto_renew: bool = True,
        provider: str = "default",
        prefix: str = "sem:",
    ) -> None:
        options = build_options(
            ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider, prefix=prefix,
            limit=limit,
        )  # fmt: skip
        super().__init__(name, options)
        self.limit = options.limit

    def _slots(self) -> list[Lease]:
        return ownership.thread_slots().setdefault((self.options.provider, self.key), [])

    def _lease(self) -> Lease | None:
        slots = self._slots()
        return slots[-1] if slots else None

    def _keep(self, lease: Lease) -> None:
        self._slots().append(lease)

    def _forget(self, lease: Lease) -> None:
        slots = self._slots()
        slots.remove(lease)
        if not slots:
            ownership.thread_slots().pop((self.options.provider, self.key), None)

    def holders(self) -> int:
        """How many slots are held now (live leases, by the server's clock)."""
        target = providers.sync_target(self.options.provider)
        return drivers.run(protocol.holders(self.key), target)

    def locked(self) -> bool:
        """True if every slot is taken (an acquire would have to wait)."""
        return self.holders() >= self.limit

    def __enter__(self) -> Semaphore:
        super().__enter__()
        return self
