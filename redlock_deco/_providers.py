"""The provider registry: a name -> the Redis client(s) a lock or semaphore runs on.

Resolution is lazy (on the first call that needs it, never at decoration or import time),
thread-safe (one lock around building; lock-free cached reads on the hot path) and fork-safe:
a forked child drops every client the registry built and every factory result, and builds its
own on first use, so it never shares a parent's sockets. Client instances registered by the
application are used as given; redis-py's connection pool already resets itself in a child.

A provider is registered as one *source* and resolved per *flavour*: the sync flavour today,
and asyncio clients per event loop beside it, without reshaping the registry.

Why one module: the clients a URL builds (their timeouts, their counted retries, the asyncio
connections' fitness check) are the registry's to make; split off, a URL client's settings
would live apart from the one place that decides which client a name gets.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Callable
from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError
from redis.retry import Retry

from . import _process as process
from ._drivers import AsyncTarget, SyncTarget, count_resent, readable
from ._errors import ProviderError, ProviderNotFound
from ._fanout import QuorumAsyncTarget, QuorumSyncTarget
from ._pools import remember_single

URL_SCHEMES = ("redis", "rediss", "unix")
_SYNC_CLIENTS: tuple[type, ...] = (redis.Redis, redis.RedisCluster)
_ASYNC_CLIENTS: tuple[type, ...] = (redis.asyncio.Redis, redis.asyncio.RedisCluster)

#: A client to run on (Sentinel's ``master_for`` gives a ``redis.Redis``).
Client: TypeAlias = (
    "redis.Redis | redis.RedisCluster | redis.asyncio.Redis | redis.asyncio.RedisCluster"
)
#: One server: a client, or a Redis URL (``redis://``, ``rediss://``, ``unix://``).
Server: TypeAlias = "str | Client"
#: One server, or a quorum of 3 or more independent masters.
Servers: TypeAlias = "Server | list[Server] | tuple[Server, ...]"
#: What ``register_provider`` takes: servers, or a zero-argument factory returning them
#: (called once per process, and per event loop for asyncio).
Provider: TypeAlias = "Servers | Callable[[], Servers]"

# name -> (what was registered, what async code runs on if registered apart): one store per
# registration, and each target built is stamped with the very tuple it was built from (see
# sync_target): an interrupt inside register_provider, after the new source was stored and
# before a loop's target was dropped, left that loop locking on the old server while the
# rest of the process locked on the new one -- two holders of one name (review 66, F1).
_registered: dict[str, tuple[object, object | None]] = {}
_UNBUILT = object()  # (no stamp: never matches a registration, nor its absence)

# Clients built from URLs: a stalled server must not make a call with wait=W last as long as
# the stall (redis-py 5 sets no socket timeout at all; 8 sets 5 s and retries 3 times). A
# command fails after SOCKET_TIMEOUT, so a call ends within wait + SOCKET_TIMEOUT, or raises
# redis' TimeoutError/ConnectionError. A timeout is never retried: a command whose reply was
# lost may have run, and re-sending a release that ran makes a clean release look like a
# lost lease. A ConnectionError is retried URL_RETRIES times: on a pooled connection the
# server closed while idle (its `timeout`, a proxy), the command never ran, and redis.asyncio
# only finds out by failing it. (A reset after the command ran is a ConnectionError too: what
# is re-sent is counted, see CountedRetry.) A URL's own query parameters
# (``?socket_timeout=10``) win.
SOCKET_TIMEOUT = 2.0
URL_RETRIES = 1


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``, safe for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


def _describe(value: object) -> str:
    return repr(redact(value)) if isinstance(value, str) else type(value).__name__


def _check_source(name: str, value: object) -> None:
    if isinstance(value, str):
        scheme = value.partition("://")[0]
        if scheme not in URL_SCHEMES:
            raise ProviderError(
                f"provider {name!r}: {_describe(value)} is not a Redis URL; use one of "
                + ", ".join(f"{s}://" for s in URL_SCHEMES),
                provider=name,
            )
    elif isinstance(value, (list, tuple)):
        if len(value) < 3:
            raise ProviderError(
                f"provider {name!r}: a quorum needs at least 3 independent masters, got "
                f"{len(value)}; register one client or URL for a single Redis",
                provider=name,
            )
        for node in value:
            if isinstance(node, (list, tuple)):
                raise ProviderError(f"provider {name!r}: quorum lists cannot nest", provider=name)
            _check_source(name, node)
    elif not isinstance(value, (*_SYNC_CLIENTS, *_ASYNC_CLIENTS)) and not callable(value):
        raise ProviderError(
            f"provider {name!r}: expected a redis client, a redis:// URL or a zero-argument "
            f"callable returning one, got {_describe(value)}",
            provider=name,
        )


def register_provider(name: str, provider: Provider, *, asyncio: Provider | None = None) -> None:
    """Register ``provider`` (client, URL, or zero-argument factory) under ``name``.

    ``asyncio``: what async code of this name runs on instead, when ``provider`` is a sync
    client (or a factory of one) -- an application's ready-made pair, or fakeredis's
    ``FakeRedis`` and ``FakeAsyncRedis`` on one ``FakeServer``. A factory is called once per
    event loop (an asyncio client belongs to its loop). Without it, a URL serves both.

    Replacing a registration drops whatever was built from the old one in this process.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"provider name must be a non-empty str, got {name!r}")
    _check_source(name, provider)
    if asyncio is not None:
        _check_source(name, asyncio)
        if isinstance(asyncio, _SYNC_CLIENTS):
            raise _wrong_kind(name, asyncio, "async")
    for client in provider if isinstance(provider, (list, tuple)) else (provider,):
        remember_single(client)  # (a forked child's: see there)
    with process.registry_lock:
        _registered[name] = (provider, asyncio)
        _forget(name)  # (early: what was built from the old one is rebuilt anyway)


