"""``Lock`` and its asyncio twin: a re-entrant Redis token lock on the key ``prefix + name``."""

from __future__ import annotations

from ._options import OnLost, build_options
from ._primitive import AsyncPrimitive, Base, Primitive
from ._protocol import LOCK


class _LockOptions(Base):
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
        replicas: int = 0,
        on_lost: OnLost = None,
        max_hold: float | None = None,
        fencing: bool = False,
    ) -> None:
        options = build_options(
            ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider, prefix=prefix,
            replicas=replicas, on_lost=on_lost, max_hold=max_hold, fencing=fencing,
        )  # fmt: skip
        super().__init__(name, options)


class Lock(_LockOptions, Primitive):
    """A distributed lock, as a context manager or an explicit object.

    Ownership belongs to the calling thread, like :class:`threading.RLock`: the same thread
    may acquire again (it only counts), and only the thread that acquired may release. Every
    ``Lock`` object (and ``@locked`` function) naming the same key shares that ownership.
    """

    def __enter__(self) -> Lock:
        super().__enter__()
        return self


class AsyncLock(_LockOptions, AsyncPrimitive):
    """``Lock`` for asyncio (``redlock_deco.asyncio.Lock``): owned per task, not per thread,
    so tasks sharing one object can never release each other's lock."""

    async def __aenter__(self) -> AsyncLock:
        await super().__aenter__()
        return self
