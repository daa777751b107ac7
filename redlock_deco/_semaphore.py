"""``Semaphore`` and its asyncio twin: at most ``limit`` holders of a name at once.

Each holder is a member of a sorted set scored by the end of its lease in the *Redis server's*
clock, so a client with a skewed clock can neither steal nor stretch a slot; a holder that dies
loses its slot when its lease ends. Not re-entrant: every acquisition takes another slot.

Callers that disagree on ``limit`` for one name: each call's own limit applies at its
admission -- a caller with limit 5 is admitted while fewer than 5 hold, one with limit 3 only
while fewer than 3 hold. Nobody is evicted when a smaller limit appears, so a rolling change
of the limit takes effect as current holders leave.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import _admin as admin
from ._admin import Released
from ._options import OnLost, build_options
from ._primitive import AsyncPrimitive, Base, Primitive
from ._protocol import SEMAPHORE
from ._signatures import explains_bad_arguments


class _SemaphoreOptions(Base):
    kind = SEMAPHORE
    noun = "semaphore"

    @explains_bad_arguments
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
        replicas: int = 0,
        on_lost: OnLost = None,
        max_hold: float | None = None,
        label: str | None = None,
    ) -> None:
        options = build_options(
            "Semaphore", ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider,
            prefix=prefix, limit=limit, replicas=replicas, on_lost=on_lost, max_hold=max_hold,
            label=label,
        )  # fmt: skip
        super().__init__(name, options)


class Semaphore(_SemaphoreOptions, Primitive):
    """A distributed counting semaphore with ``limit`` slots. A ``with`` block's slot belongs
    to the block (its task, else its thread); what ``acquire()`` takes belongs to the object,
    which any thread may ``release()`` -- the newest slot first -- and every ``acquire()``
    takes another slot, as :class:`threading.Semaphore`'s does."""

    api_name = "Semaphore"

    @classmethod
    def force_release(
        cls,
        name: str,
        *,
        provider: str = "default",
        prefix: str = "sem:",
        expect: str | bytes | Iterable[str | bytes] | None = None,
    ) -> Released:
        """Remove the semaphore ``prefix + name`` -- every holder -- whoever holds it: an
        operator's tool for stuck holders. Queued waiters get the freed slots at once (up to
        the limit, woken up holding one); the former holders' next renewals find theirs gone
        (``on_lost``, then ``LockLost``). Returns what was removed (``Released``).

        ``expect``: the holders' tokens (``str``, or ``bytes`` as read from the sorted set) --
        remove the semaphore only if every holder now is one of them; held by another,
        nothing is removed and the result's ``changed`` says who holds it now. ``None`` (the
        default) removes whoever holds it. Raises LockError, removing nothing, if the key
        holds something else or is a lock's or semaphore's bookkeeping (``...:queue``,
        ``:limit``, ``:fence``).
        """
        return admin.release_sync("semaphore", name, prefix, provider, expect)


class AsyncSemaphore(_SemaphoreOptions, AsyncPrimitive):
    """``Semaphore`` for asyncio (``redlock_deco.asyncio.Semaphore``); an ``async with``
    block's slot belongs to its task, what ``acquire()`` takes to the object."""

    api_name = "redlock_deco.asyncio.Semaphore"

    @classmethod
    async def force_release(
        cls,
        name: str,
        *,
        provider: str = "default",
        prefix: str = "sem:",
        expect: str | bytes | Iterable[str | bytes] | None = None,
    ) -> Released:
        """Remove the semaphore ``prefix + name`` whoever holds it (see
        ``Semaphore.force_release``, ``expect`` included)."""
        return await admin.release_async("semaphore", name, prefix, provider, expect)