def unregister_provider(name: str) -> None:
    """Forget the provider ``name`` (no error if it was not registered)."""
    with process.registry_lock:
        _registered.pop(name, None)
        _forget(name)


def _forget(name: str) -> None:
    target = process.sync_targets.pop(name, None)
    if target is not None:
        target.retire()  # its worker threads end once their queued work is done
    for state in process.loop_states():
        state.retire(name)


def registered(name: str) -> object:
    """What was registered under ``name`` (for code that registers it again elsewhere)."""
    return _registered[name][0]


def registered_names() -> list[str]:
    return list(_registered)


def _source(name: str, registration: tuple[object, object | None] | None) -> object:
    if registration is not None:
        return registration[0]
    url = os.environ.get("REDIS_URL") if name == "default" else None
    if url:
        _check_source(name, url)
        return url
    raise ProviderNotFound(name)


def _wrong_kind(name: str, value: object, needed: str) -> ProviderError:
    given = "an asyncio" if isinstance(value, _ASYNC_CLIENTS) else "a sync"
    register = (
        "redis.Redis / redis.RedisCluster"
        if needed == "sync"
        else "redis.asyncio.Redis / redis.asyncio.RedisCluster"
    )
    user = "a sync function or primitive" if needed == "sync" else "async code"
    pair = (
        "; or give async code its own: register_provider(name, sync_client, asyncio=...)"
        if needed == "async"
        else ""
    )
    return ProviderError(
        f"provider {name!r} gives {given} client ({type(value).__name__}), but {user} needs "
        f"{'a sync' if needed == 'sync' else 'an asyncio'} client: register a {register}, "
        f"a factory returning one, or a URL (URLs serve both sync and async code){pair}",
        provider=name,
    )


def _client(name: str, value: object, flavour: str, *, node: bool = False) -> Any:
    """Turn a URL or client into a client of ``flavour`` ("sync" or "async").

    Quorum masters built from URLs get short timeouts and no retries: a dead master must cost
    a quorum round little, and the round itself is the retry.
    """
    wanted, other = (
        (_SYNC_CLIENTS, _ASYNC_CLIENTS) if flavour == "sync" else (_ASYNC_CLIENTS, _SYNC_CLIENTS)
    )
    if isinstance(value, str):
        return _from_url(value, flavour, node=node)
    if isinstance(value, wanted):
        return value
    if isinstance(value, other):
        raise _wrong_kind(name, value, flavour)
    raise ProviderError(
        f"provider {name!r}: got {_describe(value)}, expected a redis client or a Redis URL",
        provider=name,
    )


