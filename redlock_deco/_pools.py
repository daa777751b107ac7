"""Connections that an interrupt cannot leave half-connected in a redis-py pool.

redis-py's checkout gives a connection back to its pool on *any* exception, and its connect
cleans up only after its own errors (``RedisError``). A ``KeyboardInterrupt`` (sync) or a
cancellation (asyncio) between opening the socket and the end of the handshake (AUTH, HELLO,
CLIENT SETINFO, SELECT) so left a connection in the pool that looks connected and is not, and
the next checkout handed it out as it was:

- with its handshake cut before ``SELECT``, its commands ran in database 0: a lock taken
  there did not exclude the holders of the same name in the client's own database -- a
  second holder (review 34, 01: 3 of 3, a traced client, a ``redis.Redis`` subclass, a
  Sentinel's ``master_for`` client);
- cut before its reader was made, a grant subscription on it read nothing, for good -- the
  hand-off gone for the process -- and a command on it failed with ``AttributeError``
  (review 32, 01).

So every pool the library sends through gets connections that close themselves when a
connect is cut short (:func:`guard`): its class for the connections it makes from now on,
and the connections it has already made. Repairing the pool after the interrupt instead left
a window in which another thread drew the half-connected connection first (review 34, 08).
The application's own calls on that pool are protected the same way; nothing else about its
connections changes.
"""

from __future__ import annotations

import contextlib
from typing import Any


class WholeConnect:
    """A mixin for a sync connection: a connect cut short by an interrupt closes what it
    opened, as redis-py's connect does after its own errors."""

    def connect(self) -> None:
        try:
            super().connect()  # type: ignore[misc]
        except BaseException:
            self.disconnect()  # type: ignore[attr-defined]
            raise

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:  # redis-py >= 6
        try:
            super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            self.disconnect()  # type: ignore[attr-defined]
            raise


class WholeAsyncConnect:
    """:class:`WholeConnect` for a redis.asyncio connection: a cancelled connect closes what
    it opened (a cancellation in the handshake is an ordinary event there: any timeout)."""

    async def connect(self) -> None:
        try:
            await super().connect()  # type: ignore[misc]
        except BaseException:
            await self.disconnect()  # type: ignore[attr-defined]
            raise

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:  # redis-py >= 6
        try:
            await super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            await self.disconnect()  # type: ignore[attr-defined]
            raise


_WHOLE: dict[tuple[type, type], type] = {}  # (a connection class, mixin) -> the two


def _whole(plain: type, mixin: type) -> type:
    if issubclass(plain, mixin):
        return plain
    made = _WHOLE.get((plain, mixin))
    if made is None:
        name = f"Whole{plain.__name__}"
        made = _WHOLE[plain, mixin] = type(name, (mixin, plain), {"__module__": plain.__module__})
    return made


def guard(pool: Any, asynchronous: bool) -> None:
    """Make ``pool``'s connections, those to come and those it has, close themselves when a
    connect is cut short (see the module). A pool it cannot see into is left as it is."""
    plain = getattr(pool, "connection_class", None)
    if not isinstance(plain, type):
        return
    mixin = WholeAsyncConnect if asynchronous else WholeConnect
    pool.connection_class = _whole(plain, mixin)
    made = {  # (a BlockingConnectionPool lists every connection it made in _connections)
        id(connection): connection
        for where in ("_available_connections", "_in_use_connections", "_connections")
        for connection in getattr(pool, where, ())
        if connection is not None  # (a BlockingConnectionPool's queue holds None for room)
    }.values()
    for connection in made:
        with contextlib.suppress(TypeError):  # a class whose layout forbids it: left as it is
            connection.__class__ = _whole(type(connection), mixin)
