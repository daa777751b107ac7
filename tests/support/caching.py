"""redis-py's client-side cache on the servers the tests run (Redis 6.2, 7.0, Valkey 9)."""

from __future__ import annotations

import pytest
import redis
import redis.connection

from redlock_deco.testing import RedisServer


def caching_allowed(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py's client-side cache, allowed on this server: redis-py refuses it below
    Redis 7.4 and on any server not named "redis", though CLIENT TRACKING, all it uses, is
    Redis 6.0's (and Valkey's)."""
    cache = pytest.importorskip("redis.cache")  # (redis-py >= 5.1)
    del cache
    with redis.Redis.from_url(server.url, protocol=3) as hello:
        hello.ping()
        connection = hello.connection_pool.get_connection()
        try:
            metadata = connection.handshake_metadata
        finally:
            hello.connection_pool.release(connection)
    name = metadata.get(b"server", metadata.get("server"))
    name = name.decode() if isinstance(name, bytes) else name
    proxy = redis.connection.CacheProxyConnection
    monkeypatch.setattr(proxy, "DEFAULT_SERVER_NAME", name)
    monkeypatch.setattr(proxy, "MIN_ALLOWED_VERSION", "6.0.0")