class CountedRetry(Retry):
    """redis-py's Retry, counting each command it sends again (``resent()``)."""

    def call_with_retry(self, do: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        sent = 0

        def counted() -> Any:
            nonlocal sent
            sent += 1
            if sent > 1:
                count_resent()
            return do()

        return super().call_with_retry(counted, *args, **kwargs)


class CountedAsyncRetry(AsyncRetry):
    """CountedRetry for redis.asyncio."""

    async def call_with_retry(self, do: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        sent = 0

        async def counted() -> Any:
            nonlocal sent
            sent += 1
            if sent > 1:
                count_resent()
            return await do()

        return await super().call_with_retry(counted, *args, **kwargs)


def url_client_options(flavour: str, *, node: bool = False) -> dict[str, Any]:
    """The keyword arguments of clients built from URLs (quorum masters: shorter, and no
    retry at all -- the quorum round is the retry)."""
    timeout = 1.0 if node else SOCKET_TIMEOUT
    retries = 0 if node else URL_RETRIES
    retry_type = CountedRetry if flavour == "sync" else CountedAsyncRetry
    retry = retry_type(NoBackoff(), retries, supported_errors=(ConnectionError,))
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": retry,
    }
    if retries:
        # redis-py 5.0's clients re-raise every error not listed here before their retry
        # policy is asked (an empty list by default), so a ConnectionError was never retried
        # there: one reset after an acquire or a release had run raised out of the call
        # (review 15: 3 of 3 runs, asyncio on redis-py 5.0.1). Later versions ask the policy.
        options["retry_on_error"] = [ConnectionError]
    return options


# A command of a URL client's redis.asyncio.Redis is on its way (a ContextVar: the task's
# own) and has not been written yet: its connection checks it is fit at the first write.
_UNWRITTEN: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "redlock_deco_unwritten", default=False
)


class _CheckedRedis(redis.asyncio.Redis):
    """The redis.asyncio client of a URL: each command marks itself unwritten, for
    :class:`_CheckedConnection`. A subscriber's commands (PubSub) and pipelines are not
    marked: their connections have replies and messages waiting by design."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        _UNWRITTEN.set(True)
        try:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        finally:
            # set, not reset by token: a coroutine closed at a loop's shutdown runs this in
            # another context, where a token's reset raises ValueError (review 12).
            _UNWRITTEN.set(False)


class _CheckedConnection:
    """A mixin for the connections of a URL's redis.asyncio client: before a command is
    written, a connection the server closed while it sat in the pool (its reader at EOF, or
    anything to read on a plain socket) is disconnected, so the command goes out on a new
    connection, once, as the sync direct path's poll (``_drivers.Spares``) does.

    redis-py's own check at checkout misses it (8.x skips it while maintenance notifications
    are "auto", the default; 5.0 reads EOF as "nothing to read"): the command was written to
    a dead socket, its read failed, and the retry sent it again, counted as re-sent -- so a
    release after a server restart (the lease gone, a second holder in) found no key and was
    judged by the holder's clock a clean release (review 9, 05: no LockLost). A write cannot
    run on a connection the server had closed before it; only a re-send after a command that
    may have run is counted.
    """

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if _UNWRITTEN.get():
            # Once per command, at its first write: later writes of the same call (a connect's
            # handshake, sent before its replies are read) find replies waiting on a healthy
            # socket by design (under load the handshake's second command found the first
            # one's reply, and a check there closed the connection mid-connect).
            _UNWRITTEN.set(False)
            if await _closed_while_idle(self):
                await self.disconnect()  # type: ignore[attr-defined]
        await super().send_packed_command(command, check_health)  # type: ignore[misc]


async def _closed_while_idle(conn: Any) -> bool:
    reader = getattr(conn, "_reader", None)
    writer = getattr(conn, "_writer", None)
    if reader is None or writer is None:
        return False  # not connected: redis-py connects it
    if _ended(reader):
        return True
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is None or not readable(sock):
        return False
    if transport.get_extra_info("sslcontext") is None:
        return True  # anything to read on an idle plain socket: the server's close, or junk
    # TLS: records (a session ticket) may wait on a healthy socket. Let the loop read what
    # is there, then ask the stream (review 10, 02: a restart during a body that never gave
    # the loop a turn went unseen, and the release went out on the dead socket).
    for _ in range(3):
        await asyncio.sleep(0)
    return _ended(reader)


def _ended(reader: Any) -> bool:
    return reader.exception() is not None or bool(reader.at_eof())


def _from_url(url: str, flavour: str, *, node: bool) -> Any:
    kwargs = url_client_options(flavour, node=node)
    if flavour == "sync":
        return redis.Redis.from_url(url, **kwargs)
    client = _CheckedRedis.from_url(url, **kwargs)
    pool = client.connection_pool
    plain = pool.connection_class  # redis://, rediss:// or unix://: as the URL says
    pool.connection_class = type(f"Checked{plain.__name__}", (_CheckedConnection, plain), {})
    process.loop_state().clients.append(client)  # ours to close at the loop's shutdown
    return client


def _resolve(name: str, source: object) -> object:
    """A factory's product (called once per process, or per loop for asyncio)."""
    if callable(source) and not isinstance(source, (*_SYNC_CLIENTS, *_ASYNC_CLIENTS)):
        factory: Callable[[], object] = source
        produced = factory()
        if callable(produced) and not isinstance(produced, (*_SYNC_CLIENTS, *_ASYNC_CLIENTS)):
            raise ProviderError(
                f"provider {name!r}: the factory returned another callable "
                f"({_describe(produced)}), expected a redis client, a URL or a list of them",
                provider=name,
            )
        try:
            _check_source(name, produced)
        except ProviderError as exc:
            raise ProviderError(
                f"provider {name!r}: the factory returned {_describe(produced)}, expected a "
                "redis client, a Redis URL, or a list of 3+ of them",
                provider=name,
            ) from exc
        return produced
    return source


