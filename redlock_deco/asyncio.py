"""The asyncio twins of the primitives, for ``redis.asyncio`` clients.

``@locked``, ``@limited`` and ``@throttled`` need nothing from here: on an ``async def``
they pick the async path by themselves.
"""

from ._lock import AsyncLock as Lock
from ._semaphore import AsyncSemaphore as Semaphore
from ._throttle import AsyncThrottle as Throttle

__all__ = ["Lock", "Semaphore", "Throttle"]
