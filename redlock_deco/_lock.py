"""``Lock`` and its asyncio twin: a Redis token lock on the key ``prefix + name``."""

from __future__ import annotations

from collections.abc import Iterable

from . import _admin as admin
from ._admin import Released
from ._options import OnLost, build_options
from ._primitive import AsyncPrimitive, Base, Primitive
from ._protocol import LOCK, SHARED, Kind
from ._signatures import explains_bad_arguments


class _LockOptions(Base):
    kind: Kind = LOCK

    @explains_bad_arguments
    def __init__(
        self,
        name: str,
        *,
        ttl: float = 30.0,
        wait: float | None = 10.0,
        auto_renew: bool = True,
        provider: str = "default",
        prefix: str = "lock:",
        replicas: int = 0,
        on_lost: OnLost = None,
        max_hold: float | None = None,
        fencing: bool = False,
        shared: bool = False,
        label: str | None = None,
    ) -> None:
        options = build_options(
            "Lock", ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider, prefix=prefix,
            replicas=replicas, on_lost=on_lost, max_hold=max_hold, fencing=fencing,
            shared=shared, label=label,
        )  # fmt: skip
        if shared:  # checked by build_options
            self.kind = SHARED
        super().__init__(name, options)

    @property
    def shared(self) -> bool:
        """True if this object takes the lock in shared (read) mode."""
        return self.kind.shared


class Lock(_LockOptions, Primitive):
    """A distributed lock, as a context manager or an explicit object.

    Who owns it (docs/concepts.md, "Owners and re-entrancy"):

    - A ``with`` block (like a ``@locked`` call) belongs to the asyncio task running it, else
      to its thread. A nested block or call of the same owner on the same name re-enters it
      (it only counts; the outermost exit releases), through any object or decorator; no
      other owner gets in. It is released by its own exit.
    - What ``acquire()`` takes belongs to this object, like a :class:`threading.Lock`'s: any
      thread may ``release()`` or ``extend()`` it through the object, and it re-enters
      nothing. While it holds, another ``acquire()`` -- through another object of the name,
      in this thread or not, or through this one -- waits or returns False, as
      ``threading.Lock.acquire`` does (a second ``acquire()`` of this object waits for a
      ``release()`` from anyone). Inside an open block or call of its own owner on the name,
      ``acquire()`` raises LockError instead of waiting for itself (``blocking=False``: just
      False): it does not re-enter that section, since the object, which any thread may
      release later, would outlive it. It is renewed while the object exists: an object
      collected while holding stops renewing, with a ResourceWarning, and the lease expires
      within its ttl.

    ``shared=True`` takes it in shared (read) mode: any number of shared holders at once, or
    one exclusive holder (every ``Lock`` without ``shared``), never both. Waiters are served
    in arrival order, consecutive readers together, so a queued writer stops new readers and
    neither side starves. An owner holding it shared may take it shared again; holding it
    exclusively, it may take it shared too (the hold stays exclusive); asking for it
    exclusively while holding it shared raises LockError at once (an upgrade would deadlock
    two upgraders). Not on a quorum provider (ProviderError). See docs/readers-writers.md.
    """

    api_name = "Lock"

    @classmethod
    def force_release(
        cls,
        name: str,
        *,
        provider: str = "default",
        prefix: str = "lock:",
        expect: str | bytes | Iterable[str | bytes] | None = None,
        force: bool = False,
    ) -> Released:
        """Remove the lock ``prefix + name`` whoever holds it: an operator's tool for a
        stuck holder. The oldest queued waiter gets it at once (woken up holding it); the
        former holder's next renewal finds it gone (``on_lost``, then ``LockLost``). Returns
        what was removed (``Released``).

        ``expect``: the holder's token (``str``, or ``bytes`` as read from the key), or an
        iterable of them -- remove the lock only if one of them holds it; held by another,
        nothing is removed and the result's ``changed`` says who holds it now. ``None`` (the
        default) removes whoever holds it. ``force``: also remove a string that holds no
        lock token (neither ours nor redis-py ``Lock``'s ``uuid1().hex``), perhaps an
        application's value under a mistyped name; the result's ``recognised`` is then
        False. Raises LockError, removing nothing, if the key holds something else (another
        type, a string that is no lock token without ``force``) or is a lock's or
        semaphore's bookkeeping (``...:queue``, ``:limit``, ``:fence``).
        """
        return admin.release_sync("lock", name, prefix, provider, expect, force)


class AsyncLock(_LockOptions, AsyncPrimitive):
    """``Lock`` for asyncio (``redlock_deco.asyncio.Lock``). An ``async with`` block belongs
    to its task (tasks sharing one object can never release or walk into each other's
    block); what ``acquire()`` takes belongs to the object, whichever task ran it (directly,
    or through ``gather``, ``shield``, ``wait_for``), as for the sync ``Lock``."""

    api_name = "redlock_deco.asyncio.Lock"

    @classmethod
    async def force_release(
        cls,
        name: str,
        *,
        provider: str = "default",
        prefix: str = "lock:",
        expect: str | bytes | Iterable[str | bytes] | None = None,
        force: bool = False,
    ) -> Released:
        """Remove the lock ``prefix + name`` whoever holds it (see ``Lock.force_release``,
        ``expect`` and ``force`` included)."""
        return await admin.release_async("lock", name, prefix, provider, expect, force)
