"""The libraries under test, each reduced to ``run(body)``: take the lock, run ``body``,
release. Built inside the process that uses it (each gets its own client)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
import redis.lock

Runner = Callable[[Callable[[], None]], None]

RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


def raw_polling(url: str, key: str, ttl: float) -> Runner:
    """The anchor: SET NX PX, retried every 1 ms, released by compare-and-delete."""
    client = redis.Redis.from_url(url)
    sha = client.script_load(RELEASE)
    token = f"raw:{id(client)}"

    def run(body: Callable[[], None]) -> None:
        while not client.set(key, token, nx=True, px=int(ttl * 1000)):
            time.sleep(0.001)
        try:
            body()
        finally:
            client.evalsha(sha, 1, key, token)

    return run


def _blocking(lock: Any) -> Runner:
    """``run(body)`` for a lock object with blocking ``acquire()`` and ``release()``."""

    def run(body: Callable[[], None]) -> None:
        lock.acquire()
        try:
            body()
        finally:
            lock.release()

    return run


def redis_py(sleep: float) -> Callable[[str, str, float], Runner]:
    def make(url: str, key: str, ttl: float) -> Runner:
        return _blocking(redis.lock.Lock(redis.Redis.from_url(url), key, timeout=ttl, sleep=sleep))

    return make


def python_redis_lock(url: str, key: str, ttl: float) -> Runner:
    import redis_lock

    return _blocking(redis_lock.Lock(redis.Redis.from_url(url), key, expire=max(1, round(ttl))))


def pottery_redlock(url: str, key: str, ttl: float) -> Runner:
    from pottery import Redlock

    return _blocking(Redlock(key=key, masters={redis.Redis.from_url(url)}, auto_release_time=ttl))


def redlock_deco(url: str, key: str, ttl: float) -> Runner:
    from redlock_deco import locked, register_provider

    register_provider("default", url)

    @locked(key, prefix="", ttl=ttl, wait=None)
    def run(body: Callable[[], None]) -> None:
        body()

    return run


def redlock_deco_limited(limit: int) -> Callable[[str, str, float], Runner]:
    def make(url: str, key: str, ttl: float) -> Runner:
        from redlock_deco import limited, register_provider

        register_provider("default", url)

        @limited(key, limit=limit, prefix="", ttl=ttl, wait=None)
        def run(body: Callable[[], None]) -> None:
            body()

        return run

    return make


#: name -> (factory, the Redis key its lock lives under, given the benchmark's key)
LOCKS: dict[str, tuple[Callable[[str, str, float], Runner], Callable[[str], str]]] = {
    "raw 1 ms polling": (raw_polling, lambda key: key),
    "redis-py Lock": (redis_py(0.1), lambda key: key),
    "redis-py Lock sleep=0.001": (redis_py(0.001), lambda key: key),
    "python-redis-lock": (python_redis_lock, lambda key: f"lock:{key}"),
    "pottery Redlock": (pottery_redlock, lambda key: f"redlock:{key}"),
    "redlock-deco @locked": (redlock_deco, lambda key: key),
}


def count_round_trips() -> Callable[[], int]:
    """Count this process's round trips to Redis (packed sends; a pipeline counts once)."""
    import redis.connection

    calls = [0]
    original: Any = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> Any:
        calls[0] += 1
        return original(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    return lambda: calls[0]


KeyedRunner = Callable[[str, Callable[[], None]], None]


def keyed_redis_py(url: str, ttl: float) -> KeyedRunner:
    client = redis.Redis.from_url(url)

    def run(key: str, body: Callable[[], None]) -> None:
        _blocking(redis.lock.Lock(client, key, timeout=ttl, sleep=0.1))(body)

    return run


def keyed_python_redis_lock(url: str, ttl: float) -> KeyedRunner:
    import redis_lock

    client = redis.Redis.from_url(url)

    def run(key: str, body: Callable[[], None]) -> None:
        _blocking(redis_lock.Lock(client, key, expire=max(1, round(ttl))))(body)

    return run


def keyed_redlock_deco(url: str, ttl: float) -> KeyedRunner:
    from redlock_deco import locked, register_provider

    register_provider("default", url)

    @locked("{key}", prefix="", ttl=ttl, wait=None)
    def run(key: str, body: Callable[[], None]) -> None:
        body()

    return run


#: name -> factory(url, ttl) of ``run(key, body)``: one client, any key (the many-names runs)
KEYED: dict[str, Callable[[str, float], KeyedRunner]] = {
    "redis-py Lock": keyed_redis_py,
    "python-redis-lock": keyed_python_redis_lock,
    "redlock-deco @locked": keyed_redlock_deco,
}
