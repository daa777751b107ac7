"""Repairing a redis-py connection pool after an interrupt cut a connect short.

redis-py's checkout gives a connection back to its pool on *any* exception, and its connect
cleans up only after its own errors (``RedisError``). A ``KeyboardInterrupt`` between opening
the socket and making its reader so leaves a connection in the pool that looks connected and
is not, and the sync checkout hands it out again as it is: the grant subscription that took
one read nothing, for good -- hand-off gone for the rest of the process (review 32, 01) -- and
a command on one failed with an ``AttributeError`` (the interrupted call's own clean-up did,
in place of its ``KeyboardInterrupt``). (redis.asyncio's checkout reconnects such a
connection: it asks the reader, which refuses.)

Which idle connection it is cannot be told from outside, so every idle connection is closed
(each connects again at its next use); connections in use are left alone. Clients the library
builds from URLs never need this: their connections close themselves when a connect is cut
short (``_providers``).
"""

from __future__ import annotations

import contextlib
from typing import Any


def disconnect_idle(pool: Any) -> None:
    """Close the idle connections of a sync pool (see the module)."""
    disconnect = getattr(pool, "disconnect", None)
    if disconnect is not None:
        with contextlib.suppress(Exception):
            disconnect(inuse_connections=False)