def _sync_target(name: str, source: object) -> SyncTarget | QuorumSyncTarget:
    value = _resolve(name, source)
    if isinstance(value, (list, tuple)):
        return QuorumSyncTarget(
            [
                SyncTarget(_client(name, v, "sync", node=True), owned=isinstance(v, str))
                for v in value
            ]
        )
    return SyncTarget(_client(name, value, "sync"), owned=isinstance(value, str))


def _async_target(name: str, source: object) -> AsyncTarget | QuorumAsyncTarget:
    value = _resolve(name, source)
    if isinstance(value, (list, tuple)):
        return QuorumAsyncTarget([AsyncTarget(_client(name, v, "async", node=True)) for v in value])
    return AsyncTarget(_client(name, value, "async"))


def sync_target(name: str) -> SyncTarget | QuorumSyncTarget:
    """The sync target of provider ``name``, built on first use in this process, and again
    once the provider is registered anew (its stamp: see _registered)."""
    target: SyncTarget | QuorumSyncTarget | None = process.sync_targets.get(name)
    if target is not None and process.sync_built.get(name, _UNBUILT) is _registered.get(name):
        return target
    with process.registry_lock:
        registration = _registered.get(name)
        target = process.sync_targets.get(name)
        if target is None or process.sync_built.get(name, _UNBUILT) is not registration:
            if target is not None:  # (a registration cut short before it dropped it)
                del process.sync_targets[name]
                target.retire()
            target = _sync_target(name, _source(name, registration))
            process.sync_built[name] = registration
            process.sync_targets[name] = target
        return target


def async_target(name: str) -> AsyncTarget | QuorumAsyncTarget:
    """The asyncio target of provider ``name`` for the running event loop (built again once
    the provider is registered anew, as sync_target's).

    URLs and factories are resolved once per loop (a client belongs to the loop that made
    it); a registered asyncio client instance is used as given.
    """
    state = process.loop_state()
    registration = _registered.get(name)
    target: AsyncTarget | QuorumAsyncTarget | None = state.targets.get(name)
    if target is not None and state.built.get(name, _UNBUILT) is registration:
        return target
    if target is not None:  # (a registration cut short before it dropped it)
        state.retire(name)
    source = None if registration is None else registration[1]
    if source is None:
        target = _async_target(name, _source(name, registration))
    else:
        try:
            target = _async_target(name, source)
        except ProviderError as exc:
            raise ProviderError(
                f"provider {name!r}: its asyncio= side must give asyncio clients "
                f"(redis.asyncio.Redis, fakeredis.FakeAsyncRedis...): {exc}",
                provider=name,
            ) from exc
    state.built[name] = registration
    state.targets[name] = target
    return target
