"""The asyncio twins of the primitives, for ``redis.asyncio`` clients.

``@locked`` and ``@limited`` need nothing from here: on an ``async def`` they pick the async
path by themselves.
"""

from ._lock import AsyncLock as Lock
from ._semaphore import AsyncSemaphore as Semaphore

__all__ = ["Lock", "Semaphore"]
